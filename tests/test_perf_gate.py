"""Gate 4's rules on measured results: gamma, noise floor, every round, state after timing, physics."""

from __future__ import annotations

from typing import Any

import pytest

from kernelopt_bot.harness.arm_process import ArmRaised, ArmTimeout
from kernelopt_bot.harness.bench import BenchResult, RoundResult
from kernelopt_bot.harness.failures import InfrastructureFailure
from kernelopt_bot.verify.perf import check_performance, judge, physically_possible


def _result(base: list[float], packed: list[float], repeat: list[float], *, applied: tuple[str, ...] = ("k",),
            after: float = 0.0, scale: float | None = None, dtype: str = "fp32") -> BenchResult:
    rounds = [RoundResult(1000 + i, b, p, r) for i, (b, p, r) in enumerate(zip(base, packed, repeat))]
    result = BenchResult("t", "cuda", dtype, None, None, None, None, rounds=rounds, applied=list(applied),
                         max_abs_diff=0.0, max_abs_diff_after_timing=after, output_scale_after_timing=scale)
    from kernelopt_bot.harness.bench import _summarize

    _summarize(result)
    return result


def test_a_clear_win_passes() -> None:
    verdict = judge(_result([1.0] * 5, [0.8] * 5, [1.001] * 5), "k", 1.03, {})
    assert verdict.passed is True and "1.250x" in verdict.reason


@pytest.mark.parametrize(("result", "reason"), [
    (_result([1.0] * 5, [0.99] * 5, [1.0] * 5), "below gamma"),
    (_result([1.0] * 5, [0.95] * 5, [0.94] * 5), "noise floor"),
    (_result([1.0, 1.0, 1.0, 1.0, 0.9], [0.9, 0.9, 0.9, 0.9, 0.95], [1.0] * 5), "every round"),
    (_result([1.0] * 5, [0.8] * 5, [1.0] * 5, after=0.5), "after timing"),
    (_result([1.0] * 5, [0.8] * 5, [1.0] * 5, applied=()), "did not apply"),
], ids=["below-gamma", "noise", "one-slow-round", "stateful", "not-applied"])
def test_rules_reject(result: BenchResult, reason: str) -> None:
    verdict = judge(result, "k", 1.03, {})
    assert verdict.passed is False and reason in verdict.reason


def test_run_to_run_rounding_after_timing_is_not_state() -> None:
    """On the H200 max-autotune's small CNN (bf16) matched the baseline bit for bit before timing
    and by one bf16 unit on the timed input (0.000977 on outputs up to about 0.4): rounding that
    differs from run to run, not a result left behind by timing."""
    verdict = judge(_result([1.0] * 5, [0.8] * 5, [1.0] * 5, after=0.000977, scale=0.4, dtype="bf16"), None, 1.03, {})
    assert verdict.passed is True, verdict.reason


@pytest.mark.parametrize(("after", "scale", "dtype"), [
    (0.3, 0.4, "bf16"),  # a stale result: about the outputs' own size
    (0.02, 0.4, "bf16"),  # beyond bf16's tight model tolerance (1.7% of the largest value)
    (1e-4, 1.0, "fp32"),  # fp32's tight tolerance is 1.1e-5 of the largest value
    (0.000977, None, "bf16"),  # no scale recorded: only ten times the difference before counts
], ids=["stale-bf16", "beyond-bf16-tolerance", "beyond-fp32-tolerance", "no-scale"])
def test_state_after_timing_beyond_rounding_is_rejected(after: float, scale: float | None, dtype: str) -> None:
    verdict = judge(_result([1.0] * 5, [0.8] * 5, [1.0] * 5, after=after, scale=scale, dtype=dtype), None, 1.03, {})
    assert verdict.passed is False and "depends on state" in verdict.reason


def test_faster_than_physics_is_skipped_work() -> None:
    # 1 GiB moved at a measured 4000 GB/s takes at least ~0.27 ms; with 1.3x slack the floor is ~0.21 ms.
    ok, floor = physically_possible(1 << 30, 0.05, 4000.0)
    assert not ok and 0.2 < floor < 0.21
    assert physically_possible(1 << 30, 0.30, 4000.0)[0]


