"""The pull-request flow end to end: real PyGithub against the loopback server."""

from __future__ import annotations

import json

import pytest

from tests.github.conftest import GH, Harness
from tests.github.fakes import FakeRunner

MARKER = "<!-- kernelopt:report -->"


def _pr_event(h: Harness, gh: GH, **extra: object) -> object:
    return h.event("pull_request", pull_request__number=gh.pr, number=gh.pr, pull_request__head__sha=gh.head,
                   **extra)


def test_pr_run_opens_one_follow_up_pr_and_one_comment(harness: Harness, gh: GH, repo_dir, fake_runner) -> None:
    harness.use_server(gh)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    # pkg/b.py changed; attn's entry pkg.a imports it: only attn ran.
    assert fake_runner.calls == ["attn.fp32"]
    follow = gh.state.pulls_from("kernelopt/pr-1")
    assert len(follow) == 1
    pr = follow[0]
    assert pr["base_ref"] == "feature" and pr["state"] == "open" and pr["draft"] is True
    assert pr["labels"] == ["performance"] and pr["reviewers"] == ["carol"]
    assert "| attn | fp32 | cuda |" in pr["body"] and "1.200×" in pr["body"]
    assert "xychart-beta" in pr["body"] and "Reproduce" in pr["body"] and "NVIDIA H200" in pr["body"]
    files = gh.state.files_at("kernelopt/pr-1")
    assert "kernelopt/packs/attn.json" in files and "kernelopt/README.md" in files
    assert json.loads(files["kernelopt/packs/attn.json"])["format"] == "kernelopt-pack"
    assert files["pkg/b.py"] == "def build():\n    return 1\n"  # built on the PR head
    assert gh.state.commits[gh.state.refs["heads/kernelopt/pr-1"]]["parents"] == [gh.head]
    comments = gh.state.comments_on(gh.pr)
    assert len(comments) == 1 and comments[0]["body"].startswith(MARKER)
    assert f"pull/{pr['number']}" in comments[0]["body"]
    assert run.outputs["speedup"] == "1.2000" and run.outputs["verified-kernels"] == "1"
    assert run.outputs["pr-url"].endswith(f"/pull/{pr['number']}")
    assert run.outputs["report-path"].endswith("report.md")
    assert "kernelopt: PR #1" in run.summary and "| attn | fp32 |" in run.summary


