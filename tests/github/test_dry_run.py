"""Local mode: everything that would be published lands in DIR; no token, no network."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.github.conftest import Harness
from tests.github.fakes import FakeRunner


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


@pytest.fixture
def git_repo(repo_dir: Path) -> tuple[Path, str, str]:
    _git(repo_dir, "init", "-q", "-b", "main")
    _git(repo_dir, "add", "-A")
    _git(repo_dir, "commit", "-q", "-m", "initial")
    base = _git(repo_dir, "rev-parse", "HEAD")
    (repo_dir / "models" / "mlp.py").write_text("import torch\n# faster\n")
    _git(repo_dir, "commit", "-q", "-am", "change the model")
    return repo_dir, base, _git(repo_dir, "rev-parse", "HEAD")


def test_pull_request_dry_run_writes_everything(harness: Harness, git_repo, fake_runner: FakeRunner,
                                                monkeypatch) -> None:
    repo, base, head = git_repo
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")  # would fail if anything were sent
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    run = harness.bot("pull_request", ev, repo, "--dry-run", out=out)
    assert run.code == 0, run.text
    assert fake_runner.calls == ["mlp.fp32", "mlp.bf16"]  # git diff base...head: models/mlp.py
    publish = json.loads((out / "publish.json").read_text())
    assert publish["dry_run"] is True
    prop = publish["proposal"]
    assert prop["branch"] == "kernelopt/pr-1" and prop["base"] == "feature" and prop["parent_sha"] == head
    assert prop["labels"] == ["performance"] and prop["reviewers"] == ["carol"] and prop["draft"] is True
    assert prop["title"] == "kernelopt: verified kernels for #1 (1.20x on mlp)"
    assert (out / "pr_body.md").read_text().startswith("<!-- kernelopt:proposal -->")
    assert (out / "comment.md").read_text().startswith("<!-- kernelopt:report -->")
    pack = json.loads((out / "files" / "kernelopt" / "packs" / "mlp.json").read_text())
    assert len(pack["entries"]) == 2 and set(pack["measured"]["dtypes"]) == {"fp32", "bf16"}
    assert 'install("kernelopt/packs/mlp.json")' in (out / "files" / "kernelopt" / "README.md").read_text()
    assert (out / "results" / "mlp.bf16" / "result.json").is_file()
    assert [a["action"] for a in publish["actions"]] == ["proposal", "sticky_comment"]


def test_issue_comment_dry_run_records_reactions_and_reply(harness: Harness, git_repo, fake_runner: FakeRunner) -> None:
    repo, _, head = git_repo
    out = harness.tmp / "dry"
    ev = harness.event("issue_comment", comment__id=77, comment__body="/kernelopt run mlp --budget 2")
    run = harness.bot("issue_comment", ev, repo, "--dry-run", out=out)
    assert run.code == 0, run.text
    publish = json.loads((out / "publish.json").read_text())
    assert publish["reactions"] == ["eyes", "rocket"]
    assert publish["proposal"]["parent_sha"] == head
    assert "ran 2 target run(s)" in (out / "replies" / "1.md").read_text()
    job = json.loads((out / "results" / "mlp.fp32" / "job.json").read_text())
    assert job["budget"]["candidates"] == 2


def test_dry_run_assumed_permission_can_refuse(harness: Harness, git_repo) -> None:
    repo, _, _ = git_repo
    out = harness.tmp / "dry"
    ev = harness.event("issue_comment", comment__id=5)
    assert harness.bot("issue_comment", ev, repo, "--dry-run", "--permission", "read", out=out).code == 0
    publish = json.loads((out / "publish.json").read_text())
    assert publish["reactions"] == []  # permission comes first: a refused commenter gets nothing posted
    assert not (out / "replies").exists()


def test_nothing_verified_dry_run_records_the_close(harness: Harness, git_repo, fake_runner: FakeRunner) -> None:
    repo, base, head = git_repo
    fake_runner.default = "nothing"
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    assert harness.bot("pull_request", ev, repo, "--dry-run", out=out).code == 0
    publish = json.loads((out / "publish.json").read_text())
    close = next(a for a in publish["actions"] if a["action"] == "close_proposal")
    assert close["branch"] == "kernelopt/pr-1" and "verified no kernel replacement" in close["comment"]
    assert not (out / "pr_body.md").exists()
    # A dry run cannot know whether kernelopt/pr-1 was ever opened: the report must not say it closed it.
    comment = (out / "comment.md").read_text()
    assert "No follow-up PR: nothing verified." in comment
    assert "closed" not in comment and "(dry run) PR" not in comment


def test_llm_key_is_not_written_next_to_results(harness: Harness, git_repo, monkeypatch) -> None:
    repo, base, head = git_repo
    cfg = (repo / ".kernelopt.yml").read_text() + "llm: {base_url: 'https://llm.test/v1', model: m}\n"
    (repo / ".kernelopt.yml").write_text(cfg)
    monkeypatch.setenv("KERNELOPT_LLM_API_KEY", "sk-very-secret")
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    assert harness.bot("pull_request", ev, repo, "--dry-run", out=out).code == 0
    for f in out.rglob("*"):
        if f.is_file():
            assert "sk-very-secret" not in f.read_text()
    assert harness.runner.calls


def test_unavailable_llm_agents_are_said_in_the_comment_the_pr_body_and_the_summary(
        harness: Harness, git_repo, fake_runner: FakeRunner) -> None:
    """An endpoint that could not be used must not pass for a run with the agents (issue 15, item 4)."""
    repo, base, head = git_repo
    fake_runner.llm_unavailable = "connection refused by https://llm.test/v1"
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    run = harness.bot("pull_request", ev, repo, "--dry-run", out=out)
    assert run.code == 0, run.text
    line = "LLM agents unavailable: tuner only (connection refused by https:\u200b//llm.test/v1)"
    comment, body = (out / "comment.md").read_text(), (out / "pr_body.md").read_text()
    assert comment.count(line) == 1  # once, although two runs (fp32, bf16) were without the agents
    assert line in body and line in run.summary


def test_no_llm_line_when_the_agents_were_not_asked_for(harness: Harness, git_repo, fake_runner: FakeRunner) -> None:
    repo, base, head = git_repo
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    assert harness.bot("pull_request", ev, repo, "--dry-run", out=out).code == 0
    assert "LLM agents" not in (out / "comment.md").read_text() + (out / "pr_body.md").read_text()


def test_the_pr_bodys_reproduce_commands_parse_as_printed(harness: Harness, git_repo) -> None:
    """Every line of the PR body's Reproduce block is a `kernelopt optimize` command line that the
    CLI accepts (options, choices), built from validated fields and shell-quoted."""
    import re
    import shlex

    import click

    from kernelopt_bot.cli import main

    repo, base, head = git_repo
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    assert harness.bot("pull_request", ev, repo, "--dry-run", out=out).code == 0
    body = (out / "pr_body.md").read_text()
    block = re.search(r"## Reproduce\n\n```bash\n(.*?)\n```", body, re.S)
    assert block
    lines = block.group(1).splitlines()
    assert sorted(lines) == ["kernelopt optimize models/mlp.py --dtype bf16 --device cuda",
                             "kernelopt optimize models/mlp.py --dtype fp32 --device cuda"]
    for line in lines:
        args = shlex.split(line)
        assert args[:2] == ["kernelopt", "optimize"]
        with click.Context(main) as ctx:
            command = main.get_command(ctx, "optimize")
            assert command is not None
            command.make_context("optimize", args[2:], parent=ctx)  # raises on an unknown option or value
