"""`kernelopt suite`: each problem in its own process, shards, merge, and the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kernelopt_bot.capture.settings import CompileSettings
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.shards import Shard
from kernelopt_bot.stats import geomean
from kernelopt_bot.suite import (
    Problem,
    ProblemResult,
    SuiteResult,
    load_problems,
    markdown,
    merge,
    run_suite,
)
from tests.helpers import EXAMPLES, run_cli


def _suite(root: Path) -> Path:
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    shutil.copy(EXAMPLES / "gelu.py", root / "level1" / "gelu.py")
    (root / "level2" / "broken.py").write_text("raise RuntimeError('this problem is broken')\n")
    (root / "suite.json").write_text(json.dumps({"problems": [
        {"path": "level1/gelu.py", "level": 1, "dtypes": ["fp32"]},
        {"path": "level2/broken.py", "level": 2, "dtypes": ["fp32"]},
    ]}))
    return root


def _run_one(root: Path, problem: Problem, out: Path, **options: Any) -> ProblemResult:
    """``problem`` alone through :func:`run_suite` (the manifest rewritten to list just it), as the
    suite runs each: its own optimize process, a crash or hang its result."""
    (root / "suite.json").write_text(json.dumps({"problems": [
        {"path": problem.path, "level": problem.level, "dtypes": [problem.dtype], "train": problem.train}]}))
    suite = run_suite(root, out, log=lambda *_: None, **options)
    [result] = suite.problems
    return result


def test_shards_run_each_problem_in_its_own_process_and_merge(tmp_path: Path) -> None:
    root = _suite(tmp_path / "suite")
    outs = []
    for shard in ("1/2", "2/2"):
        out = tmp_path / f"out-{shard[0]}"
        result = run_cli("suite", str(root), "--out", str(out), "--shard", shard, "--budget", "candidates=1")
        assert result.returncode == 0, result.stderr
        outs.append(out)
    one = json.loads((outs[0] / "suite.json").read_text())
    two = json.loads((outs[1] / "suite.json").read_text())
    assert [p["slug"] for p in one["problems"]] == ["l1_gelu_fp32"]
    assert [p["slug"] for p in two["problems"]] == ["l2_broken_fp32"]
    assert one["problems"][0]["status"] == "ok"
    assert two["problems"][0]["status"] == "failed" and "broken" in two["problems"][0]["error"]
    merged = tmp_path / "merged"
    result = run_cli("suite-merge", str(outs[0]), str(outs[1]), "--out", str(merged))
    assert result.returncode == 0, result.stderr
    report = (merged / "suite.md").read_text()
    assert "level1/gelu.py" in report and "level2/broken.py" in report


def test_geomean_counts_fallbacks_as_one_on_a_gpu() -> None:
    def row(path: str, level: int, status: str, speedup: float | None) -> ProblemResult:
        return ProblemResult(Problem(path, level, "fp32"), status, speedup, None, 1.0, 1.0, 0, 10.0)

    suite = SuiteResult([row("a.py", 1, "ok", 1.21), row("b.py", 1, "ok", 1.0), row("c.py", 1, "failed", None)],
                        device="cuda")
    level = suite.levels()["1"]
    assert level["geomean_vs_default"] == pytest.approx(geomean([1.21, 1.0, 1.0]))
    assert level["failed"] == 1 and level["slowest"] == 1.0
    assert "xychart-beta" in markdown(suite)
    cpu = SuiteResult([row("a.py", 1, "ok", None)], device="cpu")
    assert cpu.levels()["1"]["geomean_vs_default"] is None


def test_the_best_verified_figure_takes_an_option_or_the_option_with_the_pack_where_it_beats_the_pack() -> None:
    """Issue 13's level-3 criterion is "with the recommended setting": per problem the best of the
    pack, the best verified option and the two together; a shard without the figure counts its
    pack's (a lower bound), a failed problem 1.0."""
    def row(path: str, status: str, speedup: float | None, best: float | None) -> ProblemResult:
        return ProblemResult(Problem(path, 3, "fp32"), status, speedup, None, 1.0, 1.0, 0, 10.0, speedup_best=best)

    suite = SuiteResult([row("a.py", "ok", 1.0, 2.25), row("b.py", "ok", 1.1, 1.3), row("c.py", "ok", 1.2, None),
                         row("d.py", "failed", None, None)], device="cuda")
    level = suite.levels()["3"]
    assert level["geomean_best_verified"] == pytest.approx(geomean([2.25, 1.3, 1.2, 1.0]))
    assert level["geomean_vs_default"] == pytest.approx(geomean([1.0, 1.1, 1.2, 1.0]))
    table = markdown(suite)
    assert "geomean, best verified (option, pack or both)" in table and "| 2.250 |" in table
    again = ProblemResult.from_json(dict(suite.to_json()["problems"][0]))
    assert again.speedup_best == 2.25  # kept in suite.json, so merged shards keep it


