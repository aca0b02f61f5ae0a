"""Gate 4: the re-stitched model must beat the compiler baseline by gamma, end to end.

Measured only with the project's own harness (:func:`kernelopt_bot.harness.bench.compare_arms`): interleaved
rounds, fresh inputs per round, L2 flushed, median. A win counts only if

* the median speedup is at least ``gamma``;
* it exceeds the noise floor measured as baseline against baseline;
* the packed model is faster in every round;
* outputs still match after timing (nothing cached or left behind by the timed runs);
* the candidate kernel alone is not faster than physics allows (bytes it must move over the
  measured copy bandwidth, with slack for kernels that beat a plain copy): below that it skipped work;
* the model's saving is one the kernel's own saving explains (:func:`unexplained_saving`): a
  replaced kernel cannot save a call more than it saves itself, and on a launch-bound network two
  processes of one model differ by more than the baseline against itself shows (on the H200 an
  arm with an empty pack, which changes no kernel, measured 1.095x over the baseline, noise floor
  4.8%, faster in every round).

Without a GPU the gate reports "not measured" and never passes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.harness.arm_process import Arm, ArmError, failed_on_our_side
from kernelopt_bot.harness.bench import changed_after_timing, compare_arms
from kernelopt_bot.harness.failures import InfrastructureFailure
from kernelopt_bot.harness.timing import NOT_MEASURED
from kernelopt_bot.verify.tolerance import MODEL_TIGHT_TOLERANCE, compare
from kernelopt_bot.verify.verdict import GateResult

# Kernels can beat a plain device copy a little (we saw 106% on an H200); 1.3x the copy roofline is
# beyond the memory's datasheet peak, so only skipped work gets there.
PHYSICS_SLACK = 1.3
# How much more a model call may save than its replaced kernel saves alone (each launch timed on
# its own, L2 flushed): in the model the kernel's neighbours see its cache effects too.
SAVING_SLACK = 2.0


def physically_possible(bytes_moved: int, kernel_ms: float, copy_gbps: float,
                        slack: float = PHYSICS_SLACK) -> tuple[bool, float]:
    """Is ``kernel_ms`` achievable for ``bytes_moved``? Returns the verdict and the floor in ms."""
    floor_ms = bytes_moved / (copy_gbps * 1e9 * slack) * 1e3
    return kernel_ms >= floor_ms, floor_ms


def launches_a_call(kernels: Iterable[Any], recordings: dict[tuple[int, str], Any], key: str) -> int:
    """How often a model call launches the kernel of pack key ``key``: every graph's kernel with
    that key (the pack replaces it wherever it appears; names restart in each graph, so a name
    alone would count other kernels), each as often as the recorded run launched it."""
    return sum(recordings[(k.graph, k.name)].calls for k in kernels
               if k.key == key and (k.graph, k.name) in recordings)


def kernel_saving_ms(timing: dict[str, Any], launches: int | None) -> float | None:
    """What the replaced kernel saves a model call by itself: its launches a call times the time
    each launch saved, from gate 2's kernel-level timing (None: not timed, or launches unknown).
    The fastest calls where both are known: the candidate is timed while its arm compiles beside
    it, which only slows calls down, and a median taken then would understate the saving."""
    original, candidate = timing.get("original_min_ms"), timing.get("candidate_min_ms")
    if original is None or candidate is None:
        original, candidate = timing.get("original_ms"), timing.get("candidate_ms")
    if not launches or original is None or candidate is None:
        return None
    return launches * (float(original) - float(candidate))


def unexplained_saving(result: Any, saving_ms: float | None) -> str | None:
    """Why the end-to-end saving is not the kernel's, or None where the kernel explains it: the
    model saved more a call than SAVING_SLACK times the kernel's own saving, plus the noise floor's
    share of the baseline's time. Such a gain belongs to the arms' processes (host work that
    differs from one process to the next), not to the kernel."""
    if saving_ms is None or result.baseline_ms is None or not result.speedup:
        return None
    saved = result.baseline_ms * (1.0 - 1.0 / result.speedup)  # the speedup's saving, in the baseline's ms
    allowed = SAVING_SLACK * max(0.0, saving_ms) + (result.noise_floor or 0.0) * result.baseline_ms
    if saved <= allowed:
        return None
    return (f"the model saved {saved:.4f} ms a call, more than the kernel's own saving explains "
            f"({saving_ms:.4f} ms a call; at most {allowed:.4f} ms with slack and the noise floor): "
            "a difference between the arms' processes, not the kernel")


def agree_after_timing(packed: list[Any], baseline: list[Any]) -> bool:
    """Gate 4's ``outputs_agree`` (:func:`~kernelopt_bot.harness.bench.compare_arms`): every output
    of the packed model within the model gate's tight tolerance of the baseline's, elementwise and
    on the norm, each by its own dtype and scale (a small gradient is not measured against a large
    activation). Run-to-run rounding passes; a result cached or left behind by the timed runs,
    which differs from the timed input's by about the output's own size, does not. The bias and
    flush rules stay out: both compare against an accurate reference, and here both sides are
    compiled models."""
    return len(packed) == len(baseline) and all(
        compare(p, b, MODEL_TIGHT_TOLERANCE, f"output {i}", cancelling=True).ok
        for i, (p, b) in enumerate(zip(packed, baseline)))


def check_performance(baseline: Arm, candidate: Arm, repeat: Arm | None,
                      kernel_name: str, *, target: str, device: str, dtype: str,
                      gamma: float = DEFAULT_GAMMA, rounds: int = 10, reps: int = 20,
                      kernel_timing: dict[str, Any] | None = None, copy_gbps: float | None = None,
                      timeout_s: float = 600.0, split_step: bool = False, launches: int | None = None
                      ) -> GateResult:
    """Gate 4 on compiled arms (``candidate`` has the pack installed, ``repeat`` is a second baseline,
    or ``None`` for a model too large for two: the baseline is then timed twice a round).
    ``numbers["arms"]`` records where the arms ran ("process" or "engine"). ``split_step``: training
    steps, whose forward and backward are timed apart too (one accepted candidate's numbers may
    become the run's result). ``launches``: the kernel's launches a model call, with
    ``kernel_timing`` what it saves a call by itself (:func:`unexplained_saving`)."""
    if device != "cuda":
        return GateResult.not_run("performance", NOT_MEASURED)
    numbers: dict[str, Any] = {"gamma": gamma}
    timing = kernel_timing or {}
    fastest = timing.get("candidate_min_ms")
    if fastest is None:
        fastest = timing.get("candidate_ms")
    if fastest is not None and timing.get("bytes") and copy_gbps:
        ok, floor_ms = physically_possible(int(timing["bytes"]), float(fastest), copy_gbps)
        numbers.update(candidate_kernel_ms=timing.get("candidate_ms"), candidate_kernel_min_ms=fastest,
                       original_kernel_ms=timing.get("original_ms"), physical_floor_ms=floor_ms)
        if not ok:
            return GateResult.fail("performance", f"kernel time {fastest:.4g} ms (fastest call) is below the "
                                                  f"physical floor {floor_ms:.4g} ms: it skipped work", **numbers)
    numbers["arms"] = candidate.where
    try:
        result = compare_arms(baseline, candidate, repeat, target=target, device=device, dtype=dtype,
                              rounds=rounds, reps=reps, timeout_s=timeout_s, split_step=split_step,
                              outputs_agree=agree_after_timing)
    except ArmError as exc:
        # out of memory (after the arm's own retry), or an arm we killed at our deadline: ours
        if failed_on_our_side(exc):
            raise InfrastructureFailure(f"benchmark: {exc}") from exc
        return GateResult.fail("performance", f"benchmark failed: {exc}", **numbers)
    numbers.update(baseline_ms=result.baseline_ms, packed_ms=result.packed_ms, speedup=result.speedup,
                   noise_floor=result.noise_floor, rounds=len(result.rounds),
                   baseline_host_ms=result.baseline_host_ms, packed_host_ms=result.packed_host_ms,
                   host_noise_floor=result.host_noise_floor, host_speedup=result.host_speedup,
                   round_speedups=[r.speedup for r in result.rounds], step_split_ms=result.step_split_ms)
    # Only arms in separate processes differ that way; in-engine arms share one process's host work.
    saving = kernel_saving_ms(timing, launches) if candidate.where == "process" else None
    if saving is not None:
        numbers.update(kernel_saving_ms=saving, launches=launches)
    return judge(result, kernel_name, gamma, numbers, kernel_saving=saving)


def judge(result: Any, kernel_name: str | None, gamma: float, numbers: dict[str, Any],
          kernel_saving: float | None = None) -> GateResult:
    """Apply the gate's rules to a :class:`~kernelopt_bot.harness.bench.BenchResult` (``kernel_name`` None:
    a whole-model variant, nothing to have applied; ``kernel_saving``: what the replaced kernel
    saves a call by itself, None where unknown)."""
    if kernel_name is not None and kernel_name not in result.applied:
        return GateResult.fail("performance", f"the pack did not apply to {kernel_name}", **numbers)
    if result.speedup is None:
        return GateResult.fail("performance", f"not measured: {result.reason}", **numbers)
    if result.noise_floor is None:  # no baseline timed against itself: a gain cannot be told from noise
        return GateResult.fail("performance", "not measured: no noise floor (the baseline was not timed "
                                              "against itself)", **numbers)
    noise = result.noise_floor
    after = result.max_abs_diff_after_timing
    before = result.max_abs_diff or 0.0
    if changed_after_timing(before, after) and not result.agree_after_timing:
        return GateResult.fail("performance", f"outputs changed after timing (max diff {after:.3g}, "
                                              f"{before:.3g} before): a result depends on state", **numbers)
    if result.speedup < gamma:
        return GateResult.fail("performance", f"speedup {result.speedup:.3f}x is below gamma {gamma:g}", **numbers)
    if result.speedup - 1.0 <= noise:
        return GateResult.fail("performance", f"speedup {result.speedup:.3f}x is within the noise floor "
                                              f"{noise:.3%}", **numbers)
    unexplained = unexplained_saving(result, kernel_saving)
    if unexplained:
        return GateResult.fail("performance", unexplained, **numbers)
    slow_rounds = [i for i, r in enumerate(result.rounds) if r.speedup is None or r.speedup <= 1.0]
    if slow_rounds:
        return GateResult.fail("performance", f"not faster in every round (rounds {slow_rounds} were not)",
                               **numbers)
    return GateResult.ok("performance", f"{result.speedup:.3f}x end to end (gamma {gamma:g}, noise floor "
                                        f"{noise:.2%}, {len(result.rounds)} rounds)", **numbers)