def test_second_run_updates_the_same_pr_comment_and_moves_the_ref(harness: Harness, gh: GH, repo_dir,
                                                                  fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    assert harness.bot("pull_request", _pr_event(harness, gh), repo_dir).code == 0
    pr_number = gh.state.pulls_from("kernelopt/pr-1")[0]["number"]
    comment_id = gh.state.comments_on(gh.pr)[0]["id"]
    first_ref = gh.state.refs["heads/kernelopt/pr-1"]

    new_head = gh.state.commit_files("feature", {"pkg/b.py": "def build():\n    return 2\n"}, "again")
    gh.state.pulls[gh.pr]["head_sha"] = new_head
    fake_runner.speedup = 1.5
    run = harness.bot("pull_request", h_event := harness.event(
        "pull_request", pull_request__number=gh.pr, pull_request__head__sha=new_head), repo_dir)
    assert h_event and run.code == 0, run.text
    follow = gh.state.pulls_from("kernelopt/pr-1")
    assert [p["number"] for p in follow] == [pr_number]
    assert "1.500×" in follow[0]["body"]
    comments = gh.state.comments_on(gh.pr)
    assert [c["id"] for c in comments] == [comment_id]
    assert "1.500×" in comments[0]["body"]
    second_ref = gh.state.refs["heads/kernelopt/pr-1"]
    assert second_ref != first_ref
    assert gh.state.commits[second_ref]["parents"] == [new_head]  # force-moved, rebuilt on the new head
    assert ("PATCH", "/repos/acme/models/git/refs/heads/kernelopt/pr-1") in gh.server.requests("PATCH")


def test_nothing_verified_closes_the_follow_up_pr_with_a_comment(harness: Harness, gh: GH, repo_dir,
                                                                 fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    assert harness.bot("pull_request", _pr_event(harness, gh), repo_dir).code == 0
    follow = gh.state.pulls_from("kernelopt/pr-1")[0]
    fake_runner.default = "nothing"
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    assert follow["state"] == "closed"
    closing = gh.state.comments_on(follow["number"])
    assert len(closing) == 1 and "verified no kernel replacement" in closing[0]["body"]
    assert "attn.fp32: no kernel passed the gates (rejected by perf gate)" in closing[0]["body"]
    sticky = gh.state.comments_on(gh.pr)
    assert len(sticky) == 1
    closed_url = f"https://github.test/acme/models/pull/{follow['number']}"
    assert f"**No follow-up PR:** nothing verified, so the earlier one ({closed_url}) was closed." in sticky[0]["body"]
    assert run.outputs["pr-url"] == "" and run.outputs["verified-kernels"] == "0"


def test_nothing_verified_without_an_earlier_pr_closes_nothing(harness: Harness, gh: GH, repo_dir,
                                                               fake_runner: FakeRunner) -> None:
    """Before: "Follow-up PR: nothing verified; closed ..." named a PR that never existed."""
    harness.use_server(gh)
    fake_runner.default = "nothing"
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    assert not gh.state.pulls_from("kernelopt/pr-1")
    body = gh.state.comments_on(gh.pr)[0]["body"]
    assert "No follow-up PR: nothing verified." in body
    assert "closed" not in body and "kernelopt/pr-1" not in body
    assert "No follow-up PR: nothing verified." in run.summary


@pytest.mark.parametrize(("action", "trigger"), [
    ("opened", "Triggered by PR #1 being opened."),
    ("synchronize", "Triggered by a push to PR #1."),
    ("reopened", "Triggered by PR #1 being reopened."),
    ("ready_for_review", "Triggered by PR #1 being marked ready for review."),
])
def test_the_report_names_the_event_that_triggered_it(harness: Harness, gh: GH, repo_dir, action: str,
                                                      trigger: str) -> None:
    harness.use_server(gh)
    assert harness.bot("pull_request", _pr_event(harness, gh, action=action), repo_dir).code == 0
    body = gh.state.comments_on(gh.pr)[0]["body"]
    assert trigger in body, body[:400]


def test_failed_target_is_reported_and_others_still_run(harness: Harness, gh: GH, repo_dir,
                                                        fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    gh.state.pull_files[gh.pr] = ["pkg/b.py", "models/mlp.py"]
    fake_runner.plan = {"mlp": "raise"}
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    assert fake_runner.calls == ["attn.fp32", "mlp.fp32", "mlp.bf16"]
    body = gh.state.comments_on(gh.pr)[0]["body"]
    assert "**failed**" in body and "engine exploded on mlp" in body
    # annotation on the config line of the failing target, message escaped
    assert "::error file=.kernelopt.yml,line=2,title=kernelopt::target mlp (fp32) failed" in run.text
    assert "::stop-commands::" in run.text
    assert gh.state.pulls_from("kernelopt/pr-1")  # attn verified: the follow-up PR exists


def test_unaffected_pr_runs_nothing(harness: Harness, gh: GH, repo_dir, fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    gh.state.pull_files[gh.pr] = ["README.md"]
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0 and fake_runner.calls == []
    assert not gh.state.comments_on(gh.pr) and not gh.state.pulls_from("kernelopt/pr-1")
    assert "no target is affected" in run.summary


def test_fork_pull_request_event_never_runs(harness: Harness, gh: GH, repo_dir, fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    ev = _pr_event(harness, gh, pull_request__head__repo={"full_name": "mallory/models"})
    run = harness.bot("pull_request", ev, repo_dir)
    assert run.code == 0 and fake_runner.calls == []
    assert "fork" in run.summary and gh.server.requests("POST") == []


def test_server_error_on_pr_creation_leaves_no_pr(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    gh.server.fail("POST", r"/pulls$", status=502)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 1
    assert not gh.state.pulls_from("kernelopt/pr-1")
    assert ("GitHub API: could not open or update the PR from kernelopt/pr-1 into feature: GitHub server error (502"
            in run.text)
    assert "the next run opens or updates its PR" in run.text
    assert "::error title=kernelopt%3A GitHub API::" in run.text
    assert run.summary.startswith("## kernelopt: publishing failed") and "502" in run.summary
    # nothing half-made: the report went up, and says the PR could not be opened (it once was lost)
    (comment,) = gh.state.comments_on(gh.pr)
    assert "The follow-up PR could not be opened" in comment["body"] and "502" in comment["body"]
    # a re-run finds the branch, moves it, and opens the PR
    rerun = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert rerun.code == 0, rerun.text
    assert len(gh.state.pulls_from("kernelopt/pr-1")) == 1


def test_rate_limit_before_the_commit_leaves_nothing(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    gh.server.fail("POST", r"/git/commits$", rate_limit=True)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 1
    assert "rate limit exceeded (403) (resets at" in run.text
    assert "heads/kernelopt/pr-1" not in gh.state.refs
    assert not gh.state.pulls_from("kernelopt/pr-1")
    (comment,) = gh.state.comments_on(gh.pr)  # the report still says what was measured, and why no PR
    assert "The follow-up PR could not be opened" in comment["body"]


def test_not_found_repository_is_a_clear_error(harness: Harness, gh: GH, repo_dir, monkeypatch) -> None:
    harness.use_server(gh)
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/nope")
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 1
    assert "could not read repository acme/nope: not found (404)" in run.text


def test_max_open_proposals_is_honoured(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    cfg = (repo_dir / ".kernelopt.yml").read_text().replace("max_open_proposals: 5", "max_open_proposals: 1")
    (repo_dir / ".kernelopt.yml").write_text(cfg)
    gh.state.commit_files("kernelopt/pr-99", {"x": "y"})
    gh.state.open_pull("kernelopt/pr-99", "main")
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    assert not gh.state.pulls_from("kernelopt/pr-1") and "heads/kernelopt/pr-1" not in gh.state.refs
    assert "max\\_open\\_proposals" in gh.state.comments_on(gh.pr)[0]["body"]


def test_fork_prs_from_kernelopt_branches_do_not_count_as_proposals(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    cfg = (repo_dir / ".kernelopt.yml").read_text().replace("max_open_proposals: 5", "max_open_proposals: 1")
    (repo_dir / ".kernelopt.yml").write_text(cfg)
    gh.state.open_pull("kernelopt/pr-99", "main", head_repo="mallory/fork", head_sha="f" * 40)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    assert len(gh.state.pulls_from("kernelopt/pr-1")) == 1


def test_with_retries_a_passing_server_error_is_ridden_out(harness: Harness, gh: GH, repo_dir, monkeypatch) -> None:
    harness.use_server(gh)
    monkeypatch.setenv("KERNELOPT_GITHUB_RETRIES", "2")
    gh.server.fail("POST", r"/git/trees$", status=503)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 0, run.text
    assert len(gh.server.requests("POST", r"/git/trees$")) == 2
    assert len(gh.state.pulls_from("kernelopt/pr-1")) == 1


def test_with_retries_a_long_rate_limit_fails_fast(harness: Harness, gh: GH, repo_dir, monkeypatch) -> None:
    harness.use_server(gh)
    monkeypatch.setenv("KERNELOPT_GITHUB_RETRIES", "3")
    gh.server.fail("POST", r"/pulls$", rate_limit=True, count=10)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 1
    assert "could not open or update the PR from kernelopt/pr-1" in run.text and "rate limit" in run.text
    assert not gh.state.pulls_from("kernelopt/pr-1")
    # the report still went up, saying why there is no follow-up PR (it was lost with the error)
    (comment,) = gh.state.comments_on(gh.pr)
    assert "The follow-up PR could not be opened" in comment["body"] and "| attn |" in comment["body"]


def test_a_forbidden_pull_request_still_leaves_the_report(harness: Harness, gh: GH, repo_dir) -> None:
    """A repository where Actions may not open pull requests answers 403 to POST /pulls."""
    harness.use_server(gh)
    gh.server.fail("POST", r"/pulls$", status=403, count=5)
    run = harness.bot("pull_request", _pr_event(harness, gh), repo_dir)
    assert run.code == 1, run.text
    (comment,) = gh.state.comments_on(gh.pr)
    assert "The follow-up PR could not be opened" in comment["body"] and "403" in comment["body"]


def test_packs_of_targets_not_rerun_stay_in_the_follow_up_pr(harness: Harness, gh: GH, repo_dir,
                                                             fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    gh.state.pull_files[gh.pr] = ["pkg/b.py", "models/mlp.py"]
    assert harness.bot("pull_request", _pr_event(harness, gh), repo_dir).code == 0
    assert {"kernelopt/packs/attn.json", "kernelopt/packs/mlp.json"} <= set(gh.state.files_at("kernelopt/pr-1"))
    gh.state.pull_files[gh.pr] = ["pkg/b.py"]  # the next push touches only attn's code
    fake_runner.calls.clear()
    assert harness.bot("pull_request", _pr_event(harness, gh), repo_dir).code == 0
    assert fake_runner.calls == ["attn.fp32"]
    files = gh.state.files_at("kernelopt/pr-1")
    assert {"kernelopt/packs/attn.json", "kernelopt/packs/mlp.json"} <= set(files)
    assert 'install("kernelopt/packs/mlp.json")' in files["kernelopt/README.md"]
    assert len(gh.state.pulls_from("kernelopt/pr-1")) == 1