def test_bad_suite_input() -> None:
    with pytest.raises(BadInputError):
        Shard.parse("3/2")
    with pytest.raises(BadInputError):
        Shard.parse("0/2")
    with pytest.raises(BadInputError):
        Shard.parse("x")
    assert Shard.parse("2/3").take(list("abcdefg")) == ["b", "e"]  # the suite's and the sweep's convention
    with pytest.raises(BadInputError, match="not a directory"):
        load_problems(Path("/nonexistent"))


def test_repository_suite_loads() -> None:
    problems = load_problems(Path(__file__).resolve().parent.parent / "benchmarks")
    assert len({p.path for p in problems}) >= 30
    assert {p.level for p in problems} == {1, 2, 3} and {p.dtype for p in problems} >= {"fp32", "bf16"}


def test_only_selects_problems_by_path_or_slug_pattern() -> None:
    root = Path(__file__).resolve().parent.parent / "benchmarks"
    level2 = load_problems(root, only=("level2/*",))
    assert level2 and {p.level for p in level2} == {2}
    picked = load_problems(root, ("bf16",), only=("*softmax_channels*", "l3_gpt_block_*"))
    assert sorted(p.slug for p in picked) == ["l1_softmax_channels_bf16", "l3_gpt_block_bf16"]
    with pytest.raises(BadInputError, match="no problems match nothing-like-this"):
        load_problems(root, only=("nothing-like-this",))


def test_agreement_compares_verdicts_and_speedups_within_noise() -> None:
    from kernelopt_bot.suite import ProblemResult, SuiteResult, agreement

    def run(*rows: tuple[str, str, float | None, float | None, list[str]]) -> SuiteResult:
        return SuiteResult([ProblemResult(Problem(f"level1/{name}.py", 1, "fp32"), status, speedup, None, None, None,
                                          len(acc), 1.0, noise_floor=noise, accepted=acc)
                            for name, status, speedup, noise, acc in rows])

    one = run(("a", "ok", 1.10, 0.01, ["k1"]), ("b", "ok", 1.00, 0.002, []), ("c", "ok", 1.2, 0.01, ["k"]),
              ("d", "failed", None, None, []), ("e", "ok", 1.0, 0.0, []))
    two = run(("a", "ok", 1.105, 0.004, ["k1"]), ("b", "ok", 1.02, 0.002, []), ("c", "ok", 1.2, 0.01, ["k", "j"]),
              ("d", "failed", None, None, []))
    rows = {r.slug: r for r in agreement(one, two)}
    assert rows["l1_a_fp32"].same_verdict and rows["l1_a_fp32"].within_noise
    assert rows["l1_b_fp32"].same_verdict and not rows["l1_b_fp32"].within_noise  # 2% apart, floors 0.5%
    assert not rows["l1_c_fp32"].same_verdict and rows["l1_c_fp32"].within_noise
    assert rows["l1_d_fp32"].same_verdict and rows["l1_d_fp32"].within_noise
    assert not rows["l1_e_fp32"].same_verdict  # missing from the second run


