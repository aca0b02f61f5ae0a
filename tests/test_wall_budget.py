"""The wall budget is a deadline: no GPU candidate or compiler option starts that cannot finish."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernelopt_bot import compile_options
from kernelopt_bot.candidate import Candidate, Proposal
from kernelopt_bot.compile_options import COMPILE_OPTIONS, MIN_BENCH_S, bench_need_s, recommend
from kernelopt_bot.final_bench import benchmark_pack, final_need_s
from kernelopt_bot.harness.arm_process import ArmError, ArmNotStarted, ArmTimeout
from kernelopt_bot.harness.model_arms import ModelArms
from kernelopt_bot.pipeline import WALL_MARGIN_S
from kernelopt_bot.profiling import KernelProfile, Profile
from kernelopt_bot.schedule import (
    OptionsFirst,
    OptionSteps,
    after_search_s,
    arms_end_by,
    held_back,
    launch_bound,
    options_first,
    options_later,
    options_need_s,
    recommend_in_time,
    search_keep_s,
)
from kernelopt_bot.search.budget import Budget, BudgetExceeded
from kernelopt_bot.search.orchestrator import Orchestrator, SearchLimits
from tests.helpers import EXAMPLES, captured
from tests.test_final_bench import GATE4, _entry, _pack, _result
from tests.test_report import shell


class _GpuOrchestrator(Orchestrator):
    @property
    def device(self) -> str:  # the checks under test only apply on a GPU
        return "cuda"


def _orchestrator(budget: Budget) -> Orchestrator:
    cap = captured("gelu.py")
    return _GpuOrchestrator(cap, None, None, budget, strategies=[],  # type: ignore[arg-type]
                            limits=SearchLimits(first_candidate_s=30.0))


def test_a_candidate_is_not_started_without_the_time_to_finish() -> None:
    proposal = Proposal(Candidate("config X", config=None), "tuner")
    roomy = _orchestrator(Budget(max_wall_s=100.0))
    roomy._fits_in_wall_budget(proposal)  # 100 s left, a candidate takes about 30
    tight = _orchestrator(Budget(max_wall_s=20.0))
    with pytest.raises(BudgetExceeded, match="20 s of wall time left, a candidate takes about 30 s"):
        tight._fits_in_wall_budget(proposal)
    # the estimate follows what candidates really took in this run
    tight._candidate_seconds[False] += [4.0, 6.0]
    assert tight.candidate_estimate_s() == 6.0
    tight._fits_in_wall_budget(proposal)
    _orchestrator(Budget())._fits_in_wall_budget(proposal)  # no wall limit: never refused


def test_the_first_candidate_s_warm_up_does_not_set_the_estimate_once_others_are_seen() -> None:
    """The first candidate of a kind also warms what later ones reuse (on the H200 a training
    step's first tuner candidate took 23 s, the next 14 s): alone it is the estimate, after
    others the slowest of those is."""
    orch = _orchestrator(Budget(max_wall_s=100.0))
    orch._candidate_seconds[True].append(23.0)
    assert orch.candidate_estimate_s(trusted=True) == 23.0
    orch._candidate_seconds[True] += [14.0, 11.0]
    assert orch.candidate_estimate_s(trusted=True) == 14.0


def test_a_trusted_candidate_is_estimated_apart_from_the_others() -> None:
    """On a GPU the tuner's candidates run gates 2-4 in the engine (no process, no recompile):
    their estimate is their own, first the default for them, then what they took in this run."""
    tuner = Proposal(Candidate("config X", config=None, origin="tuner"), "tuner")
    llm = Proposal(Candidate("llm source", source="x", origin="llm"), "llm")
    tight = _orchestrator(Budget(max_wall_s=20.0))
    assert tight.candidate_estimate_s(trusted=True) == SearchLimits().first_trusted_candidate_s < 20.0
    tight._fits_in_wall_budget(tuner)
    with pytest.raises(BudgetExceeded, match="a candidate takes about 30 s"):
        tight._fits_in_wall_budget(llm)
    tight._candidate_seconds[True].append(25.0)  # slower than the default: what was measured counts
    with pytest.raises(BudgetExceeded, match="a candidate takes about 25 s"):
        tight._fits_in_wall_budget(tuner)
    tight._candidate_seconds[False].append(3.0)
    tight._fits_in_wall_budget(llm)


class _Arena:
    device, dtype, mode, config = "cuda", "fp32", None, {}
    end_by: float | None = None  # set by the run's phases (schedule.arms_end_by)

    def prestart(self) -> bool:
        return True

    def baselines(self) -> tuple[Any, Any]:
        return None, None

    def candidate(self, *_a: Any, **_k: Any) -> Any:
        raise AssertionError("no option may start after the deadline")

    def room_for(self, wanted: int) -> int:
        return wanted

    def settle(self) -> None:
        pass

    reload_s = 0.0  # what a cold arm's warm replacement adds to its start (ModelArms.warm_load_s)

    def warm_load_s(self) -> float:
        return self.reload_s


def test_compiler_options_past_the_deadline_are_reported_not_measured() -> None:
    recs = recommend(_Arena(), None, gamma=1.03, time_left=lambda: 20.0)  # type: ignore[arg-type]
    assert [r.option for r in recs] == [o.label for o in COMPILE_OPTIONS]
    assert recs[0].option == "mode=max-autotune-no-cudagraphs"  # the suite's reference goes first
    assert all(r.speedup is None and not r.verified and "wall-time budget" in r.detail for r in recs)


class _ReadyArm:
    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.closed = False

    def wait_ready(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _ReadyArena(_Arena):
    def __init__(self) -> None:
        self.arms: list[_ReadyArm] = []

    def candidate(self, *_a: Any, **_k: Any) -> Any:
        self.arms.append(_ReadyArm())
        return self.arms[-1]


def test_an_option_compiled_too_close_to_the_deadline_is_not_checked_or_timed() -> None:
    """Gate 3 and the rounds take seconds: an option whose compile ends with less than
    MIN_BENCH_S left is reported as such instead of running past the wall budget (a check_model
    or compare_arms call here would fail on the arena's None baseline)."""
    left = iter([60.0] + [MIN_BENCH_S - 1] * 3)  # time to start the wave; none after the compile
    arena = _ReadyArena()
    recs = recommend(arena, None, gamma=1.03, time_left=lambda: next(left))  # type: ignore[arg-type]
    assert len(arena.arms) == len(COMPILE_OPTIONS) and all(a.closed for a in arena.arms)
    assert all(r.detail == "not measured: the wall-time budget ran out after its compile" for r in recs)
    # After the compile the run's own deadline counts, not the margin kept for starting an option
    arena = _ReadyArena()
    recs = recommend(arena, None, gamma=1.03, time_left=lambda: 60.0,  # type: ignore[arg-type]
                     bench_left=lambda: MIN_BENCH_S - 1)
    assert all(r.detail == "not measured: the wall-time budget ran out after its compile" for r in recs)


class _SayingArena(_ReadyArena):
    """Its arms say they compiled in ``said`` seconds."""

    def __init__(self, said: Any) -> None:
        super().__init__()
        self.said = said

    def candidate(self, *a: Any, **k: Any) -> Any:
        arm = super().candidate(*a, **k)
        arm.info = {"compile_s": self.said}
        return arm


def test_each_option_reports_how_long_its_arm_compiled(capsys: pytest.CaptureFixture[str]) -> None:
    """What the options' compile estimates are checked against: each arm's own compile time (its
    ready message), in the recommendation, result.json and the printed line; none for an arm
    that did not compile."""
    from kernelopt_bot.cli.render import recommendations

    recs = recommend(_SayingArena(41.6), None, gamma=1.03, time_left=lambda: 60.0,  # type: ignore[arg-type]
                     bench_left=lambda: MIN_BENCH_S - 1)
    assert [r.compile_s for r in recs] == [41.6] * len(COMPILE_OPTIONS)
    assert recs[0].to_json()["compile_s"] == 41.6
    recommendations(recs[:1])
    assert "after its compile (compiled in 42 s)" in capsys.readouterr().out.replace("\n", " ")
    assert all(r.compile_estimate_s is None for r in recs)  # nothing planned it: no estimate

    # Beside what each compile took, what the run planned it to take (the estimates' evidence):
    # max-autotune's includes its template tuning, coordinate descent's its scale (1.45x)
    left = itertools.chain([120.0], itertools.repeat(MIN_BENCH_S - 1))  # time for the wave, none to time it
    recs = recommend(_SayingArena(41.6), None, gamma=1.03, time_left=lambda: 120.0,  # type: ignore[arg-type]
                     bench_left=lambda: next(left), compile_s=28.5, template_s=8.0)
    assert [r.compile_estimate_s for r in recs] == [36.5, 41.3, 28.5]
    recommendations(recs[:1])
    assert "(compiled in 42 s of an estimated 36 s" in capsys.readouterr().out.replace("\n", " ")

    class _Unstartable(_ReadyArena):
        def candidate(self, *_a: Any, **_k: Any) -> Any:
            raise ArmNotStarted("option: could not be started (Resource temporarily unavailable)")

    failed = recommend(_Unstartable(), None, gamma=1.03, time_left=lambda: 60.0)  # type: ignore[arg-type]
    # no process for it is ours: not measured, never the option's failure
    assert all(r.compile_s is None and r.detail.startswith("not measured: option: could not be started")
               for r in failed)

    for said in ("41 s", float("nan"), -1.0, True, None):  # what an arm says is checked like any input
        recs = recommend(_SayingArena(said), None, gamma=1.03, time_left=lambda: 60.0,  # type: ignore[arg-type]
                         bench_left=lambda: MIN_BENCH_S - 1)
        assert all(r.compile_s is None for r in recs)


def test_a_slow_model_s_option_is_timed_only_with_the_time_its_rounds_take() -> None:
    """On a 20 ms model gate 3 and the rounds take about 30 s: an option compiled with 20 s left
    (enough for MIN_BENCH_S) was checked and timed anyway and ran the run past its wall budget
    (mlp_4layer fp32 on the H200, killed by the suite's deadline). It is now reported as not
    timed; and none starts without that time beside MIN_OPTION_S's compile allowance."""
    need = bench_need_s(20.0)
    assert need > 25.0 and bench_need_s(None) == bench_need_s(0.2) == MIN_BENCH_S
    left = iter([60.0] + [20.0] * 3)
    arena = _ReadyArena()
    recs = recommend(arena, None, gamma=1.03, time_left=lambda: next(left), model_ms=20.0)  # type: ignore[arg-type]
    assert len(arena.arms) == len(COMPILE_OPTIONS) and all(a.closed for a in arena.arms)
    assert all(r.detail == "not measured: the wall-time budget ran out after its compile" for r in recs)
    # 40 s left would start a fast model's options, not this one's
    recs = recommend(_Arena(), None, gamma=1.03, time_left=lambda: 40.0, model_ms=20.0)  # type: ignore[arg-type]
    assert all("wall-time budget ran out" in r.detail for r in recs)
    # and the search leaves the options the time of their slower rounds
    assert options_need_s(5.0, need) == 30.0 + need - MIN_BENCH_S
    assert after_search_s(5.0, 20.0, True, None, need) > after_search_s(5.0, 20.0, True, None)
    # the final benchmark's rounds too, where the search goes last
    assert after_search_s(5.0, 20.0, False, None, final_s=need) == 5.0 + need - 20.0


class _ClockedArena(_ReadyArena):
    """The options' compile ends at ``compiled_at`` on the run's clock."""

    def __init__(self, now: list[float], compiled_at: float) -> None:
        super().__init__()
        self.now, self.compiled_at, self.timeout_s = now, compiled_at, 600.0

    def settle(self) -> None:
        self.now[0] = max(self.now[0], self.compiled_at)


def _timed_checks(monkeypatch: pytest.MonkeyPatch, seconds: float) -> tuple[list[float], list[float]]:
    """Gate 3 for the options, faked: ``(now, checked)``, the test's clock and when each check
    began; each takes ``seconds`` of the clock (gate 3 and the rounds) and finds the outputs
    differ. Both lists are changed in place, so a test starts over with ``now[0] = 0.0`` and
    ``checked.clear()``."""
    now: list[float] = [0.0]
    checked: list[float] = []

    def check(*_a: Any) -> Any:
        checked.append(now[0])
        now[0] += seconds
        return SimpleNamespace(passed=False, reason="checked")

    monkeypatch.setattr(compile_options, "check_model", check)
    monkeypatch.setattr(compile_options, "time", SimpleNamespace(monotonic=lambda: now[0]))  # what timed_s reads
    return now, checked


def test_a_compiled_option_may_take_what_the_final_benchmark_will_not_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """The options compiled with 5 s of the search's time left: timed in the final benchmark's
    20 s reserve, less what that benchmark still needs, instead of reported as not timed (gate 3
    answers here, for the arena); each one only while that time lasts."""
    now, checked = _timed_checks(monkeypatch, 8.0)  # gate 3 and the rounds
    for need, detail in ((5.0, ["outputs differ: checked"] * 2 + ["not measured: the wall-time budget ran out after its compile"]),
                         (20.0, ["not measured: the wall-time budget ran out after its compile"] * 3)):
        now[0] = 0.0
        checked.clear()
        budget = Budget(max_wall_s=100.0, clock=lambda: now[0])
        recs = recommend_in_time(_ClockedArena(now, 95.0), None, 1.03, 3, budget, candidate_s=20.0,
                                 reserve_s=20.0, final_need_s=lambda n=need: n)
        assert [r.detail for r in recs] == detail
        assert all(t + MIN_BENCH_S <= 100.0 + 20.0 - need for t in checked)  # none begun past the spare time


def test_where_only_the_final_benchmark_follows_an_option_starts_in_what_it_will_not_need(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With 20 s of the search's time left and nothing to search after them (or the search over),
    the options may start where their compile and timing finish before what the final benchmark
    needs of its reserve: held to the search's deadline, a 40 MiB network's options found none to
    start and its run ended with 44 s unused (tiny_vit bf16, H100 12-07h). Where the search is
    still to come, its deadline holds."""
    now, checked = _timed_checks(monkeypatch, 8.0)  # gate 3 and the rounds
    for final_need, started in ((lambda: 1.0, True), (None, False)):
        now[0] = 0.0
        checked.clear()
        budget = Budget(max_wall_s=100.0, clock=lambda: now[0])
        now[0] = 80.0
        arena = _WaveArena(now, 12.0)
        recs = recommend_in_time(arena, None, 1.03, 3, budget, candidate_s=20.0, compile_s=8.0,
                                 reserve_s=20.0, final_need_s=final_need)
        assert bool(checked) is started, recs
        assert all(t + MIN_BENCH_S <= 100.0 + 20.0 - 1.0 for t in checked)  # each finished before the final's need
        if not started:
            assert all("wall-time budget ran out" in r.detail for r in recs)


class _WaveArena(_ReadyArena):
    """Options compile for ``compile_s`` a wave (side by side); records each wave's size."""

    def __init__(self, now: list[float], compile_s: float) -> None:
        super().__init__()
        self.now, self.compile_s, self.waves, self.compiling = now, compile_s, [], 0

    def candidate(self, *_a: Any, **_k: Any) -> Any:
        self.compiling += 1
        return super().candidate()

    def settle(self) -> None:
        if self.compiling:
            self.waves.append(self.compiling)
            self.now[0] += self.compile_s
        self.compiling = 0


def test_no_more_options_compile_at_once_than_can_then_be_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 30 ms model whose options compile for about 42 s, with 72 s left and 16 s for a check and
    its rounds: its three options compiled side by side and none was timed (the H200's MLP-Mixer,
    12-04). Now max-autotune compiles alone and is checked and timed; the others do not start in
    the 14 s left. With time for all three they compile as one wave, as before; with no estimate
    of the compile, the wave is what the GPU holds."""
    now, checked = _timed_checks(monkeypatch, 16.0)  # gate 3 and the rounds
    need = bench_need_s(30.0, rounds=3)
    assert 14.0 < need <= 16.0
    for left, compile_s, waves, checks in ((72.0, 42.0, [1], 1), (200.0, 42.0, [3], 3), (72.0, None, [3], 1)):
        now[0] = 0.0
        checked.clear()
        arena = _WaveArena(now, 42.0)
        recs = recommend(arena, None, gamma=1.03, rounds=3, model_ms=30.0, compile_s=compile_s,  # type: ignore[arg-type]
                         time_left=lambda left=left: left - now[0])
        assert arena.waves == waves and len(checked) == checks
        assert [r.option for r in recs][:1] == ["mode=max-autotune-no-cudagraphs"]
        assert recs[0].detail == "outputs differ: checked"  # max-autotune, the suite's reference, is timed first
    three = list(COMPILE_OPTIONS)
    assert compile_options.plan_wave(three, 3, None, lambda _o: 42.0, 16.0) == three
    assert compile_options.plan_wave(three, 2, 200.0, lambda _o: 42.0, 16.0) == three[:2]  # what the GPU holds
    assert compile_options.plan_wave(three, 3, 50.0, lambda _o: 42.0, 16.0) == []  # none can finish


def test_an_option_whose_template_tuning_cannot_finish_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """A convolution model in fp32 on the H200: max-autotune tuned its convolution templates for
    54 s and was stopped at the search's floor; coordinate descent and CUDA graphs compiled beside
    it and were never timed (12-04). With max-autotune's template tuning
    in its estimate, it is passed over and the two others compile and are timed; with time for
    it, it compiles first as before; a model without GEMMs or convolutions adds nothing."""
    now, checked = _timed_checks(monkeypatch, 10.0)
    tune = compile_options.template_tune_s(["extern_kernels.convolution"], "fp32")
    assert tune == 25.0 and compile_options.template_tune_s(["extern_kernels.mm"], "bf16") == 8.0
    assert compile_options.template_tune_s(["aten.cumsum"], "fp32") == 0.0
    for left, waves, first in ((54.0, [2], "mode=max-autotune-no-cudagraphs"), (100.0, [3], None)):
        now[0] = 0.0
        checked.clear()
        arena = _WaveArena(now, 22.0)
        recs = recommend(arena, None, gamma=1.03, rounds=3, model_ms=1.0, compile_s=22.0,  # type: ignore[arg-type]
                         template_s=tune, time_left=lambda left=left: left - now[0])
        assert arena.waves == waves and len(checked) == waves[0]
        skipped = [r for r in recs if r.detail.startswith("not measured")]
        assert [r.option for r in skipped] == ([first] if first else [])
        if first:
            assert skipped[0].detail == ("not measured: its compile (about 47 s), check and timing (10 s) would not "
                                         "finish in the 54 s left")


def test_what_the_final_benchmark_still_needs_of_its_reserve() -> None:
    """An empty pack's baseline rounds; nothing where gate 4 measured exactly this pack; the
    rounds where the pack's arm is compiled; all of it while that arm compiles, or where no
    profiled time sizes the rounds."""
    entry = _entry("k", [GATE4])
    ready, compiling = SimpleNamespace(ready=True), SimpleNamespace(ready=False)
    assert final_need_s(_pack(), _result(), None, 1.0, 10, 20.0) == pytest.approx(1.42)
    assert final_need_s(_pack(entry), _result(("k", "accepted")), None, 1.0, 10, 20.0) == 0.0
    several = _pack(entry, _entry("j", [GATE4]))
    assert final_need_s(several, _result(), ready, 1.0, 10, 20.0) == bench_need_s(1.0)
    assert final_need_s(several, _result(), compiling, 1.0, 10, 20.0) == 20.0
    assert final_need_s(several, _result(), ready, None, 10, 20.0) == 20.0
    slow = bench_need_s(30.0)  # a slow model's rounds outgrow the reserve: they need their whole time
    assert slow > 20.0 and final_need_s(several, _result(), ready, 30.0, 10, 20.0) == slow
    assert final_need_s(several, _result(), compiling, 30.0, 10, 20.0) == slow
    assert final_need_s(_pack(), _result(), None, 90.0, 10, 20.0) > 20.0  # an empty pack's too
    # where the options come after the search, it holds back the final's rounds past the reserve
    held = after_search_s(5.0, 20.0, True, None, 10.0)
    assert after_search_s(5.0, 20.0, True, None, 10.0, slow) == pytest.approx(held + slow - 20.0)
    assert after_search_s(5.0, 20.0, True, None, 10.0, 15.0) == after_search_s(5.0, 20.0, True, None, 10.0)


def test_a_training_steps_final_benchmark_needs_its_split_rounds() -> None:
    """A training step's final benchmark also times each arm's forward half and whole step: on
    the H200 a 3 ms layer norm step with a one-kernel pack took 28 s there and ended the run past
    its wall budget (12-04). Its rounds are planned as such, and its reserve is larger."""
    from kernelopt_bot.schedule import FINAL_BENCH_RESERVE_S, FINAL_BENCH_RESERVE_TRAIN_S, final_reserve_s

    ready = SimpleNamespace(ready=True)
    several = _pack(_entry("k", [GATE4]), _entry("j", [GATE4]))
    assert bench_need_s(3.0, split_step=True) > bench_need_s(3.0) + 3.0
    step = final_need_s(several, _result(), ready, 3.0, 10, FINAL_BENCH_RESERVE_TRAIN_S, True)
    assert step == bench_need_s(3.0, split_step=True) > final_need_s(several, _result(), ready, 3.0, 10, 30.0)
    empty = final_need_s(_pack(), _result(), None, 3.0, 10, 30.0, True)
    assert empty == pytest.approx(3 * (final_need_s(_pack(), _result(), None, 3.0, 10, 30.0) - 1.0) + 1.0)
    assert final_reserve_s("cuda", True) == FINAL_BENCH_RESERVE_TRAIN_S > final_reserve_s("cuda", False)
    assert final_reserve_s("cuda", False) == FINAL_BENCH_RESERVE_S and final_reserve_s("cpu", True) == 0.0


def test_the_wall_budget_counts_what_ran_before_it() -> None:
    """The engine's start (and anything before the budget exists) is part of the run's deadline."""
    now = [100.0]
    budget = Budget(max_wall_s=10.0, clock=lambda: now[0], elapsed_before=4.0)
    assert budget.wall_s_left() == 6.0
    now[0] += 6.0
    assert budget.exhausted() is not None


def test_on_the_cpu_too_a_candidate_is_not_started_without_the_time_to_finish() -> None:
    cap = captured("gelu.py")
    cpu = Orchestrator(cap, None, None, Budget(max_wall_s=20.0), strategies=[],  # type: ignore[arg-type]
                       limits=SearchLimits(first_candidate_s=30.0))
    with pytest.raises(BudgetExceeded, match="a candidate takes about 30 s"):
        cpu._fits_in_wall_budget(Proposal(Candidate("config X", config=None), "tuner"))
    with pytest.raises(BudgetExceeded, match="a candidate takes about 30 s"):  # the interpreter's gate 2
        cpu._fits_in_wall_budget(Proposal(Candidate("config X", config=None, origin="tuner"), "tuner"))


def test_a_tiny_wall_budget_ends_the_run_on_time(tmp_path: Path) -> None:
    """`kernelopt optimize` as a user runs it, CPU, a 15 s budget: no candidate starts that cannot
    finish (one takes 15-25 s in the interpreter), and the run ends within the budget plus
    WALL_MARGIN_S (result.json's seconds count from the engine's start); the command as a whole
    is given 10 s more for the CLI's own start (Python, torch's import)."""
    wall = 15
    began = time.monotonic()
    run = shell(f"kernelopt optimize {EXAMPLES / 'gelu.py'} --out out --store db --budget wall_seconds={wall} "
                "--budget compile_options=false", tmp_path)
    took = time.monotonic() - began
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["kernels"][0]["candidates"] == 0
    assert result["kernels"][0]["status"] == "not searched (budget)"
    assert result["seconds"] <= wall + WALL_MARGIN_S
    assert took <= wall + WALL_MARGIN_S + 10
    assert "starting the engine" in result["phases"]


SLOW_CAPTURE_MODEL = """
import torch


class Model(torch.nn.Module):
    \"\"\"A row softmax large enough that its compiled kernels take minutes in the Triton
    interpreter, where its eager run takes milliseconds.\"\"\"

    def forward(self, x):
        return torch.softmax(x * 2.0, dim=-1)


def get_inputs():
    return [torch.randn(2048, 4096)]


def get_init_inputs():
    return []
"""


def test_a_model_that_cannot_compile_within_the_budget_ends_the_run_at_the_deadline(tmp_path: Path) -> None:
    """`kernelopt optimize` as a user runs it, CPU: the model loads at once but its capture (the
    compiled model's first run, in the interpreter) takes minutes. The run ends at the wall
    budget's deadline, failed, saying that the budget ran out while the model compiled and what
    to do, where it ran on for the engine's own limit (2 x the budget + 15 minutes)."""
    (tmp_path / "slow_capture.py").write_text(SLOW_CAPTURE_MODEL)
    wall = 25
    began = time.monotonic()
    run = shell(f"kernelopt optimize slow_capture.py --out out --store db --budget wall_seconds={wall}", tmp_path)
    took = time.monotonic() - began
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert took <= wall + WALL_MARGIN_S + 10
    said = " ".join((run.stdout + run.stderr).split())
    assert "ran out while compiling and capturing the model" in said and "wall_seconds" in said
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "failed" and "ran out while compiling" in result["error"]


def test_a_model_whose_forward_never_returns_ends_the_run_at_the_deadline(tmp_path: Path) -> None:
    """The target's eager check hangs: the run ends at the deadline, naming that step, without
    the interpreter hint (no kernel ran)."""
    (tmp_path / "hangs.py").write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        while True:\n            x = x + 0\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\n"
        "def get_init_inputs():\n    return []\n")
    wall = 15
    began = time.monotonic()
    run = shell(f"kernelopt optimize hangs.py --out out --store db --budget wall_seconds={wall}", tmp_path)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert time.monotonic() - began <= wall + WALL_MARGIN_S + 10
    said = " ".join((run.stdout + run.stderr).split())
    assert "ran out while loading the model and running it eagerly" in said and "interpreter" not in said


class _SlowArm:
    """An arm whose compile outlives its start timeout: waiting for it runs the clock to the
    timeout (counted from its start), then it is killed."""

    def __init__(self, now: list[float], timeout_s: float, budget: bool = False) -> None:
        self.now, self.timeout_s, self.ends_at, self.budget = now, timeout_s, now[0] + timeout_s, budget

    def wait_ready(self) -> Any:
        self.now[0] = max(self.now[0], self.ends_at)
        raise ArmTimeout(f"arm: no answer to start within {self.timeout_s:.0f} s (killed)", budget=self.budget)

    def close(self) -> None:
        pass

    def __enter__(self) -> _SlowArm:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _SlowArena(_Arena):
    """Every arm's compile outlives its start timeout."""

    candidate_limit_s = ModelArms.candidate_limit_s  # the real arms' limit: their own, and end_by

    def __init__(self, now: list[float]) -> None:
        self.timeout_s, self.now, self.started, self.arms = 600.0, now, [], []

    def candidate(self, *_a: Any, wait: bool = True, **_k: Any) -> Any:
        assert not wait  # arms compile side by side and are waited for together
        limit = float(round(self.candidate_limit_s()))  # whole seconds on the test's clock
        self.started.append(limit)
        self.arms.append(_SlowArm(self.now, limit, budget=limit < self.timeout_s))
        return self.arms[-1]

    def settle(self) -> None:
        for arm in self.arms:
            with contextlib.suppress(ArmError):
                arm.wait_ready()


def test_a_compiler_option_is_cut_off_at_the_deadline() -> None:
    now = [0.0]
    budget = Budget(max_wall_s=100.0, clock=lambda: now[0])
    model_arms = _SlowArena(now)
    recs = recommend_in_time(model_arms, None, 1.03, 3, budget, candidate_s=20.0)
    # They compile at once, each until its check and rounds (MIN_BENCH_S) could still finish, no later
    assert model_arms.started == [100.0 - MIN_BENCH_S] * 3
    assert now[0] == 100.0 - MIN_BENCH_S  # and are cut off together there
    assert all(r.detail == "not measured: the wall-time budget ran out while it compiled (stopped)"
               and r.speedup is None for r in recs)
    assert model_arms.end_by is None  # later arms have the model_arms's own limit again


def test_an_option_needs_the_time_a_candidate_took() -> None:
    now = [0.0]
    model_arms = _SlowArena(now)
    recs = recommend_in_time(model_arms, None, 1.03, 3, Budget(max_wall_s=40.0, clock=lambda: now[0]), candidate_s=50.0)
    assert model_arms.started == [] and all("wall-time budget ran out" in r.detail for r in recs)


def test_an_option_with_a_compile_estimate_is_sized_by_it_not_by_a_candidates_gates() -> None:
    """After LLM agents' candidates took 50 s each in their gates, the options after the search
    still start where their compile estimate (15 s) and check fit the 40 s the search left them:
    sized by a candidate's gates, none would (the search's hold-back is sized by the estimate)."""
    now = [0.0]
    model_arms = _SlowArena(now)
    recommend_in_time(model_arms, None, 1.03, 3, Budget(max_wall_s=40.0, clock=lambda: now[0]), candidate_s=50.0,
                      compile_s=15.0)
    assert len(model_arms.started) == 2  # max-autotune and coordinate descent, then 10 s each to time


class _Cascade:
    def __init__(self, model_arms: Any) -> None:
        self.model_arms = model_arms


def test_a_final_benchmark_past_the_deadline_is_not_a_failed_run() -> None:
    """Two accepted kernels whose combination could not be compiled in time: the pack keeps the
    entry gate 4 measured in this run, with gate 4's numbers, and the run does not fail."""
    pack = _pack(_entry("k0", [GATE4]), _entry("k1", [{**GATE4, "numbers": {}}]))
    pack.entries["key-k0"].measured["speedup"] = 1.2
    result = _result(("k0", "accepted"), ("k1", "accepted"))
    kept = benchmark_pack(_Cascade(_SlowArena([0.0])), None, pack, result, 3)
    assert list(kept.entries) == ["key-k0"] and result.speedup == 1.2
    assert result.kernels[1].status == "dropped" and "could not be checked end to end" in result.kernels[1].detail


def test_options_measured_first_leave_the_search_its_time() -> None:
    """Measured before the search, an option starts only with ``keep_s`` to spare; once started it
    compiles and is timed until the run's deadline (mlp bf16 on the H200: cut at the deadline
    less ``keep_s``, max-autotune compiled and was then not timed, and the search used 17 s); its
    compile ends where its check and rounds could still finish by then."""
    now = [0.0]
    model_arms = _SlowArena(now)
    recs = recommend_in_time(model_arms, None, 1.03, 3, Budget(max_wall_s=100.0, clock=lambda: now[0]),
                             candidate_s=20.0, keep_s=25.0)
    assert model_arms.started == [100.0 - MIN_BENCH_S] * 3 and now[0] == 100.0 - MIN_BENCH_S
    assert all("ran out while it compiled" in r.detail for r in recs)
    now = [0.0]
    model_arms = _SlowArena(now)
    recs = recommend_in_time(model_arms, None, 1.03, 3, Budget(max_wall_s=50.0, clock=lambda: now[0]),
                             candidate_s=20.0, keep_s=25.0)
    assert model_arms.started == [] and all("wall-time budget ran out" in r.detail for r in recs)


def test_options_measured_first_never_take_a_promising_search_its_one_candidate() -> None:
    """Where the searched kernels alone could pass the performance gate, the options measured
    first leave the search one kernel's first variants and one candidate's gates, beyond what the
    final benchmark needs, even once started (a convolution + group norm model on the H200: the
    options left 4 s, a candidate takes 10, and 43% of the time was not searched). Where they could
    not, a started option is still timed into the search's time (mlp bf16)."""
    # 14% of the model's time to save, 71 s left: 20 s for the search, beyond 4 s for the benchmark
    assert search_keep_s(0.136, 71.0, 1.03, 10.0, after_s=4.0) == (24.0, 24.0)
    # 1% to save: gamma is out of the search's reach; options start with 10 s to spare, no floor
    assert search_keep_s(0.01, 71.0, 1.03, 10.0, after_s=4.0) == (14.0, 0.0)
    assert search_keep_s(0.5, 100.0, 1.03, 10.0) == (50.0, 20.0)  # the headroom's share, when larger
    assert search_keep_s(0.5, None, 1.03, 10.0) == (0.0, 0.0)  # no wall limit
    # no kernel worth a search (each below the share threshold): the options take its time
    assert search_keep_s(0.01, 71.0, 1.03, 10.0, after_s=4.0, searched=False) == (0.0, 0.0)
    now = [0.0]
    model_arms = _SlowArena(now)
    recs = recommend_in_time(model_arms, None, 1.03, 3, Budget(max_wall_s=100.0, clock=lambda: now[0]),
                             candidate_s=20.0, keep_s=25.0, floor_s=24.0)
    # cut off with the floor to spare, and the check and rounds before it
    assert model_arms.started == [76.0 - MIN_BENCH_S] * 3 and now[0] == 76.0 - MIN_BENCH_S
    assert all("ran out while it compiled" in r.detail for r in recs)


def test_with_nothing_to_search_an_option_is_timed_in_the_final_benchmarks_reserve(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt_block fp32 on the H200: no kernel worth a search, max-autotune compiled with 13 s of the
    search's time left where its check and rounds take 19 s, and was reported not timed. The pack
    stays empty, so the final benchmark needs 6 s of its 20 s reserve: the option is timed."""
    now, checked = _timed_checks(monkeypatch, 18.5)
    need = final_need_s(_pack(), _result(), None, 36.94, 3, 20.0)
    assert need == pytest.approx(5.65, abs=0.01)
    budget = Budget(max_wall_s=100.0, clock=lambda: now[0])
    recs = recommend_in_time(_ClockedArena(now, 87.0), None, 1.03, 3, budget, candidate_s=20.0,
                             keep_s=4.0, model_ms=36.94, reserve_s=20.0, final_need_s=lambda: need)
    assert checked == [87.0] and recs[0].detail == "outputs differ: checked"
    assert all("ran out after its compile" in r.detail for r in recs[1:])  # 1 s left for the next
    # What its check and rounds took is reported (the next estimates' evidence); none where not checked
    assert recs[0].timed_s == 18.5 and all(r.timed_s is None for r in recs[1:])
    now[0] = 0.0  # as before: the search's time alone
    checked.clear()
    recs = recommend_in_time(_ClockedArena(now, 87.0), None, 1.03, 3, budget, candidate_s=20.0,
                             keep_s=4.0, model_ms=36.94)
    assert checked == [] and all("ran out after its compile" in r.detail for r in recs)


def test_the_search_leaves_the_options_and_the_final_benchmark_their_time() -> None:
    """The model's compile time sizes what comes after the search: the options compile it under
    their settings, the final benchmark compiles it afresh (a level-3 model took 30 s on the H200,
    past a 20 s reserve); the search's deadline comes that much earlier, and only during it."""
    assert options_need_s(5.0) == 30.0 and options_need_s(30.0) == 55.0
    assert after_search_s(30.0, 20.0, True, None) == 60.0  # and 5 s of slack for the search's last step
    assert after_search_s(30.0, 20.0, False, None) == 20.0  # 30 s compile + 10 s timing - 20 s reserve
    assert after_search_s(5.0, 20.0, False, None) == 0.0  # a small model: the reserve holds it
    assert after_search_s(30.0, 0.0, False, None) == 0.0  # no GPU: no final benchmark arm
    assert after_search_s(30.0, 20.0, True, 100.0) == 60.0
    assert after_search_s(30.0, 20.0, True, 50.0) == 30.0  # the search keeps MIN_SEARCH_S (20 s)
    assert after_search_s(30.0, 20.0, True, 10.0) == 0.0
    now = [10.0]
    budget = Budget(max_wall_s=70.0, clock=lambda: now[0])
    with held_back(budget, 55.0):
        assert budget.wall_s_left() == 15.0
        with held_back(budget, 100.0):  # never before now
            assert budget.wall_s_left() == 0.0
    assert budget.max_wall_s == 70.0 and budget.wall_s_left() == 70.0
    with held_back(Budget(), 55.0):  # no deadline: nothing held
        pass


class _OrderArena(_ReadyArena):
    """Records whether the options' arms started before the baselines were waited for."""

    def __init__(self, fail: bool = False, started: bool = True) -> None:
        super().__init__()
        self.events: list[str] = []
        self.fail, self.started = fail, started

    def prestart(self) -> bool:
        return self.started

    def baselines(self) -> tuple[Any, Any]:
        self.events.append("baselines")
        if self.fail:
            raise ArmError("baseline: out of memory")
        return "baseline arm", None

    def candidate(self, *_a: Any, **_k: Any) -> Any:
        self.events.append("option")
        return super().candidate()


def test_the_options_compile_beside_the_baselines_and_a_failed_baseline_closes_them() -> None:
    arena = _OrderArena()
    recommend(arena, None, gamma=1.03, time_left=lambda: 60.0,  # type: ignore[arg-type]
              bench_left=lambda: MIN_BENCH_S - 1)
    assert arena.events == ["option"] * len(COMPILE_OPTIONS) + ["baselines"]
    arena = _OrderArena(fail=True)
    recs = recommend(arena, None, gamma=1.03, time_left=lambda: 60.0)  # type: ignore[arg-type]
    assert all(a.closed for a in arena.arms) and len(arena.arms) == len(COMPILE_OPTIONS)
    assert all(r.speedup is None and "baseline arms did not start" in r.detail for r in recs)
    # Baselines that are not compiling yet (no room beside the engine) start first: the options'
    # arms are sized by what they hold, and none starts when they fail
    arena = _OrderArena(started=False)
    recommend(arena, None, gamma=1.03, time_left=lambda: 60.0,  # type: ignore[arg-type]
              bench_left=lambda: MIN_BENCH_S - 1)
    assert arena.events == ["baselines"] + ["option"] * len(COMPILE_OPTIONS)
    arena = _OrderArena(fail=True, started=False)
    recs = recommend(arena, None, gamma=1.03, time_left=lambda: 60.0)  # type: ignore[arg-type]
    assert arena.arms == [] and all("baseline arms did not start" in r.detail for r in recs)


def _profile(model_ms: float, vendor_ms: float, kernels: list[tuple[float, str]]) -> Profile:
    rows = [KernelProfile(f"k{i}", 0, "pointwise", 1, ms, ms / model_ms, 0, None, None, bound)
            for i, (ms, bound) in enumerate(kernels)]
    return Profile("t", "cuda", model_ms, vendor_ms, None, rows)


def _first(prof: Profile) -> OptionsFirst | None:
    """Options first or not, where the search would search every kernel of the profile."""
    return options_first(prof, prof.kernels)


def test_options_go_first_where_the_search_can_move_the_model_little() -> None:
    """Options go first on library-bound and launch-bound models; the search then keeps the share
    of the model's time it could save (Triton kernels that are not launch-bound)."""
    gemm = _profile(1.0, 0.7, [(0.3, "memory")])
    why, searchable, lead = _first(gemm)  # type: ignore[misc]
    assert why == "library calls take 70% of the model's time" and searchable == pytest.approx(0.3)
    assert lead is None  # max-autotune first, as always (its template tuning is what can move such a model)
    assert _first(_profile(1.0, 0.3, [(0.7, "memory")])) is None  # the Triton kernels matter most
    small = _profile(0.1, 0.0, [(0.008, "launch")] * 10 + [(0.02, "memory")])
    why, searchable, lead = _first(small)  # type: ignore[misc]
    assert why == "80% of the Triton kernels' time is in launch-bound kernels"
    assert lead == "mode=reduce-overhead (CUDA graphs)"  # what removes launches is measured first
    assert searchable == pytest.approx(0.2)
    assert _first(_profile(0.1, 0.0, [(0.008, "launch")] * 2)) is None  # too few to matter
    assert _first(Profile("t", "cpu", None, None, None, [])) is None  # nothing measured
    over = _first(_profile(1.0, 1.2, [(0.1, "memory")]))  # the profiler's busy time past the median
    assert over is not None and over[0] == "library calls take 92% of the model's time"  # of 1.3 ms busy


def test_a_launch_bound_model_is_one_whose_triton_time_is_mostly_launches() -> None:
    """Where the model arms' starts matter (cold ones replaced by cache loads): the rule that sends
    CUDA graphs first, as one function."""
    assert launch_bound(_profile(0.1, 0.0, [(0.008, "launch")] * 10 + [(0.02, "memory")]))
    assert not launch_bound(_profile(0.1, 0.0, [(0.008, "launch")] * 2))  # too few kernels
    assert not launch_bound(_profile(1.0, 0.0, [(0.008, "launch")] * 10 + [(0.5, "memory")]))
    assert not launch_bound(_profile(1.0, 0.9, []))  # library calls only
    assert not launch_bound(Profile("t", "cpu", None, None, None, []))  # nothing measured


def test_options_go_first_where_the_triton_kernels_run_at_the_copy_roofline() -> None:
    """A small CNN in fp32 on the H200: cuDNN took a third of the time, the BN+ReLU kernels the
    rest at 100% of the copy roofline. The search could save little of it, so the options (whose
    convolution tuning needs the time) go first; a reduction counts whole (one read can beat the
    copy), and so does a kernel whose bandwidth is unknown."""
    def kernel(ms: float, kind: str, frac: float | None) -> KernelProfile:
        return KernelProfile("k", 0, kind, 1, ms, ms / 4.0, 0, None, frac, "memory")

    cnn = Profile("t", "cuda", 4.0, 1.3, None, [kernel(0.8, "pointwise", 1.003), kernel(0.5, "pointwise", 1.04),
                                                kernel(0.4, "pointwise", 1.0), kernel(0.2, "pointwise", 0.4),
                                                kernel(0.1, "reduction", 0.88)])
    why, searchable, _ = _first(cnn)  # type: ignore[misc]
    assert why == "the search could save at most 6% of the model's time"
    assert searchable == pytest.approx((0.2 * 0.6 + 0.1) / 4.0)  # what the search keeps a share of
    slow = Profile("t", "cuda", 4.0, 1.3, None, [kernel(0.8, "pointwise", 0.5), kernel(1.9, "pointwise", 1.0)])
    assert _first(slow) is None  # 0.4 ms of 4 above the roofline: the search goes first
    rows = Profile("t", "cuda", 1.0, 0.0, None, [kernel(1.0, "reduction", 1.04)])
    assert _first(rows) is None  # a reduction past the copy roofline can still get faster
    unknown = Profile("t", "cuda", 1.0, 0.0, None, [kernel(1.0, "pointwise", None)])
    assert _first(unknown) is None


def test_the_search_keeps_what_the_kernels_it_would_search_could_save() -> None:
    """The headroom that sizes the search's share counts only the kernels it would search: a
    kernel below the share threshold (or past the kernel limit) saves nothing, however slow."""
    def kernel(ms: float, kind: str, frac: float | None) -> KernelProfile:
        return KernelProfile("k", 0, kind, 1, ms, ms / 4.0, 0, None, frac, "memory")

    searched = kernel(0.2, "reduction", 0.9)
    prof = Profile("t", "cuda", 4.0, 2.4, None, [searched, kernel(0.06, "reduction", 0.5)])
    why, headroom, _ = options_first(prof, [searched])  # type: ignore[misc]
    assert why == "library calls take 60% of the model's time" and headroom == pytest.approx(0.2 / 4.0)


def test_library_time_no_option_can_tune_does_not_send_the_options_first() -> None:
    """A layer norm's training step on the H200: 63% of its time outside the compiled graphs (the
    eager loss and gradient kernels, no GEMM or convolution), 37% in two reductions. No option
    tunes that library time, so the search goes first; where the model calls GEMMs, the options
    go first as before."""
    prof = _profile(3.0, 1.9, [(0.6, "memory"), (0.5, "memory")])
    assert options_first(prof, prof.kernels, tunable_library=False) is None
    assert options_first(prof, prof.kernels, tunable_library=True) is not None
    assert compile_options.calls_templates(["extern_kernels.addmm", "aten.sum"])
    assert compile_options.calls_templates(["aten.convolution.default"])  # an overload's suffix
    assert not compile_options.calls_templates(["aten.sum", "extern_kernels._foreach_copy"])


def test_kernels_are_searched_in_the_order_of_what_a_faster_one_could_save() -> None:
    """A convolution + group norm model in fp32 on the H200: a pointwise kernel at 57% of the copy
    roofline (20% of the time) came before the group norm's reduction (14%), which the budget
    then left unsearched. Ranked by headroom, the reduction comes first; a pointwise kernel at
    the roofline and a launch-bound one come after any kernel with something to give, then by
    share; unmeasured kernels last."""
    def kernel(name: str, ms: float | None, kind: str, frac: float | None, bound: str | None = "memory") -> KernelProfile:
        return KernelProfile(name, 0, kind, 1, ms, None if ms is None else ms / 1.0, 0, None, frac, bound)

    prof = Profile("t", "cuda", 1.0, 0.5, None, [
        kernel("pointwise_57", 0.203, "pointwise", 0.57), kernel("group_norm", 0.135, "reduction", 0.8),
        kernel("at_roofline", 0.3, "pointwise", 1.02), kernel("launch", 0.009, "pointwise", None, "launch"),
        kernel("unmeasured", None, "reduction", None, None), kernel("small_pointwise", 0.089, "pointwise", 0.9)])
    assert [k.name for k in prof.ranked()] == [
        "group_norm", "pointwise_57", "small_pointwise", "at_roofline", "launch", "unmeasured"]
    assert prof.kernels[0].headroom_ms == pytest.approx(0.203 * 0.43)


def test_a_phase_deadline_counts_from_the_phase_start_for_every_arm_started_in_it(tmp_path: Path) -> None:
    """An option or pack arm started late in a phase gets what is left of the phase, not the
    phase's whole length from its own start (a second option wave, the final benchmark's second
    arm); nested phases keep the earlier deadline; baseline arms started in a phase keep their own
    limit, as the final benchmark needs them after it."""
    arms = ModelArms(str(EXAMPLES / "gelu.py"), "cpu", "fp32", timeout_s=600.0)
    assert arms.candidate_limit_s() == 600.0
    with arms_end_by(arms, 50.0):
        outer = arms.end_by
        time.sleep(0.5)
        assert 48.0 < arms.candidate_limit_s() < 49.6
        with arms_end_by(arms, 100.0):
            assert arms.end_by == outer  # the earlier deadline holds
        with arms_end_by(arms, 10.0):
            assert outer is not None and arms.end_by is not None and arms.end_by < outer
        with arms_end_by(arms, None):
            assert arms.end_by == outer
        with arms:
            arms.prestart()
            assert all(w.start_timeout_s == 600.0 for w in arms._baselines.values())
    assert arms.end_by is None and arms.candidate_limit_s() == 600.0
    arms.end_by = time.monotonic() - 5.0
    assert arms.candidate_limit_s() == 1.0  # past the deadline: a second, not a negative limit


def test_an_options_rounds_end_with_the_time_it_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rounds of an option's comparison end by the timing's deadline as it stood when its
    check began (past MIN_ROUNDS), and its line says how many of the planned rounds it timed."""
    from kernelopt_bot.harness.bench import BenchResult, RoundResult

    given: list[float | None] = []

    def compare(*_a: Any, rounds: int = 10, end_by: float | None = None, **_k: Any) -> BenchResult:
        given.append(None if end_by is None else end_by - time.monotonic())
        done = [RoundResult(1000 + i, 1.0, 0.9, 1.0) for i in range(3)]
        return BenchResult("t", "cuda", "fp32", 1.0, 0.9, 1.0 / 0.9, 0.0, rounds=done, rounds_planned=rounds)

    monkeypatch.setattr(compile_options, "check_model", lambda *_a: SimpleNamespace(passed=True))
    monkeypatch.setattr(compile_options, "compare_arms", compare)
    target = SimpleNamespace(spec="t")
    (rec,) = recommend(_ReadyArena(), target, gamma=1.03, time_left=lambda: 60.0, options=COMPILE_OPTIONS[:1])  # type: ignore[arg-type]
    assert given and given[0] is not None and 55.0 < given[0] <= 60.0
    assert rec.speedup == pytest.approx(1.0 / 0.9) and rec.detail.endswith("(3 of 10 rounds: the wall-time budget ran out)")


def test_options_that_may_be_timed_in_the_reserve_compile_into_it_never_short_of_the_searchs_deadline() -> None:
    """With nothing to search, a compiled option is timed in the final benchmark's reserve less
    what that benchmark needs: its arm compiles until its check and rounds could still finish
    there (tiny_vit bf16 on the H200: max-autotune stopped at the search's deadline with 18 s of
    the reserve unused). Where the final benchmark's need is large while its own arm compiles
    (it shrinks once that arm is ready), the arms still compile until the search's deadline."""
    for final_need, limit in ((2.0, 100.0 + 20.0 - 2.0 - MIN_BENCH_S), (25.0, 100.0)):
        now = [0.0]
        arena = _SlowArena(now)
        recs = recommend_in_time(arena, None, 1.03, 3, Budget(max_wall_s=100.0, clock=lambda now=now: now[0]),
                                 candidate_s=20.0, reserve_s=20.0, final_need_s=lambda n=final_need: n)
        assert arena.started == [limit] * 3 and now[0] == limit
        assert all(r.detail == "not measured: the wall-time budget ran out while it compiled (stopped)" for r in recs)


def test_options_that_could_not_start_before_the_search_go_after_it() -> None:
    """small_cnn bf16 on the H200: the options went first (library calls 64% of the time) and each
    was passed over (its compile and timing would not finish in what the search's share left); the
    run then ended with 39 s unused. Where the quickest option fits in what the search has beyond
    MIN_SEARCH_S, the ones that did not start are measured after the search instead."""
    arena = _ReadyArena()
    recs = recommend(arena, None, gamma=1.03, time_left=lambda: 36.0,  # type: ignore[arg-type]
                     compile_s=28.5, template_s=8.0)
    assert arena.arms == [] and all(r.detail.startswith(compile_options.PASSED_OVER) for r in recs)
    assert [r.compile_s for r in recs] == [None] * 3 and [r.compile_estimate_s for r in recs] == [36.5, 41.3, 28.5]
    labels = [o.label for o in COMPILE_OPTIONS]
    assert compile_options.not_started(recs) == labels
    # CUDA graphs, the quickest: 28.5 s compile + 10 s check and rounds, in 63 - 20 s
    assert options_later(recs, 63.0, 28.5, 8.0, MIN_BENCH_S) == (labels, 38.5)
    assert options_later(recs, None, 28.5, 8.0, MIN_BENCH_S) == (labels, 38.5)
    # a slower host's compile (22.5 s captured, 33.75 s an option) in 60 s: the search keeps its time
    assert options_later(recs, 60.0, 33.75, 8.0, MIN_BENCH_S) == ([], 0.0)
    assert options_later([], 63.0, 28.5, 8.0, MIN_BENCH_S) == ([], 0.0)  # none was measured first
    # A small model's quick compile still needs what any option needs to start (MIN_OPTION_S), or
    # a candidate's gates in processes where those take longer: else the search would give up its
    # time and no option start after it
    assert options_later(recs, 40.0, 6.0, 8.0, MIN_BENCH_S) == ([], 0.0)
    assert options_later(recs, 50.0, 6.0, 8.0, MIN_BENCH_S) == (labels, 30.0)
    assert options_later(recs, 50.0, None, 8.0, MIN_BENCH_S, candidate_s=45.0) == ([], 0.0)
    assert options_later(recs, 70.0, None, 8.0, MIN_BENCH_S, candidate_s=45.0) == (labels, 45.0)
    assert options_later(recs, 50.0, 6.0, 8.0, MIN_BENCH_S, candidate_s=45.0) == (labels, 30.0)
    # Only max-autotune waiting (the others are the baseline's own settings): its template tuning counts
    only = [recs[0]] + [compile_options.Recommendation(r.option, None, False, compile_options.ALREADY + " x")
                        for r in recs[1:]]
    assert options_later(only, 63.0, 28.5, 8.0, MIN_BENCH_S) == ([], 0.0)  # 46.5 s in 43
    assert options_later(only, 70.0, 28.5, 8.0, MIN_BENCH_S) == ([labels[0]], 46.5)


def test_options_that_had_their_time_before_the_search_do_not_go_again() -> None:
    """Only options none of whose arms started wait for the search: once one compiled, failed, was
    stopped or measured, the options had their share; an option that is the baseline's own setting
    is never measured."""
    rec = compile_options.Recommendation
    ran_out, already = compile_options.RAN_OUT, compile_options.ALREADY + " mode=max-autotune-no-cudagraphs"
    waiting = [rec("a", None, False, ran_out), rec("b", None, False, compile_options.NO_ROOM)]
    assert compile_options.not_started(waiting) == ["a", "b"]
    assert compile_options.not_started([rec("x", None, False, already), *waiting]) == ["a", "b"]
    for had in (rec("c", 1.1, True, "verified"), rec("c", None, False, "failed: no kernel"),
                rec("c", None, False, "not measured: the wall-time budget ran out while it compiled (stopped)"),
                rec("c", None, False, "not measured: the wall-time budget ran out after its compile", compile_s=40.0),
                rec("c", None, False, "not measured: the baseline arms did not start (boom)")):
        assert compile_options.not_started([*waiting, had]) == []
    # measured after the search, each takes its place in the report's order
    merged = compile_options.merge_recommendations(
        [rec("x", None, False, already), *waiting], [rec("b", 1.2, True, "verified"), rec("a", 0.9, False, "slower")])
    assert [(r.option, r.speedup) for r in merged] == [("x", None), ("a", 0.9), ("b", 1.2)]


class _LabelArena(_ClockedArena):
    """Records the label of each option arm it starts."""

    def __init__(self, now: list[float], compiled_at: float) -> None:
        super().__init__(now, compiled_at)
        self.labels: list[str] = []

    def candidate(self, *a: Any, **k: Any) -> Any:
        self.labels.append(k["label"])
        return super().candidate(*a, **k)


def test_the_run_measures_after_the_search_the_options_that_could_not_start_before_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's option steps, end to end on a test clock (small_cnn's figures on a fast host: a
    19 s capture, 63 s of the search's time, a headroom of 9.6%): before the search every option
    is passed over, the search then leaves them their time instead of the final benchmark's 9 s
    alone, and after it they are measured, in the report's order."""
    now, checked = _timed_checks(monkeypatch, 5.0)
    budget = Budget(max_wall_s=63.0, clock=lambda: now[0])
    arena = _LabelArena(now, 0.0)
    said: list[str] = []
    steps = OptionSteps(arena, SimpleNamespace(train=False), budget, 1.03, 3, 20.0, compile_s=19.0,
                        template_s=8.0, model_ms=None, candidate_s=lambda trusted: 10.0, log=said.append)
    before = steps.before_search(OptionsFirst("library calls take 64% of the model's time", 0.096), 10.0)
    assert arena.labels == [] and all(r.detail.startswith(compile_options.PASSED_OVER) for r in before)
    assert steps.later == [o.label for o in COMPILE_OPTIONS] and steps.after_pending
    assert said[-1] == "    none started: 3 measured after the search instead"
    assert steps.search_holdback_s(10.0) == 43.0  # the search keeps MIN_SEARCH_S of its 63 s
    now[0] = 20.0  # the search took its 20 s
    arena.compiled_at = 20.0 + 28.5
    after = steps.after_search(before, lambda: 20.0)  # a pack: the final benchmark needs its reserve
    # CUDA graphs fits the 43 s left (28.5 s compile, 10 s check); max-autotune (+8 s) and
    # coordinate descent (1.45x: 41.3 s) do not
    assert arena.labels == [compile_options.CUDA_GRAPHS] and checked == [48.5]
    assert [r.option for r in after] == [o.label for o in COMPILE_OPTIONS]
    assert after[2].detail == "outputs differ: checked"
    assert all(r.detail.startswith(compile_options.PASSED_OVER) for r in after[:2]) and not steps.after_pending
    assert steps.after_search(after, lambda: 20.0) is after  # measured once
    # Without a searched kernel nothing is left for later: the options had the search's time
    now[0] = 0.0
    steps = OptionSteps(_LabelArena(now, 0.0), SimpleNamespace(train=False), Budget(max_wall_s=20.0, clock=lambda: now[0]),
                        1.03, 3, 20.0, compile_s=19.0, template_s=8.0, model_ms=None,
                        candidate_s=lambda trusted: 10.0, log=said.append)
    steps.before_search(OptionsFirst("library calls take 64% of the model's time", 0.0), 10.0,
                        lambda: 20.0)
    assert steps.later == [] and not steps.after_pending and steps.search_holdback_s(10.0) == 0.0


def test_options_the_budget_left_unmeasured_take_what_the_search_leaves_unused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """mlp bf16 on the H100 (12-06): before the search max-autotune was measured, coordinate descent
    compiled and found no time to be timed, CUDA graphs did not start; the search then ended with
    30 s unused. Those two are measured after the search in time it leaves, none held back from it;
    the one that compiled loads from the cache (its estimate is a default compile's), and one that
    finds no time again keeps its first reason."""
    rec = compile_options.Recommendation
    mant, cd, graphs = (o.label for o in COMPILE_OPTIONS)
    before = [rec(mant, 1.016, False, "speedup 1.016x is below gamma 1.03", compile_s=36.1),
              rec(cd, None, False, compile_options.COMPILED_UNTIMED, compile_s=18.6),
              rec(graphs, None, False, compile_options.RAN_OUT)]
    assert compile_options.short_of_time(before) == ([cd, graphs], frozenset({cd}))
    assert compile_options.short_of_time([*before[:1], rec("x + pack", None, False, compile_options.RAN_OUT)]) == (
        [], frozenset())
    now, checked = _timed_checks(monkeypatch, 5.0)
    arena = _LabelArena(now, 0.0)

    def steps() -> OptionSteps:
        made = OptionSteps(arena, SimpleNamespace(train=False), Budget(max_wall_s=63.0, clock=lambda: now[0]), 1.03,
                           3, 20.0, compile_s=19.0, template_s=8.0, model_ms=None,
                           candidate_s=lambda trusted: 10.0, log=lambda _m: None)
        made.went_first = True
        return made

    plain, with_leftover = steps(), steps()
    with_leftover.leftover, with_leftover.cached = compile_options.short_of_time(before)
    assert with_leftover.after_pending and not plain.after_pending
    assert with_leftover.search_holdback_s(10.0) == plain.search_holdback_s(10.0)  # the search keeps its time
    now[0] = 18.0  # 45 s of the run left past the final benchmark's 20 s
    arena.compiled_at = now[0] + 28.5
    after = with_leftover.after_search(before, lambda: 20.0)
    # coordinate descent from the cache: 28.5 s and its 10 s check fit (cold, 1.45x, it would not);
    # CUDA graphs, cold, then finds 6.5 s
    assert arena.labels == [cd] and checked == [46.5]
    assert [(r.option, r.detail) for r in after] == [(mant, before[0].detail), (cd, "outputs differ: checked"),
                                                     (graphs, compile_options.RAN_OUT)]
    assert not with_leftover.after_pending


def test_the_search_leaves_a_waiting_max_autotune_its_template_tuning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model compiled with coordinate descent under CUDA graphs has max-autotune alone to
    measure: where it waits for the search, the search leaves it its template tuning too (46.5 s
    of its 70 s, capped at what the search keeps), not the 43.5 s the default estimate gives."""
    now, _ = _timed_checks(monkeypatch, 5.0)
    arena = _LabelArena(now, 0.0)
    arena.mode, arena.config = "reduce-overhead", {"coordinate_descent_tuning": True}
    steps = OptionSteps(arena, SimpleNamespace(train=False), Budget(max_wall_s=70.0, clock=lambda: now[0]), 1.03, 3,
                        20.0, compile_s=19.0, template_s=8.0, model_ms=None, candidate_s=lambda trusted: 10.0,
                        log=lambda _m: None)
    recs = steps.before_search(OptionsFirst("library calls take 64% of the model's time", 0.096), 10.0)
    assert recs[0].detail.startswith(compile_options.PASSED_OVER)
    assert all(r.detail.startswith(compile_options.ALREADY) for r in recs[1:])
    assert steps.later == ["mode=max-autotune-no-cudagraphs"] and steps.later_need_s == 46.5
    assert steps.search_holdback_s(10.0) == 50.0


def test_on_a_launch_bound_model_cuda_graphs_is_measured_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny_vit bf16 on the H200: the options went first (its Triton time launch-bound), and
    max-autotune and coordinate descent took the time while CUDA graphs, the option that removes
    launches, never started. Where time holds one option, CUDA graphs is it; the report keeps its
    order (max-autotune, coordinate descent, CUDA graphs)."""
    now, checked = _timed_checks(monkeypatch, 5.0)
    arena = _LabelArena(now, 0.0)
    said: list[str] = []
    def steps(arena: _LabelArena) -> OptionSteps:
        return OptionSteps(arena, SimpleNamespace(train=False), Budget(max_wall_s=42.0, clock=lambda: now[0]), 1.03,
                           3, 20.0, compile_s=14.0, template_s=8.0, model_ms=None,
                           candidate_s=lambda trusted: 10.0, log=said.append)

    why = "100% of the Triton kernels' time is in launch-bound kernels"
    recs = steps(arena).before_search(OptionsFirst(why, 0.0, compile_options.CUDA_GRAPHS), 10.0, lambda: 20.0)
    # CUDA graphs 21 s compile (30 s to start) + 10 s check, coordinate descent 30.5 s + 10 s: one
    # fits in 42 s (max-autotune, with its template tuning, none)
    assert arena.labels == [compile_options.CUDA_GRAPHS] and len(checked) == 1
    assert [r.option for r in recs] == [o.label for o in COMPILE_OPTIONS]
    assert recs[2].detail == "outputs differ: checked" and recs[0].detail.startswith(compile_options.PASSED_OVER)
    assert "mode=reduce-overhead (CUDA graphs) first" in said[0]
    assert compile_options.led_by(None) == COMPILE_OPTIONS
    now[0] = 0.0
    arena = _LabelArena(now, 0.0)  # in the usual order, max-autotune would have been timed first
    steps(arena).before_search(OptionsFirst(why, 0.0), 10.0, lambda: 20.0)
    assert arena.labels[0] == "mode=max-autotune-no-cudagraphs"
    now[0] = 0.0
    arena = _LabelArena(now, 0.0)
    arena.mode = "reduce-overhead"  # the model already runs under CUDA graphs: nothing leads
    steps(arena).before_search(OptionsFirst(why, 0.0, compile_options.CUDA_GRAPHS), 10.0, lambda: 20.0)
    assert " first" not in said[-1] and compile_options.CUDA_GRAPHS not in arena.labels


def test_a_cold_option_arms_replacement_by_a_cache_load_is_planned_into_the_options_time() -> None:
    """On a launch-bound model every option arm that compiled cold is replaced by a cache load
    (ModelArms.warm_load): its seconds go into each option's estimate and what the search holds back."""
    from kernelopt_bot.schedule import OPTION_COMPILE_FACTOR

    def steps(reload_s: float) -> OptionSteps:
        arena = _Arena()
        arena.reload_s = reload_s
        return OptionSteps(arena, SimpleNamespace(train=False), Budget(max_wall_s=200.0), 1.03, 3, 20.0,
                           compile_s=19.0, template_s=8.0, model_ms=None, candidate_s=lambda trusted: 10.0,
                           log=lambda _line: None)

    plain, reloading = steps(0.0), steps(6.0)
    assert plain.option_compile_s == reloading.option_compile_s == pytest.approx(OPTION_COMPILE_FACTOR * 19.0)
    assert reloading.search_holdback_s(10.0) == pytest.approx(plain.search_holdback_s(10.0) + 6.0)
    # options that went first and did not start: the quickest one's need after the search counts it
    waiting = [compile_options.Recommendation(o.label, None, False, compile_options.PASSED_OVER) for o in COMPILE_OPTIONS]
    _, need = options_later(waiting, None, 28.5, 8.0, 10.0)
    _, need_reloading = options_later(waiting, None, 28.5, 8.0, 10.0, load_s=6.0)
    assert need_reloading == pytest.approx(need + 6.0)
    # recommend adds it to each option's compile once, unscaled by its compile_scale (max-autotune's
    # template tuning 8 s, coordinate descent 1.45x, CUDA graphs as estimated)
    arena = _SayingArena(41.6)
    arena.reload_s = 6.0
    left = itertools.chain([120.0], itertools.repeat(MIN_BENCH_S - 1))
    recs = recommend(arena, None, gamma=1.03, time_left=lambda: 120.0,  # type: ignore[arg-type]
                     bench_left=lambda: next(left), compile_s=28.5, template_s=8.0)
    assert [r.compile_estimate_s for r in recs] == [42.5, 47.3, 34.5]
