"""Nightly sweeps: plan, shards with a failing target, merge with history, one sweep PR."""

from __future__ import annotations

import json
from pathlib import Path

from kernelopt_bot.github import cli as bot_cli
from tests.github.conftest import GH, Harness
from tests.github.fakes import FakeRunner


def _plan(h: Harness, repo: Path, shards: int) -> dict:
    run = h.invoke(bot_cli.sweep, ["plan", "--config", str(repo / ".kernelopt.yml"), "--shards", str(shards),
                                   "--output-name", "matrix"])
    assert run.code == 0, run.text
    matrix = json.loads(run.text.strip().splitlines()[-1])
    assert json.loads(run.outputs["matrix"]) == matrix
    return matrix


def test_plan_spreads_jobs_over_shards(harness: Harness, repo_dir: Path) -> None:
    m = _plan(harness, repo_dir, 2)
    assert m == {"include": [
        {"shard": "1/2", "index": 1, "total": 2, "jobs": "attn.fp32,mlp.bf16"},
        {"shard": "2/2", "index": 2, "total": 2, "jobs": "mlp.fp32,other.fp32"},
    ]}
    assert len(_plan(harness, repo_dir, 16)["include"]) == 4  # never more shards than jobs


def _shards(h: Harness, repo: Path, base: Path) -> list[Path]:
    dirs = []
    for i in (1, 2):
        d = base / f"shard-{i}"
        run = h.invoke(bot_cli.sweep, ["run", "--config", str(repo / ".kernelopt.yml"), "--shard", f"{i}/2",
                                       "--out", str(d), "--repo-root", str(repo)])
        assert run.code == 0, run.text  # a failing target never fails the shard
        dirs.append(d)
    return dirs


def test_shards_run_their_jobs_and_report_failures(harness: Harness, repo_dir: Path, fake_runner: FakeRunner) -> None:
    fake_runner.plan = {"other": "raise"}
    dirs = _shards(harness, repo_dir, harness.tmp)
    assert fake_runner.calls == ["attn.fp32", "mlp.bf16", "mlp.fp32", "other.fp32"]
    assert (dirs[0] / "shard-1-of-2.json").is_file() and (dirs[1] / "other.fp32" / "traceback.txt").is_file()
    shard2 = json.loads((dirs[1] / "shard-2-of-2.json").read_text())
    assert shard2["failed"] == ["other.fp32"]


def test_merge_dry_run_with_history_file(harness: Harness, repo_dir: Path, fake_runner: FakeRunner) -> None:
    fake_runner.plan = {"other": "failed"}
    dirs = _shards(harness, repo_dir, harness.tmp)
    history = harness.tmp / "history.json"
    history.write_text(json.dumps({"schema": "kernelopt-history/1", "runs": [
        {"time": "t", "sha": "s", "targets": {
            "mlp.fp32": {"status": "ok", "speedup": 1.5, "verified": 1, "keys": []},
            "other.fp32": {"status": "ok", "speedup": 1.1, "verified": 1, "keys": []}}}]}))
    out = harness.tmp / "merged"
    run = harness.invoke(bot_cli.sweep, ["merge", *map(str, dirs), "--out", str(out), "--config",
                                         str(repo_dir / ".kernelopt.yml"), "--repo-root", str(repo_dir),
                                         "--history", str(history), "--dry-run"])
    assert run.code == 0, run.text
    publish = json.loads((out / "publish.json").read_text())
    prop = publish["proposal"]
    assert prop["branch"] == "kernelopt/nightly" and prop["base"] == "main"
    assert prop["files"] == ["kernelopt/README.md", "kernelopt/packs/attn.json", "kernelopt/packs/mlp.json"]
    assert (out / "files" / "kernelopt" / "packs" / "mlp.json").is_file()
    report = (out / "sweep.md").read_text()
    assert "4 target run(s) across 2 shard(s): 3 ok, 1 failed" in report
    assert "other (fp32): boom" in report
    assert "mlp.fp32: speedup 1.500x → 1.200x" in report and "other.fp32: ran last time, failed now" in report
    hist = json.loads((out / "history.json").read_text())
    assert len(hist["runs"]) == 2 and hist["runs"][-1]["targets"]["other.fp32"]["status"] == "failed"
    assert "::error file=.kernelopt.yml,line=8,title=kernelopt::target other (fp32) failed: boom" in run.text
    assert run.outputs["report-path"].endswith("sweep.md") and "nightly sweep" in run.summary


def _merge(h: Harness, repo: Path, dirs: list[Path]) -> object:
    run = h.invoke(bot_cli.sweep, ["merge", *map(str, dirs), "--out", str(h.tmp / f"m{h.n}"), "--config",
                                   str(repo / ".kernelopt.yml"), "--repo-root", str(repo)])
    assert run.code == 0, run.text
    return run


