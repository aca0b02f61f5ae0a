"""Gate 4's rules on measured results: gamma, noise floor, every round, state after timing, physics."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelopt_bot.harness.arm_process import ArmRaised, ArmTimeout
from kernelopt_bot.harness.bench import BenchResult, RoundResult, _summarize
from kernelopt_bot.harness.failures import InfrastructureFailure
from kernelopt_bot.verify.perf import agree_after_timing, check_performance, judge, physically_possible


def _result(base: list[float], packed: list[float], repeat: list[float], *, applied: tuple[str, ...] = ("k",),
            after: float = 0.0, agree: bool | None = None) -> BenchResult:
    rounds = [RoundResult(1000 + i, b, p, r) for i, (b, p, r) in enumerate(zip(base, packed, repeat))]
    result = BenchResult("t", "cuda", "fp32", None, None, None, None, rounds=rounds, applied=list(applied),
                         max_abs_diff=0.0, max_abs_diff_after_timing=after, agree_after_timing=agree)
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


@pytest.mark.parametrize(("agree", "passed"), [(True, True), (False, False), (None, False)])
def test_outputs_changed_after_timing_pass_only_within_their_tolerance(agree: bool | None, passed: bool) -> None:
    """Outputs bit-identical before timing and apart after it: state, unless the outputs on the
    timed input are still within tolerance (``agree_after_timing``; None: nobody asked)."""
    verdict = judge(_result([1.0] * 5, [0.8] * 5, [1.0] * 5, after=0.000977, agree=agree), None, 1.03, {})
    assert verdict.passed is passed, verdict.reason
    assert passed or "depends on state" in verdict.reason


def _one_unit_off(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its largest element moved by one unit of its dtype (run-to-run rounding)."""
    out = t.clone()
    flat = out.view(-1)
    i = int(flat.abs().argmax())
    flat[i] = torch.nextafter(flat[i:i + 1].float(), torch.tensor([float("inf")])).to(t.dtype) \
        if t.dtype == torch.float32 else flat[i] + flat[i].abs() * 2.0 ** -7
    return out


def test_rounding_that_differs_from_run_to_run_agrees_after_timing() -> None:
    """On the H200 max-autotune's small CNN (bf16) matched the baseline bit for bit before timing
    and by one bf16 unit (0.000977) on the timed input: rounding, not state."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        base = [torch.randn(64, 100, generator=g).to(dtype), torch.randn(3, generator=g).to(dtype)]
        assert agree_after_timing([_one_unit_off(base[0]), base[1]], base)


def test_a_stale_gradient_does_not_agree_after_timing() -> None:
    """A training step's outputs mix activations (about 1) and gradients (about 1e-3): a backward
    kernel that returns the previous input's gradient differs by about the gradient's own size,
    far under the activations' tolerance (a check on the largest value of all outputs let it
    through). Each output is judged by its own scale and dtype."""
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.bfloat16, torch.float32):
        activation = torch.randn(256, 64, generator=g).to(dtype)
        grad, stale = (1e-3 * torch.randn(64, 64, generator=g)).to(dtype), (1e-3 * torch.randn(64, 64, generator=g)).to(dtype)
        assert not agree_after_timing([activation, stale], [activation, grad])
        assert not agree_after_timing([activation], [activation, grad])  # an output missing
        assert agree_after_timing([activation, grad], [activation, grad])


class _SeededArm:
    """An arm whose outputs depend on the input's seed; ``after`` moves them on timed inputs."""

    where = "process"

    def __init__(self, after: Any = None) -> None:
        self.after = after
        self.info: dict[str, Any] = {"applied": ["k"], "skipped": []}

    def request(self, op: str, seed: int, *args: Any, **kwargs: Any) -> Any:
        if op == "time":
            return (1.0 if self.after is None else 0.8, None)
        out = [torch.randn(32, 16, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)]
        return out if self.after is None or seed < 1000 else [self.after(t, seed) for t in out]