def test_verdicts_with_infinite_errors_can_be_stored(tmp_path) -> None:
    """A candidate whose error is infinite must not break the store (strict JSON)."""
    from kernelopt_bot.result import RunResult
    from kernelopt_bot.store import Store
    from kernelopt_bot.verify.verdict import GateResult, Verdict

    verdict = Verdict("g0:k", "c", [GateResult.fail("model", "NaN", err_candidate_f64=float("inf"),
                                                    errs=[1.0, float("nan")])])
    with Store(tmp_path / "db") as store:
        run = store.runs.start("t", "cuda", "fp32", {}, {}, {})
        store.runs.record_candidate(run, "k" * 64, "tuner", "c", None, None, verdict, None)
        stored = store.runs.candidates(run)[0]["verdict"]
        store.runs.finish(run, RunResult("t", "t", "cuda", "fp32"))
    assert stored["gates"][0]["numbers"] == {"err_candidate_f64": "inf", "errs": [1.0, "nan"]}


def test_physical_floor_judges_the_fastest_call_not_the_median() -> None:
    """Contention (the candidate's arm warming up beside gate 2) only slows calls down: a median
    above the floor with a fastest call below it is still skipped work. Nothing is benchmarked."""
    timing = {"candidate_ms": 0.30, "candidate_min_ms": 0.05, "bytes": 1 << 30, "original_ms": 0.4}
    result = check_performance(None, None, object(), "k", target="t.py", device="cuda", dtype="bf16",  # type: ignore[arg-type]
                               kernel_timing=timing, copy_gbps=4000.0)
    assert result.passed is False and "fastest call" in result.reason
    assert result.numbers["candidate_kernel_min_ms"] == 0.05 and result.numbers["candidate_kernel_ms"] == 0.30


class _FailingArm:
    """An arm whose every request fails with ``text`` (as an arm process or the engine reports)."""

    where, info, ready = "engine", {"applied": ["k"]}, True

    def __init__(self, text: str) -> None:
        self.text = text

    def request(self, *_message: Any, **_kwargs: Any) -> Any:
        raise ArmRaised("candidate", self.text)


def test_out_of_memory_while_benchmarking_is_ours_and_a_crash_is_the_candidates() -> None:
    oom = _FailingArm("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(InfrastructureFailure, match="out of memory"):
        check_performance(oom, oom, oom, "k", target="t.py", device="cuda", dtype="fp32")
    crash = _FailingArm("RuntimeError: the candidate's own error")
    result = check_performance(crash, crash, crash, "k", target="t.py", device="cuda", dtype="fp32")
    assert result.passed is False and "benchmark failed" in result.reason and result.numbers["arms"] == "engine"


def test_an_arm_killed_at_our_deadline_while_benchmarking_is_ours() -> None:
    """The baseline (or any arm) gave no answer within the time we gave it: no verdict on the
    candidate."""

    class _Hung(_FailingArm):
        def request(self, *_message: Any, **_kwargs: Any) -> Any:
            raise ArmTimeout("baseline: no answer to time within 600 s (killed)")

    hung = _Hung("")
    with pytest.raises(InfrastructureFailure, match="no answer to time"):
        check_performance(hung, hung, hung, "k", target="t.py", device="cuda", dtype="fp32")


def test_two_hiccups_in_ten_rounds_do_not_set_the_noise_floor() -> None:
    """The H200 case: the repeat arm took 7x longer in two of ten rounds; the medians did not move,
    so neither does the floor. A third such round is no longer a hiccup."""
    from kernelopt_bot.stats import noise_floor

    steady = [1.0, 1.005, 0.995, 1.01, 0.99, 1.0, 1.004, 0.996]
    assert noise_floor([*steady, 0.136, 0.152]) == pytest.approx(0.01)
    assert noise_floor([*steady, 0.136, 0.152, 0.14]) == pytest.approx(0.848)
    assert noise_floor([]) is None
    # a slow model's three or four rounds: one hiccup does not set the floor either
    assert noise_floor([1.0, 1.01, 0.136]) == pytest.approx(0.01)
    assert noise_floor([1.0, 0.995, 1.01, 0.136]) == pytest.approx(0.01)
    assert noise_floor([1.0, 1.02]) == pytest.approx(0.02)  # of two, no round can be left out