# A problem that never finishes by itself: it waits for a file only the test creates (at the end,
# so that an engine process outliving its killed parent ends too), so the deadline is the only way out.
_BLOCKED_PROBLEM = """\
import os
import time

import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []


_RELEASE = {release!r}
_give_up = time.monotonic() + 900
while not os.path.exists(_RELEASE) and time.monotonic() < _give_up:
    time.sleep(0.05)
raise RuntimeError("released by the test")
"""


def test_a_problem_past_its_deadline_keeps_its_log_and_says_where_it_stopped(tmp_path: Path) -> None:
    """Independent of machine load: the problem blocks until the test releases it, and the deadline
    grows until the run has logged a step before the kill (on a busy machine, starting Python and
    torch alone can take longer than the first deadline)."""
    root = _suite(tmp_path / "suite")
    release = tmp_path / "release"
    (root / "level1" / "blocked.py").write_text(_BLOCKED_PROBLEM.format(release=str(release)))
    try:
        for attempt, deadline in enumerate((6.0, 20.0, 60.0)):
            out = tmp_path / f"out-{attempt}"
            res = _run_one(root, Problem("level1/blocked.py", 1, "fp32"), out, device="cpu", budget=[],
                              gamma=1.03, timeout_s=deadline)
            assert res.status == "failed" and res.error is not None
            assert res.error.startswith(f"timed out after {deadline:.0f} s"), res.error
            log = (out / "problems" / "l1_blocked_fp32" / "optimize.log").read_text()
            if "loading the target" in log:
                break
        # the log written before the kill is kept, and the error names its last step
        assert "loading the target" in log, log
        assert "(last step: " in res.error and "loading the target" in res.error, res.error
    finally:
        release.touch()
    out = tmp_path / "out"
    broken = _run_one(root, Problem("level2/broken.py", 2, "fp32"), out, device="cpu", budget=[], gamma=1.03,
                         timeout_s=120.0)
    assert broken.status == "failed" and broken.error is not None
    assert broken.error.startswith("error:") and "broken" in broken.error


def test_the_suite_compiles_every_problem_as_asked(tmp_path: Path) -> None:
    """`kernelopt suite --mode/--inductor-config` reaches each problem's optimize run."""
    root = _suite(tmp_path / "suite")
    res = _run_one(root, Problem("level1/gelu.py", 1, "fp32"), tmp_path / "out", device="cpu",
                      budget=["candidates=0", "compile_options=false"], gamma=1.03, timeout_s=600, reference=False,
                      compile_settings=CompileSettings(None, {"triton.persistent_reductions": False}))
    assert res.status == "ok", res.error
    result = json.loads((tmp_path / "out" / "problems" / "l1_gelu_fp32" / "result.json").read_text())
    assert result["compile"]["config"] == {"triton.persistent_reductions": False}