@pytest.mark.parametrize(("after", "passed"), [
    (lambda t, _seed: _one_unit_off(t), True),  # rounding
    (lambda t, seed: torch.randn(32, 16, generator=torch.Generator().manual_seed(seed - 1)).to(t.dtype), False),  # stale
])
def test_gate_4_asks_the_outputs_tolerance_only_where_they_changed(monkeypatch: pytest.MonkeyPatch, after: Any,
                                                                   passed: bool) -> None:
    from kernelopt_bot.harness import bench

    real = bench._max_abs_diff
    monkeypatch.setattr(bench, "_max_abs_diff", lambda a, b, _device="cpu": real(a, b, "cpu"))  # no CUDA here
    result = bench.compare_arms(_SeededArm(), _SeededArm(after), _SeededArm(), target="t", device="cuda",
                                dtype="bf16", rounds=3, outputs_agree=agree_after_timing)
    assert result.max_abs_diff == 0.0 and result.agree_after_timing is passed
    verdict = judge(result, "k", 1.03, {})
    assert verdict.passed is passed and (passed or "depends on state" in verdict.reason)
    unchanged = bench.compare_arms(_SeededArm(), _SeededArm(lambda t, _s: t), _SeededArm(), target="t",
                                   device="cuda", dtype="bf16", rounds=3, outputs_agree=agree_after_timing)
    assert unchanged.agree_after_timing is None  # nothing changed: the tolerance is not asked


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
    """The H200 case: the repeat arm took 7x longer in two of ten rounds; the median of the paired
    ratios did not move, so neither does the floor. An offset of every round stays in it."""
    from kernelopt_bot.stats import noise_floor

    steady = [[1.0, 1.005], [0.995, 1.01], [0.99, 1.0], [1.004, 0.996], [1.0, 1.002], [0.998, 1.0],
              [1.003, 0.997], [1.0, 1.0]]
    floor = noise_floor([*steady, [0.136, 0.15], [0.152, 0.14]])
    assert floor is not None and floor <= 0.01
    assert noise_floor([*steady, [0.136, 0.15], [0.152, 0.14]]) == floor  # the same rounds, the same floor
    assert noise_floor([]) is None and noise_floor([[], []]) is None
    # three such rounds of ten move the median of the draws rarely: the median speedup ignores
    # them too; four of ten move it often, and set the floor
    assert (noise_floor([*steady[:7], [0.136, 0.15], [0.152, 0.14], [0.14, 0.15]]) or 1.0) <= 0.01
    assert (noise_floor([*steady[:6], [0.136, 0.15], [0.152, 0.14], [0.14, 0.15], [0.15, 0.14]]) or 0.0) > 0.3
    offset = noise_floor([[x * 1.04 for x in r] for r in steady])  # one process 4% slower in every pass
    assert offset is not None and 0.035 < offset < 0.05
    # a slow model's three rounds: too few to outvote a round whose baseline was 7x off, so
    # that round sets the floor (a measurement that cannot tell is not let pass); steady, it is small
    assert (noise_floor([[1.0, 1.002], [1.01, 1.008], [0.136, 0.14]]) or 0.0) > 0.5
    assert (noise_floor([[1.0, 1.002], [1.01, 1.008], [0.998, 1.0]]) or 1.0) <= 0.01


def _stored_rounds(name: str) -> list[RoundResult]:
    data = json.loads((Path(__file__).parent / "fixtures" / name).read_text())
    return [RoundResult.from_json(r) for r in data["rounds"]]


def test_passes_paired_in_time_read_a_noisy_host_that_the_medians_do_not() -> None:
    """tiny_vit fp32 with an empty pack on an H100 whose host switched between a fast and a slow
    state (0.87 and 1.6 ms a call) from one pass to the next, every arm alike: the rounds' medians
    of the baseline and of a second baseline differed by up to 30% and their ratio by 7%, while
    the passes paired in time put the baseline within 2% of itself. The empty pack changes no
    kernel and reads as no speedup: within the floor, and rejected."""
    result = BenchResult("t", "cuda", "fp32", None, None, None, None, applied=["k"], max_abs_diff=0.0,
                         rounds=_stored_rounds("noise_rounds_h100_tiny_vit_fp32.json"))
    _summarize(result)
    medians = [r.baseline_ms / r.baseline_repeat_ms for r in result.rounds]
    assert max(abs(m - 1.0) for m in medians) > 0.25
    assert result.noise_floor is not None and result.noise_floor < 0.04
    aa = statistics.median(x for r in result.rounds for x in r.repeat_ratios())
    assert abs(aa - 1.0) < 0.02
    assert result.speedup is not None and abs(result.speedup - 1.0) <= result.noise_floor  # within its floor
    medians_ratio = result.baseline_ms / result.packed_ms  # what the medians would have reported
    assert medians_ratio < 0.9


