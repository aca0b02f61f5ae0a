"""Each trigger through the same files Actions uses: GITHUB_EVENT_PATH, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_bot.errors import BadInputError
from kernelopt_bot.github import cli as bot_cli
from kernelopt_bot.github.events import IssueCommentEvent, PullRequestEvent, SweepEvent, load_event
from tests.github.conftest import EVENTS, GH, Harness
from tests.github.fakes import FakeRunner


@pytest.mark.parametrize(("name", "kind"), [("pull_request", PullRequestEvent), ("issue_comment", IssueCommentEvent),
                                            ("schedule", SweepEvent), ("workflow_dispatch", SweepEvent)])
def test_fixtures_parse(name: str, kind: type) -> None:
    ev = load_event(name, EVENTS / f"{name}.json")
    assert isinstance(ev, kind) and ev.repo.full_name == "acme/models"


def test_bad_payloads(tmp_path: Path) -> None:
    p = tmp_path / "e.json"
    p.write_text(json.dumps({"repository": {"full_name": "a/b"}, "pull_request": {"number": "1"}}))
    with pytest.raises(BadInputError, match=r"pull_request\.number should be int"):
        load_event("pull_request", p)
    with pytest.raises(BadInputError, match="event 'push' is not handled"):
        load_event("push", p)
    p.write_text("{not json")
    with pytest.raises(BadInputError, match="not readable JSON"):
        load_event("issue_comment", p)


def test_pull_request_from_actions_environment(harness: Harness, gh: GH, repo_dir: Path, monkeypatch) -> None:
    """No --event-name/--event-path: the bot reads GITHUB_EVENT_NAME and GITHUB_EVENT_PATH."""
    harness.use_server(gh)
    monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(harness.event("pull_request", pull_request__head__sha=gh.head)))
    monkeypatch.chdir(repo_dir)
    run = harness.invoke(bot_cli.bot, ["--out", str(harness.tmp / "o")])
    assert run.code == 0, run.text
    assert set(run.outputs) == {"speedup", "verified-kernels", "pr-url", "report-path"}
    assert run.outputs["verified-kernels"] == "1" and Path(run.outputs["report-path"]).is_file()
    assert run.summary.startswith("## kernelopt: PR #1 at")
    assert "| attn | fp32 | cuda | 1.0000 | 0.8333 | 1.200× | 1 | ok |" in run.summary


@pytest.mark.parametrize("event", ["schedule", "workflow_dispatch"])
def test_schedule_and_dispatch_sweep_everything(harness: Harness, gh: GH, repo_dir: Path, fake_runner: FakeRunner,
                                                event: str) -> None:
    harness.use_server(gh)
    fake_runner.plan = {"other": "failed"}
    run = harness.bot(event, harness.event(event), repo_dir)
    assert run.code == 0, run.text
    assert fake_runner.calls == ["attn.fp32", "mlp.fp32", "mlp.bf16", "other.fp32"]
    assert len(gh.state.pulls_from("kernelopt/nightly")) == 1
    assert run.outputs["pr-url"] and run.outputs["report-path"].endswith("sweep.md")
    assert "nightly sweep" in run.summary and "**failed**" in run.summary
    assert "::error file=.kernelopt.yml,line=8,title=kernelopt::target other (fp32) failed" in run.text


def test_missing_token_is_bad_input(harness: Harness, repo_dir: Path) -> None:
    run = harness.bot("pull_request", harness.event("pull_request"), repo_dir)
    assert run.code == 2 and "GITHUB_TOKEN is not set" in run.text