def test_a_suite_over_other_settings_says_so_and_shards_over_different_ones_do_not_merge(tmp_path: Path) -> None:
    problem = ProblemResult(Problem("level1/gelu.py", 1, "fp32"), "ok", 1.1, None, 1.0, 0.9, 1, 5.0, None)
    mant = SuiteResult([problem], "cuda", CompileSettings("max-autotune-no-cudagraphs").to_json())
    text = markdown(mant)
    assert "Speedups are over `torch.compile (mode=max-autotune-no-cudagraphs)`" in text
    assert "geomean vs torch.compile (mode=max-autotune-no-cudagraphs)" in text
    for name, suite in (("a", mant), ("b", SuiteResult([problem], "cuda"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "suite.json").write_text(json.dumps(suite.to_json()))
    with pytest.raises(BadInputError, match="different baselines"):
        merge([tmp_path / "a", tmp_path / "b"])
    assert merge([tmp_path / "a", tmp_path / "a"]).compile == mant.compile


def test_a_training_problem_runs_as_a_training_step_and_counts_in_its_own_row(tmp_path: Path) -> None:
    """A suite.json entry with ``"train": true`` is the same file's training step: its own slug,
    optimize run with --train, and its own row in the per-level table."""
    root = tmp_path / "suite"
    (root / "level1").mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "train_targets" / "linear_bias.py", root / "level1" / "linear.py")
    (root / "suite.json").write_text(json.dumps({"problems": [
        {"path": "level1/linear.py", "level": 1, "dtypes": ["fp32"]},
        {"path": "level1/linear.py", "level": 1, "dtypes": ["fp32"], "train": True},
    ]}))
    inference, training = load_problems(root)
    assert (inference.slug, training.slug) == ("l1_linear_fp32", "l1_linear_fp32_train")
    res = _run_one(root, training, tmp_path / "out", device="cpu", budget=["candidates=0", "compile_options=false"],
                      gamma=1.03, timeout_s=600, reference=False)
    assert res.status == "ok", res.error
    result = json.loads((tmp_path / "out" / "problems" / "l1_linear_fp32_train" / "result.json").read_text())
    assert result["train"] is True and [k["phase"] for k in result["kernels"]] == ["backward"]
    suite = SuiteResult(device="cuda", problems=[
        ProblemResult(inference, "ok", 1.2, None, 1.0, 0.8, 1, 1.0),
        ProblemResult(training, "ok", 1.1, None, 2.0, 1.8, 1, 1.0)])
    assert set(suite.levels()) == {"1", "1 train"}
    assert "level1/linear.py (training step)" in markdown(suite)


def test_a_timeout_shorter_than_the_runs_own_deadline_is_refused(tmp_path: Path) -> None:
    """`--timeout 115` beside the 110 s default budget killed a run that kept its deadline (H200,
    12-03): refused with the least that works, before any problem starts."""
    root = _suite(tmp_path / "suite")
    out = tmp_path / "out"
    result = run_cli("suite", str(root), "--out", str(out), "--timeout", "115")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--timeout 115 is shorter than a run may take" in result.stderr and "at least 125 s" in result.stderr
    assert not out.exists()
    result = run_cli("suite", str(root), "--out", str(out), "--timeout", "115", "--budget", "wall_seconds=60",
                     "--budget", "candidates=1", "--only", "level1/*")
    assert result.returncode == 0, result.stderr


def test_a_sweep_goes_on_where_the_last_one_stopped(tmp_path: Path) -> None:
    """A sweep spread over several GPU jobs: `--skip-measured` leaves out what an earlier run
    measured (a failed problem runs again), and says so; a path that holds no results is an error
    before anything starts."""
    root = _suite(tmp_path / "suite")
    first = tmp_path / "first"
    result = run_cli("suite", str(root), "--out", str(first), "--budget", "candidates=1")
    assert result.returncode == 0, result.stderr
    second = tmp_path / "second"
    result = run_cli("suite", str(root), "--out", str(second), "--budget", "candidates=1", "--skip-measured", str(first))
    assert result.returncode == 0, result.stderr
    assert "leaving out 1 problem(s) measured in" in result.stdout + result.stderr
    ran = json.loads((second / "suite.json").read_text())["problems"]
    assert [p["slug"] for p in ran] == ["l2_broken_fp32"]  # gelu was measured; the broken one failed and runs again
    done = run_cli("suite", str(root), "--out", str(tmp_path / "third"), "--only", "level1/*",
                   "--skip-measured", str(first / "suite.json"))
    assert done.returncode == 2 and "every selected problem was measured already" in done.stderr
    missing = run_cli("suite", str(root), "--out", str(tmp_path / "fourth"), "--skip-measured", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no suite results to skip" in missing.stderr
    other = run_cli("suite", str(root), "--out", str(tmp_path / "fifth"), "--mode", "max-autotune-no-cudagraphs",
                    "--skip-measured", str(first))
    assert other.returncode == 2 and "nothing it measured is measured here" in other.stderr  # another baseline
    assert not any((tmp_path / name).exists() for name in ("third", "fourth", "fifth"))


def test_the_pack_on_max_autotune_figure_counts_problems_without_a_pack_as_one_and_says_how_many_were_measured() -> None:
    """Issue 13 item 4's third figure: each verified pack on max-autotune-no-cudagraphs, over that
    mode alone; a problem without a pack (or failed) has nothing on top (1.0), a pack never
    measured on top stays out of the geomean and the table says how many were."""
    def row(path: str, status: str, verified: int, on_top: float | None) -> ProblemResult:
        return ProblemResult(Problem(path, 1, "fp32"), status, 1.2 if verified else 1.0, None, 1.0, 1.0, verified,
                             10.0, speedup_pack_on_mant=on_top)

    suite = SuiteResult([row("a.py", "ok", 1, 1.10), row("b.py", "ok", 0, None), row("c.py", "ok", 1, None),
                         row("d.py", "failed", 0, None)], device="cuda")
    level = suite.levels()["1"]
    assert level["geomean_pack_on_max_autotune_no_cudagraphs"] == pytest.approx(geomean([1.10, 1.0, 1.0]))
    assert (level["packs"], level["packs_on_max_autotune"]) == (2, 1)
    assert "| 1.032 (1 of 2 packs) |" in markdown(suite)
    again = ProblemResult.from_json(dict(suite.to_json()["problems"][0]))
    assert again.speedup_pack_on_mant == 1.10  # kept in suite.json, so merged shards keep it
    # an old shard's level, its packs never measured on top: no figure, not the failures' 1.0
    old = SuiteResult([row("c.py", "ok", 1, None), row("d.py", "failed", 0, None)], device="cuda")
    assert old.levels()["1"]["geomean_pack_on_max_autotune_no_cudagraphs"] is None


def test_the_pack_on_max_autotune_comes_from_the_run_where_it_measured_it() -> None:
    from kernelopt_bot.result import KernelOutcome, Recommendation, RunResult
    from kernelopt_bot.suite import _pack_on_mant_of

    default, mant = CompileSettings(), CompileSettings("max-autotune-no-cudagraphs")
    run = RunResult(target="m.py", name="m", device="cuda", dtype="fp32", status="ok", speedup=1.2,
                    kernels=[KernelOutcome("k0", "reduction", status="accepted")])
    assert _pack_on_mant_of(run, default) is None  # a pack, not measured on top: the suite measures it
    run.recommendations = [Recommendation("mode=max-autotune-no-cudagraphs", 1.25, True),
                           Recommendation("mode=max-autotune-no-cudagraphs + pack", 1.5, True)]
    assert _pack_on_mant_of(run, default) == pytest.approx(1.2)  # 1.5 / 1.25
    assert _pack_on_mant_of(run, mant) == 1.2  # compiled with the mode: the run's speedup is the figure
    assert _pack_on_mant_of(run, CompileSettings("default", {"coordinate_descent_tuning": True})) is None
    run.speedup = None
    assert _pack_on_mant_of(run, mant) is None  # a pack the run did not measure: unknown, not 1.0
    run.kernels, run.recommendations = [], []
    assert _pack_on_mant_of(run, default) == 1.0  # no pack: nothing on top


def test_the_pack_on_max_autotune_is_read_from_bench_and_a_pack_that_applies_nowhere_changes_nothing(
        tmp_path: Path) -> None:
    from kernelopt_bot.job_process import Exit
    from kernelopt_bot.suite import pack_on_mant_speedup

    def bench_printing(line: str, timed_out: bool = False) -> Any:
        def run(cmd: Any, log: Path, timeout_s: float) -> Exit:
            assert "--mode" in cmd and "max-autotune-no-cudagraphs" in cmd and "--pack" in cmd
            log.write_text(f"compiling\n{line}\n")
            return Exit(0, 1.0, timed_out=timed_out)
        return run

    def measure(line: str, timed_out: bool = False) -> float | None:
        return pack_on_mant_speedup(Path("m.py"), "bf16", "cuda", tmp_path / "pack.json", timeout_s=60,
                                    log_dir=tmp_path, run=bench_printing(line, timed_out))

    assert measure(json.dumps({"applied": ["k0"], "speedup": 1.07, "noise_floor": 0.01})) == 1.07
    assert measure(json.dumps({"applied": ["k0"], "speedup": 0.93, "noise_floor": 0.01})) == 0.93
    assert measure(json.dumps({"applied": ["k0"], "speedup": 1.03, "noise_floor": 0.04})) == 1.0  # within noise
    assert measure(json.dumps({"applied": [], "speedup": 0.98})) == 1.0  # none of its kernels in that build
    # its kernels are in that build, but the pack was verified on another GPU: nothing was measured
    assert measure(json.dumps({"applied": [], "skipped": ["k0: gpu: pack has 'NVIDIA H200', running 'NVIDIA H100'"],
                               "speedup": 0.998})) is None
    assert measure(json.dumps({"applied": ["k0"], "speedup": None})) is None
    assert measure("Error: the packed arm crashed") is None
    assert measure(json.dumps({"applied": ["k0"], "speedup": 1.07}), timed_out=True) is None


def test_a_pack_on_max_autotune_that_cannot_run_is_unmeasured_and_logged(tmp_path: Path) -> None:
    from kernelopt_bot.suite import pack_on_mant_speedup

    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no model here')\n")
    pack = tmp_path / "pack.json"
    pack.write_text(json.dumps({"format": "kernelopt-pack", "version": 1, "entries": []}))
    assert pack_on_mant_speedup(broken, "fp32", "cpu", pack, timeout_s=120, log_dir=tmp_path) is None
    assert "no model here" in (tmp_path / "pack_on_max_autotune.log").read_text()


def test_the_reference_step_measures_what_the_run_did_not_and_shares_the_problems_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a default run with a pack: max-autotune alone (``modes``), then the pack on it
    (``bench --mode``), the second given what the first left of the deadline; a row takes both."""
    from kernelopt_bot import suite as suite_module
    from kernelopt_bot.fleet import FleetJob, FleetResult
    from kernelopt_bot.job_process import Exit
    from kernelopt_bot.result import KernelOutcome, RunResult

    clock = [1000.0]
    monkeypatch.setattr(suite_module.time, "monotonic", lambda: clock[0])
    asked: list[tuple[str, float]] = []

    def on_slot(cmd: Any, log: Path, timeout_s: float) -> Exit:
        what = cmd[cmd.index("kernelopt_bot.cli") + 1]
        asked.append((what, timeout_s))
        clock[0] += 70.0
        log.write_text(json.dumps([{"speedup": 1.25}]) if what == "modes"
                       else json.dumps({"applied": ["k0"], "speedup": 1.1, "noise_floor": 0.01}))
        return Exit(0, 70.0)

    out = tmp_path / "problems" / "l1_m_fp32"
    out.mkdir(parents=True)
    (out / "pack.json").write_text("{}")
    job = FleetJob(name="m", target=str(tmp_path / "m.py"), dtype="fp32", out=out, timeout_s=300, device=None)
    run = RunResult(target="m.py", name="m", device="cuda", dtype="fp32", status="ok", speedup=1.2, seconds=100.0,
                    kernels=[KernelOutcome("k0", "reduction", status="accepted")])
    step = suite_module._reference_step(True, CompileSettings(), 300.0)
    measured = step(job, run, on_slot)
    assert asked == [("modes", 200.0), ("bench", 130.0)]  # 300 s less the run's 100, then less the first's 70
    assert measured == suite_module.Reference(1.25, 1.1)
    row = suite_module._problem_result(Problem("level1/m.py", 1, "fp32"),
                                       FleetResult(0, job, run, None, 1, 170.0, after=measured), CompileSettings())
    assert row.speedup_vs_mant == pytest.approx(1.2 / 1.25) and row.speedup_pack_on_mant == 1.1
    assert step(job, RunResult(target="m.py", name="m", device="cuda", dtype="fp32", status="ok", speedup=1.0,
                               train=True), on_slot) == suite_module.Reference()  # a training step: none