def test_the_saving_the_kernel_must_explain_is_the_paired_speedups() -> None:
    """Gate 4 asks the kernel to explain the saving the speedup reports, not the gap between the
    arms' medians. On the noisy host above, a packed arm 10% faster than the second baseline in
    every pass: the paired speedup is 1.09x (0.085 ms a call saved), while the medians would put
    the saving at 0.031 ms, which a kernel saving a quarter of the reported gain would explain."""
    rounds = _stored_rounds("noise_rounds_h100_tiny_vit_fp32.json")
    for r in rounds:
        r.packed_passes_ms = [x * 0.9 for x in r.baseline_repeat_passes_ms]
        r.packed_ms = statistics.median(r.packed_passes_ms)
    result = BenchResult("t", "cuda", "fp32", None, None, None, None, applied=["k"], max_abs_diff=0.0, rounds=rounds)
    _summarize(result)
    saved = result.baseline_ms * (1.0 - 1.0 / result.speedup)
    assert saved > 2.5 * (result.baseline_ms - result.packed_ms)  # the medians' gap is far smaller
    explains = (saved - result.noise_floor * result.baseline_ms) / 2  # the least kernel saving that explains it
    # (this host's rounds are not all faster: the rule after this one rejects both)
    assert "not the kernel" not in judge(result, "k", 1.03, {}, kernel_saving=1.1 * explains).reason
    verdict = judge(result, "k", 1.03, {}, kernel_saving=0.8 * explains)
    assert verdict.passed is False and "not the kernel" in verdict.reason


def test_without_a_noise_floor_there_is_no_verdict_of_speed() -> None:
    result = _result([1.0] * 5, [0.8] * 5, [1.0] * 5)
    result.noise_floor = None
    verdict = judge(result, "k", 1.03, {})
    assert verdict.passed is False and "no noise floor" in verdict.reason


def test_a_rounds_speedup_is_the_median_of_its_passes() -> None:
    """A state change that hits one arm's pass alone (the packed arm's third pass) leaves the
    round's speedup where the other passes put it; without passes a round is its medians' ratio."""
    r = RoundResult(1, 1.0, 0.8, 1.0, baseline_passes_ms=[1.0, 1.6, 1.0, 1.6], packed_passes_ms=[0.8, 1.28, 1.5, 1.28],
                    baseline_repeat_passes_ms=[1.0, 1.6, 1.0, 1.6])
    assert r.speedup == pytest.approx(1.25) and r.repeat_ratios() == [1.0] * 4
    assert RoundResult(1, 1.0, 0.8, 1.0).speedup == pytest.approx(1.25)
    assert RoundResult(1, 1.0, None, 1.0).speedup is None
    # a pass one arm did not measure is left out; the others still pair
    assert RoundResult(1, None, None, 1.0, baseline_passes_ms=[1.0, None, 1.1],
                       packed_passes_ms=[0.8, 0.8, None]).speedups() == pytest.approx([1.25])
    # of an even count of passes, the geometric mean of the middle two: noise symmetric in ratio
    # (1.25 and 0.8) reads as no speedup, not as 1.025
    assert RoundResult(1, 1.0, 1.0, 1.0, baseline_passes_ms=[1.0, 1.0], packed_passes_ms=[0.8, 1.25]).speedup \
        == pytest.approx(1.0)


# tiny_vit bf16 on the H200 (benchmarks/results/h200-2026-12-05b/call1, `kernelopt bench` with an
# empty pack): the rounds' medians of the baseline, the empty-pack arm and the baseline again.
EMPTY_PACK_ROUNDS = (
    [0.8854, 0.8541, 0.8828, 0.8891, 0.8963, 0.8639, 0.8724, 0.8967, 0.8741, 0.8658],
    [0.8210, 0.7847, 0.8041, 0.7926, 0.8239, 0.7937, 0.8005, 0.8453, 0.8085, 0.7998],
    [0.8400, 0.8363, 0.8369, 0.8483, 0.9044, 0.8568, 0.8419, 0.8588, 0.8606, 0.8548],
)


def test_a_gain_the_kernel_does_not_explain_is_the_processes_not_the_kernel() -> None:
    """On a launch-bound network an arm that changes no kernel measured 1.095x (1.088x as the median
    of the rounds' ratios), beyond its noise
    floor and faster in every round: every other rule passes it. What the replaced kernel saves
    by itself (nothing, here) cannot become a tenth of the model's time."""
    result = _result(*EMPTY_PACK_ROUNDS)
    assert result.speedup > 1.08 and result.noise_floor < 0.05
    assert judge(result, "k", 1.03, {}).passed is True  # the hole this rule closes
    verdict = judge(result, "k", 1.03, {}, kernel_saving=0.0)
    assert verdict.passed is False and "not the kernel" in verdict.reason