def test_merge_publishes_once_updates_drops_and_keeps_history(harness: Harness, gh: GH, repo_dir: Path,
                                                              fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    fake_runner.plan = {"other": "failed"}
    run = _merge(harness, repo_dir, _shards(harness, repo_dir, harness.tmp / "n1"))
    nightly = gh.state.pulls_from("kernelopt/nightly")
    assert len(nightly) == 1 and nightly[0]["base_ref"] == "main"
    assert run.outputs["pr-url"].endswith(f"/pull/{nightly[0]['number']}")
    files = gh.state.files_at("kernelopt/nightly")
    assert {"kernelopt/packs/attn.json", "kernelopt/packs/mlp.json"} <= set(files)
    assert "kernelopt/packs/other.json" not in files
    assert len(json.loads(gh.state.files_at("kernelopt/history")["history.json"])["runs"]) == 1

    # the sweep PR is merged
    gh.state.commit_files("main", {p: c for p, c in files.items() if p.startswith("kernelopt/")}, "merge nightly")
    nightly[0]["state"] = "closed"

    # same results again: nothing to propose, no new PR
    _merge(harness, repo_dir, _shards(harness, repo_dir, harness.tmp / "n2"))
    assert len(gh.state.pulls_from("kernelopt/nightly")) == 1
    assert len(json.loads(gh.state.files_at("kernelopt/history")["history.json"])["runs"]) == 2

    # attn no longer verifies (say, a new torch changed its kernels); mlp got faster; other still fails
    fake_runner.plan = {"other": "failed", "attn": "nothing"}
    fake_runner.speedup = 1.4
    run3 = _merge(harness, repo_dir, _shards(harness, repo_dir, harness.tmp / "n3"))
    open_nightly = [p for p in gh.state.pulls_from("kernelopt/nightly") if p["state"] == "open"]
    assert len(open_nightly) == 1
    files3 = gh.state.files_at("kernelopt/nightly")
    assert "kernelopt/packs/attn.json" not in files3  # dropped
    assert json.loads(files3["kernelopt/packs/mlp.json"])["measured"]["dtypes"]["fp32"]["speedup"] == 1.4
    assert "attn" not in files3["kernelopt/README.md"]
    body = open_nightly[0]["body"]
    assert "`kernelopt/packs/attn.json`: dropped (no replacement verifies any more)" in body
    assert "`kernelopt/packs/mlp.json`: updated (speedup moved for bf16, fp32)" in body
    assert "1.200× | +16.7%" in body
    assert len(json.loads(gh.state.files_at("kernelopt/history")["history.json"])["runs"]) == 3
    assert run3.outputs["verified-kernels"] == "2"


def test_nothing_to_change_closes_an_open_sweep_pr(harness: Harness, gh: GH, repo_dir: Path,
                                                   fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    fake_runner.default = "nothing"
    gh.state.commit_files("kernelopt/nightly", {"x": "y"})
    number = gh.state.open_pull("kernelopt/nightly", "main")
    _merge(harness, repo_dir, _shards(harness, repo_dir, harness.tmp / "n1"))
    assert gh.state.pulls[number]["state"] == "closed"
    assert "found the packs on main current" in gh.state.comments_on(number)[0]["body"]


def test_a_forbidden_pull_request_still_leaves_the_sweep_report_and_history(harness: Harness, gh: GH,
                                                                              repo_dir: Path) -> None:
    """Written after publishing, a 403 on opening the sweep PR left the output folder (the job's
    artifact) empty and the history unkept."""
    harness.use_server(gh)
    gh.server.fail("POST", r"/pulls$", status=403, count=5)
    out = harness.tmp / "forbidden"
    run = harness.invoke(bot_cli.sweep, ["merge", *map(str, _shards(harness, repo_dir, harness.tmp / "f1")), "--out",
                                         str(out), "--config", str(repo_dir / ".kernelopt.yml"), "--repo-root",
                                         str(repo_dir)])
    assert run.code == 1, run.text
    assert "403" in run.text
    assert "target run(s)" in (out / "sweep.md").read_text()
    assert len(json.loads((out / "history.json").read_text())["runs"]) == 1


def test_an_unreadable_history_on_its_branch_is_reported_and_replaced(harness: Harness, gh: GH,
                                                                         repo_dir: Path) -> None:
    """A bad hand edit of history.json on kernelopt/history stopped every later sweep with exit 2."""
    harness.use_server(gh)
    gh.state.commit_files("kernelopt/history", {"history.json": "{not json"}, "a bad hand edit")
    run = _merge(harness, repo_dir, _shards(harness, repo_dir, harness.tmp / "h1"))
    report = Path(run.outputs["report-path"]).read_text()
    assert "**History:** history.json on kernelopt/history could not be read" in report
    assert len(json.loads(gh.state.files_at("kernelopt/history")["history.json"])["runs"]) == 1
    assert run.code == 0