@pytest.mark.parametrize(("saving", "passed"), [(0.08, True), (0.05, True), (0.01, False), (-0.02, False)])
def test_a_real_gain_is_one_the_kernels_own_saving_explains(saving: float, passed: bool) -> None:
    """The model saved 0.1 ms a call: a kernel that saves 0.05 ms or more by itself explains it
    (slack 2 for its neighbours' cache effects), one that saves 0.01 ms does not."""
    verdict = judge(_result([1.0] * 5, [0.9] * 5, [1.001] * 5), "k", 1.03, {}, kernel_saving=saving)
    assert verdict.passed is passed, verdict.reason


def test_gate_4_asks_for_the_explanation_only_of_arms_in_separate_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arms in processes: the kernel's saving a call is its launches times what each saved (gate 2's
    timing); in-engine arms share one process's host work, and are not asked."""
    from kernelopt_bot.harness import bench

    real = bench._max_abs_diff
    monkeypatch.setattr(bench, "_max_abs_diff", lambda a, b, _device="cpu": real(a, b, "cpu"))  # no CUDA here
    timing = {"candidate_ms": 0.010, "original_ms": 0.012}  # 2 us a launch, 3 launches: 0.006 ms a call

    class _EngineArm(_SeededArm):
        where = "engine"

    def gate(arm: type[_SeededArm]) -> Any:
        return check_performance(arm(), arm(lambda t, _s: t), arm(), "k", target="t.py", device="cuda",
                                 dtype="bf16", rounds=3, kernel_timing=timing, launches=3)

    in_processes = gate(_SeededArm)  # the arms time 1.0 and 0.8 ms: 0.2 ms saved, 0.006 explained
    assert in_processes.passed is False and "not the kernel" in in_processes.reason
    assert in_processes.numbers["kernel_saving_ms"] == pytest.approx(0.006)
    in_engine = gate(_EngineArm)
    assert in_engine.passed is True and "kernel_saving_ms" not in in_engine.numbers


def test_a_kernels_launches_are_counted_by_its_pack_key_not_its_name() -> None:
    """Inductor's kernel names restart in each graph: graph 1's ``..._0`` is another kernel than
    graph 0's. The pack replaces a kernel wherever its key appears, in any graph."""
    from types import SimpleNamespace

    from kernelopt_bot.verify.perf import launches_a_call

    def kernel(graph: int, name: str, key: str) -> Any:
        return SimpleNamespace(graph=graph, name=name, key=key)

    kernels = [kernel(0, "triton_poi_fused_mul_0", "A"), kernel(1, "triton_poi_fused_mul_0", "B"),
               kernel(2, "triton_poi_fused_add_3", "A"), kernel(3, "triton_poi_fused_mul_0", "A")]
    recordings = {(0, "triton_poi_fused_mul_0"): SimpleNamespace(calls=2),
                  (1, "triton_poi_fused_mul_0"): SimpleNamespace(calls=5),
                  (2, "triton_poi_fused_add_3"): SimpleNamespace(calls=1)}  # graph 3's never launched
    assert launches_a_call(kernels, recordings, "A") == 3
    assert launches_a_call(kernels, recordings, "B") == 5
    assert launches_a_call(kernels, recordings, "C") == 0


def test_the_kernels_saving_compares_fastest_calls_where_both_are_known() -> None:
    """The candidate is timed while its arm compiles beside it: its median understates the saving
    (here it would be none), its fastest call does not."""
    from kernelopt_bot.verify.perf import kernel_saving_ms

    contended = {"candidate_ms": 0.0125, "candidate_min_ms": 0.0080, "original_ms": 0.0120, "original_min_ms": 0.0118}
    assert kernel_saving_ms(contended, 2) == pytest.approx(2 * 0.0038)
    assert kernel_saving_ms({"candidate_ms": 0.010, "original_ms": 0.012}, 3) == pytest.approx(0.006)
    assert kernel_saving_ms({"candidate_ms": 0.010, "original_ms": 0.012}, 0) is None
    assert kernel_saving_ms({"candidate_ms": 0.010}, 3) is None
