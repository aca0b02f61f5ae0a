"""End-to-end benchmark: ``torch.compile`` baseline against the model with a pack installed.

This harness is the source of every speedup the project reports. Three arms, each a separate
process (:mod:`kernelopt_bot.harness.arm_process`): the baseline, a second baseline (for the
noise floor), and the packed model. Each round draws fresh inputs from a new seed, every arm
times the same inputs (L2 flushed before each call), and the arms take turns in short passes, the
order mirrored from one pass to the next (:func:`pass_orders`), so a drift of the device during a
round weighs on all arms alike. An arm's time in a round is the median of its passes' medians;
reported times are medians over rounds. The speedup is the median, over every pass of every
round, of baseline / packed within that pass (:func:`pass_ratios`: a state of the machine that
lasts a moment falls on both sides of a ratio), and the noise floor is how far that estimator
puts the baseline from a second baseline (:func:`kernelopt_bot.stats.noise_floor`). A model too
large for two baseline processes (:attr:`~kernelopt_bot.harness.model_arms.ModelArms.one_baseline`)
has one, timed twice in each round: its noise floor is then that arm's against itself (``BenchResult.noise_from``).

Without a GPU the arms still compile and run (interpreter mode) and their outputs are compared,
but no time is reported.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelopt_bot.harness.arm_process import (
    Arm,
    ArmError,
    ArmProcess,
    ArmRaised,
    ArmSpec,
    compile_seconds,
    configs_unlike,
)
from kernelopt_bot.harness.cpu_pin import this_thread_on, timing_core
from kernelopt_bot.harness.failures import is_out_of_memory
from kernelopt_bot.harness.model_arms import BASELINE_LABELS, ModelArms
from kernelopt_bot.harness.quiet import arms_timing
from kernelopt_bot.harness.timing import time_request_calls
from kernelopt_bot.pack.format import KernelPack
from kernelopt_bot.stats import noise_floor, ratio_median

SEED_BASE = 1000
# Each arm is timed in this many short passes a round, interleaved with the others (see
# compare_arms), each pass at least MIN_PASS_REPS calls.
PASSES_PER_ROUND = 4
MIN_PASS_REPS = 3
# A pass of a fast model makes at least MIN_PASS_MS of calls (at most MAX_PASS_REPS): a round's
# median then rests on more calls where they are cheap. On the H200 a launch-bound network
# (0.54 ms a call, the host queueing its kernels) jittered by +-4% from one 5-call pass to the
# next, and the baseline against itself measured a noise floor of 3.9-12.7%.
MIN_PASS_MS = 12.0
MAX_PASS_REPS = 24
# Before the first round every arm is timed in turn until each pass is within STEADY_WITHIN of
# that arm's previous one (at most WARMUP_MAX_S): on the H200 a launch-bound network's first three
# rounds once took 1.0-1.6 ms a call and the next seven 0.8 ms, in every arm alike.
STEADY_WITHIN = 0.03
WARMUP_MAX_S = 2.0
# What a "time" request costs beyond its calls: the round's inputs made on the device, the reply
# over the pipe (an estimate for planning, not a measurement).
REQUEST_OVERHEAD_S = 0.005
# A comparison's rounds are fitted to the model (rounds_within): as many as take COMPARE_WITHIN_S,
# never fewer than MIN_ROUNDS. A slow model's call is long enough to time alone: on the H200 a
# 31 ms MLP's ten rounds took 47 s, and its compiler options were never started in a 110 s budget.
COMPARE_WITHIN_S = 15.0
MIN_ROUNDS = 3


@dataclass
class RoundResult:
    """One round's GPU times (CUDA events) and host-inclusive latencies (wall clock per call,
    synchronized) of each arm, in ms."""

    seed: int
    baseline_ms: float | None
    packed_ms: float | None
    baseline_repeat_ms: float | None
    baseline_host_ms: float | None = None
    packed_host_ms: float | None = None
    baseline_repeat_host_ms: float | None = None
    # A training step's split (compare_arms(split_step=True)), in the same round: the device's time
    # alone (host hidden) of the forward half and of the whole step
    baseline_forward_ms: float | None = None
    packed_forward_ms: float | None = None
    baseline_step_device_ms: float | None = None
    packed_step_device_ms: float | None = None
    # Each arm's GPU time in each pass of the round, in pass order (a pass times every arm once,
    # back to back): the speedup and the noise floor pair the arms within each pass (speedups,
    # repeat_ratios), and scripts/noise_table.py recomputes both from a stored result.
    baseline_passes_ms: list[float | None] = field(default_factory=list)
    packed_passes_ms: list[float | None] = field(default_factory=list)
    baseline_repeat_passes_ms: list[float | None] = field(default_factory=list)
    # The same passes' host-inclusive latencies (None where the arm measured none)
    baseline_host_passes_ms: list[float | None] = field(default_factory=list)
    packed_host_passes_ms: list[float | None] = field(default_factory=list)
    baseline_repeat_host_passes_ms: list[float | None] = field(default_factory=list)
    # A training step's halves, pass by pass (the baseline's and the packed model's in the same
    # pass): each half's speedup pairs them as the step's does (step_half_ratios)
    baseline_forward_passes_ms: list[float | None] = field(default_factory=list)
    packed_forward_passes_ms: list[float | None] = field(default_factory=list)
    baseline_step_passes_ms: list[float | None] = field(default_factory=list)
    packed_step_passes_ms: list[float | None] = field(default_factory=list)

    def step_half_ratios(self, half: str) -> list[float]:
        """Baseline over packed of a training step's ``forward`` or ``backward`` (the step less its
        forward, pass by pass), paired within each pass; a round without stored passes counts as
        one pass of its medians."""
        if half == "forward":
            return pass_ratios(self.baseline_forward_passes_ms, self.packed_forward_passes_ms,
                               self.baseline_forward_ms, self.packed_forward_ms)

        def backward(step: list[float | None], forward: list[float | None]) -> list[float | None]:
            if len(step) != len(forward):
                return []
            return [s - f if s is not None and f is not None else None for s, f in zip(step, forward)]

        def backward_ms(step: float | None, forward: float | None) -> float | None:
            return step - forward if step is not None and forward is not None else None

        return pass_ratios(backward(self.baseline_step_passes_ms, self.baseline_forward_passes_ms),
                           backward(self.packed_step_passes_ms, self.packed_forward_passes_ms),
                           backward_ms(self.baseline_step_device_ms, self.baseline_forward_ms),
                           backward_ms(self.packed_step_device_ms, self.packed_forward_ms))

    def speedups(self, host: bool = False) -> list[float]:
        """Baseline over packed, pass by pass (:func:`pass_ratios`); ``host``: of the host latencies."""
        if host:
            return pass_ratios(self.baseline_host_passes_ms, self.packed_host_passes_ms,
                               self.baseline_host_ms, self.packed_host_ms)
        return pass_ratios(self.baseline_passes_ms, self.packed_passes_ms, self.baseline_ms, self.packed_ms)

    def repeat_ratios(self, host: bool = False) -> list[float]:
        """Baseline over baseline-repeat, pass by pass: what the noise floor is made of."""
        if host:
            return pass_ratios(self.baseline_host_passes_ms, self.baseline_repeat_host_passes_ms,
                               self.baseline_host_ms, self.baseline_repeat_host_ms)
        return pass_ratios(self.baseline_passes_ms, self.baseline_repeat_passes_ms,
                           self.baseline_ms, self.baseline_repeat_ms)

    @property
    def speedup(self) -> float | None:
        """The round's speedup: the median of its passes' (gate 4 wants it above 1 in every round)."""
        return ratio_median(self.speedups())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RoundResult:
        """A round as :meth:`BenchResult.to_json` wrote it, of any date: keys it computes (the
        round's ``speedup``) or no longer has are left out, fields it did not write yet take
        their defaults."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def pass_ratios(numer: list[float | None], denom: list[float | None],
                numer_ms: float | None, denom_ms: float | None) -> list[float]:
    """Ratios of two arms' times, pass by pass: a pass times every arm once, back to back, so a
    state the machine is in for a moment (a slower host, a clock) mostly weighs on both sides of a
    ratio alike. A pass either arm did not measure is left out. A round that kept no passes (a
    result written before 2026-12-05) counts as one pass of its medians; [] where a side measured
    nothing."""
    if numer or denom:
        if len(numer) != len(denom):
            return []
        return [float(x) / float(y) for x, y in zip(numer, denom) if x and y and x > 0 and y > 0]
    if numer_ms and denom_ms and numer_ms > 0 and denom_ms > 0:
        return [numer_ms / denom_ms]
    return []


@dataclass
class BenchResult:
    target: str
    device: str
    dtype: str
    baseline_ms: float | None
    packed_ms: float | None
    speedup: float | None
    noise_floor: float | None
    rounds: list[RoundResult] = field(default_factory=list)
    baseline_host_ms: float | None = None  # medians of the host-inclusive latency of a call
    packed_host_ms: float | None = None
    host_noise_floor: float | None = None
    host_speedup: float | None = None  # of the host-inclusive latencies, paired by pass as the speedup is
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    max_abs_diff: float | None = None
    max_abs_diff_after_timing: float | None = None
    # Where the outputs changed after timing (changed_after_timing): whether each output of the
    # packed model is still within tolerance of the baseline's on the timed input, as the caller's
    # ``outputs_agree`` judged (None: not asked). Rounding that differs from run to run passes there.
    agree_after_timing: bool | None = None
    reason: str = ""
    noise_from: str = "two baseline processes"
    warmup_passes: int = 0  # the passes of every arm before the first round (:func:`_warm_up`)
    pass_reps: int = 0  # the calls of each timed pass (:func:`_pass_reps`, from the warm-up's time a call)
    rounds_planned: int = 0  # more than len(rounds) where the comparison's deadline cut it short
    # A training step's time split (ms of device time, medians over rounds): {"forward": {"baseline",
    # "optimized"}, "backward": {...}}; the backward is the step less its forward, timed in the same round.
    step_split_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # How each arm started ({"baseline": {"cache": {"hit", "miss", "bypass"}, "warm_load": ...}, ...}):
    # whether it loaded the model from the compiler's cache, and whether it replaced a cold start
    # (arms that compare must start alike: ModelArms.warm_load), and for the packed and repeat arms
    # the kernels whose autotuned launch config differs from the baseline's ("configs_unlike_baseline",
    # the pack's own kernels aside: arm_process.configs_unlike). Empty for arms that do not say.
    arm_starts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.speedup is not None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["measured"] = self.measured
        data["rounds"] = [dict(asdict(r), speedup=r.speedup) for r in self.rounds]
        return data


# What arm_starts keeps of each arm's ready message: how it started, and what it held on the GPU
# at its start's peak and between requests (a large model's arm gives its cache back then).
ARM_START_KEYS = ("cache", "cache_keys", "start_phases_s", "setup_parts_s", "warm_load", "gpu_mb", "idle_gpu_mb")
MAX_CONFIGS_LISTED = 64  # what arm_starts lists of an arm's kernels unlike the baseline's (an arm says it)


def _max_abs_diff(a: list[Any], b: list[Any], device: str = "cpu") -> float:
    """Largest elementwise difference (inf for a NaN mismatch), in float64 on ``device`` a piece
    at a time (:func:`~kernelopt_bot.harness.memory.float64_chunks`): the arms send their outputs
    through a pipe on the CPU, where float64 over a large output takes seconds, and a whole
    output's float64 temporaries on the GPU would take the memory the arms need. Out of memory is
    ours: retried once after freeing, then raised as an
    :class:`~kernelopt_bot.verify.verdict.InfrastructureFailure`, never a difference."""
    from kernelopt_bot.errors import one_line
    from kernelopt_bot.harness.failures import InfrastructureFailure, is_out_of_memory
    from kernelopt_bot.harness.memory import free_memory, retry_note

    if len(a) != len(b):
        return float("inf")
    if any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")

    def worst() -> float:
        return max((_pair_diff(x, y, device) for x, y in zip(a, b) if x.numel()), default=0.0)

    try:
        try:
            return worst()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        free_memory(device)
        try:
            return worst()
        except Exception as exc:
            if is_out_of_memory(exc):
                raise InfrastructureFailure(f"out of memory comparing the arms' outputs "
                                            f"({retry_note(device)}): {one_line(exc)}") from exc
            raise
    finally:
        if device == "cuda":
            free_memory(device)  # the float64 temporaries' memory back to the arms


def changed_after_timing(before: float | None, after: float | None) -> bool:
    """Whether the arms' outputs differ by more on a timed input, after timing, than ten times
    their difference on the input checked before timing (``before``, ``after``: largest
    elementwise differences). A result cached or left behind by the timed runs shows here; so can
    rounding that differs from run to run (atomics, split reductions: on the H200 max-autotune's
    small CNN in bf16 matched the baseline bit for bit before timing and by one bf16 unit after),
    which the judge then tells apart with the outputs' tolerance (``agree_after_timing``)."""
    if after is None:
        return False
    was = before or 0.0
    return after > 10 * was + 1e-6 * max(1.0, was)


def _pair_diff(x: Any, y: Any, device: str = "cpu") -> float:
    import torch

    from kernelopt_bot.harness.memory import float64_chunks

    worst = 0.0
    for cx, cy in float64_chunks(x, y, device=device):
        if bool((torch.isnan(cx) != torch.isnan(cy)).any()):
            return float("inf")
        worst = max(worst, float(torch.nan_to_num((cx - cy).abs(), nan=0.0).max()))
    return worst


def bench(target: str, pack: KernelPack, *, device: str, dtype: str = "fp32", rounds: int = 10,
          reps: int = 20, mode: str | None = None, config: dict[str, Any] | None = None,
          timeout_s: float = 600.0, train: bool = False, say: Callable[[str], None] | None = None) -> BenchResult:
    """Interleaved A/B(/A') rounds of baseline and packed model; see the module docstring.

    ``mode`` and ``config`` (Inductor config settings) apply to every arm alike; ``train``: each
    timed call is a whole training step. ``say``: where each step's line goes (the arms' starts,
    a memory fallback, the output checks, each round), for a person watching a large model's
    bench, which takes minutes.
    """
    tell = say or (lambda _line: None)
    began = time.monotonic()
    # The packed arm compiles beside the baselines, not after them: on the H200 arms compiled once
    # others were ready (from the compiler's cache those filled) ran tiny_vit bf16 5% faster than
    # the arms compiled together before them, in every round (scripts/process_offsets.py, results
    # h200-2026-12-05b), and a packed arm compiled after its baselines measured an empty pack at 1.095x.
    # Each arm that compiled cold is then replaced by a cache load (ModelArms.warm_load, on a GPU).
    # Nothing says how much memory an arm takes before one is ready, so all three start; where the
    # device does not hold three (a 30 GB model on an 80 GB GPU), the arm that ran out of memory is
    # the repeat baseline's place: one baseline is timed twice per round (ModelArms.one_baseline_only).
    with ModelArms(target, device, dtype, timeout_s=timeout_s, mode=mode, config=config, train=train,
                   warm_load=device == "cuda") as model_arms:  # closes every arm it started
        packed = model_arms.candidate(pack, label="packed", wait=False)
        model_arms.prestart()  # the baselines, beside it where the GPU holds them
        model_arms.settle()  # every first start in, then every replacement, side by side
        base, repeat = model_arms.baselines()
        try:
            packed.wait_ready()
        except ArmError as exc:
            if not is_out_of_memory(str(exc)):
                raise
            # It ran short compiling beside the baselines: it starts once more, now that they are
            # idle (a large model's arm gives its cache back then), and in the repeat's memory
            # too where the baseline's figure says the device does not hold three.
            packed.close()
            if repeat is not None and model_arms.holds(3) is not True:
                model_arms.one_baseline_only()
                repeat = None
            tell(f"the packed arm ran out of GPU memory beside the baselines: it starts again"
                 f"{'' if repeat is not None else ', with one baseline timed twice a round'}")
            packed = model_arms.candidate(pack, label="packed")
        for label, arm in (("baseline", base), ("packed", packed), ("baseline-repeat", repeat)):
            if arm is not None:
                tell(f"{label} arm ready: {describe_start(arm.info)}")
        tell(f"arms ready after {time.monotonic() - began:.0f} s")
        if repeat is not None and model_arms.holds(3) is False:
            # All three started, each before any had said what it holds; each holds its start's
            # peak, and three do not fit the device for the rounds (the 30 GB RMS norm on the H100:
            # the third arm ran out of memory in the first round, 12-06).
            model_arms.one_baseline_only()
            repeat = None
            tell("three arms of this model do not fit the GPU's memory for the rounds: one baseline, timed twice a round")

        def measure(repeat: ArmProcess | None) -> BenchResult:
            return compare_arms(base, packed, repeat, target=target, device=device, dtype=dtype,
                                rounds=rounds, reps=reps, timeout_s=timeout_s, split_step=train, say=say)

        try:
            return measure(repeat)
        except ArmRaised as exc:  # the repeat out of memory while timed: the device's size, not a verdict
            # An arm whose request raised has ended (arm_process.worker_main): only the repeat's
            # end leaves the two arms the comparison needs.
            if not (is_out_of_memory(exc.reason) and repeat is not None and exc.label == BASELINE_LABELS[1]):
                raise
        model_arms.one_baseline_only()
        tell("the repeat baseline ran out of GPU memory while timed: measured again with one baseline, timed twice a round")
        return measure(None)


def describe_start(info: dict[str, Any]) -> str:
    """An arm's start in words, from its ready message: seconds, and the GPU memory at its start's
    peak and between requests."""
    parts = []
    compiled = compile_seconds(info)
    if compiled is not None:
        parts.append(f"{compiled:.0f} s")
    peak, idle = info.get("gpu_mb"), info.get("idle_gpu_mb")
    if isinstance(peak, (int, float)):
        parts.append(f"{peak / 1024:.1f} GiB at its peak" + (f", {idle / 1024:.1f} GiB between requests"
                                                              if isinstance(idle, (int, float)) else ""))
    return ", ".join(parts) or "no figures"


def bench_patch(original: str, patched: str, *, device: str, dtype: str = "fp32", rounds: int = 10,
                reps: int = 20, timeout_s: float = 600.0) -> BenchResult:
    """A kernel target as it is against a patched copy of it (``patched``: the same file in a
    folder where the patch was applied), each in its own process, as :func:`compare_arms` times
    any two arms: interleaved rounds, fresh inputs, L2 flushed, the median of the passes' paired
    ratios, the original against itself for the noise floor."""
    arms = [ArmProcess(ArmSpec(label, path, device, dtype))
            for label, path in (("baseline", original), ("packed", patched), ("baseline-repeat", original))]
    try:
        for arm in arms:  # one at a time: nothing else runs while an arm starts
            arm.wait_ready()
        return compare_arms(arms[0], arms[1], arms[2], target=original, device=device, dtype=dtype,
                            rounds=rounds, reps=reps, timeout_s=timeout_s)
    finally:
        for arm in arms:
            arm.close()


def compare_arms(base: Arm, packed: Arm, repeat: Arm | None, *, target: str,
                 device: str, dtype: str, rounds: int = 10, reps: int = 20,
                 timeout_s: float = 600.0, split_step: bool = False, end_by: float | None = None,
                 outputs_agree: Callable[[list[Any], list[Any]], bool] | None = None,
                 say: Callable[[str], None] | None = None) -> BenchResult:
    """The measurement itself, on arms that are already compiled (see :class:`~.harness.model_arms.ModelArms`).
    ``outputs_agree(packed, baseline)``: asked of the outputs on the last timed input where they
    differ more than before timing (:func:`changed_after_timing`), its answer kept in
    ``agree_after_timing`` for the judge (gate 4 passes the model gate's tolerance, per output).
    ``split_step``: the arms run training steps; each round also times the baseline's and the packed
    model's forward half alone, so the step's speedup splits into forward and backward. ``end_by``
    (``time.monotonic()``; None: no deadline): once MIN_ROUNDS are done, no round starts that
    would end past it (as long as the last round took),
    and the result has the rounds it timed (``rounds_planned`` says how many were asked for): a
    model whose calls take far longer in one arm than planned (on the H200 a training step's CUDA
    graphs option took 36 s to check and time where 10 were planned, 12-04) cannot carry the run
    past its wall budget. ``say``: a line for each step (the output checks, each round)."""
    tell = say or (lambda _line: None)
    diff, _, _ = _compare_outputs(base, packed, SEED_BASE - 1, device, timeout_s, tell, "before timing")
    result = BenchResult(target, device, dtype, None, None, None, None,
                         applied=list(packed.info.get("applied", [])),
                         skipped=list(packed.info.get("skipped", [])),
                         max_abs_diff=diff)
    for label, arm in (("baseline", base), ("packed", packed), ("baseline-repeat", repeat)):
        start = {k: arm.info[k] for k in ARM_START_KEYS if arm is not None and k in arm.info}
        unlike = configs_unlike(arm.info, base.info) if label != "baseline" and arm is not None else None
        if unlike is not None:  # the kernels whose autotuned config differs from the baseline's (a pack's own aside)
            unlike = [n for n in unlike if label != "packed" or n not in result.applied]
            start["configs_unlike_baseline"] = unlike[:MAX_CONFIGS_LISTED]
            start["configs_unlike_count"] = len(unlike)  # the list is cut; the count is not
        if start:
            result.arm_starts[label] = start
    if device != "cuda":
        result.reason = "not measured: no CUDA device (interpreter mode)"
        return result
    # Three arms a round: the baseline, the packed model and the baseline again (in its own
    # process, or for a large model the same one). A round is PASSES_PER_ROUND passes over the arms
    # in a mirrored order (A B C, C B A, ...): a slow drift of the device (clocks, temperature) then
    # falls on every arm alike instead of on whichever arm a round happened to time last.
    turns = [(base, "baseline"), (packed, "packed"), (repeat or base, "baseline-repeat")]
    if repeat is None:
        result.noise_from = ("the one baseline process, timed twice a round (a large model): an offset between "
                             "processes is not in this floor")
    # The asking thread runs where process arms time (harness.cpu_pin). Not where an arm runs in
    # this process: its work would run there too, and a thread pool it first starts would keep
    # that one core for good.
    in_processes = all(getattr(a, "where", "process") == "process" for a in (base, packed, repeat) if a is not None)
    with this_thread_on(timing_core() if in_processes else None), arms_timing():
        _time_rounds(result, base, packed, repeat, turns, rounds=rounds, reps=reps, timeout_s=timeout_s,
                     split_step=split_step, end_by=end_by, tell=tell)
    # Re-check on inputs that were timed: a result cached or left behind by timing shows here.
    last = SEED_BASE + len(result.rounds) - 1
    result.max_abs_diff_after_timing, base_after, packed_after = _compare_outputs(
        base, packed, last, device, timeout_s, tell, "after timing")
    if outputs_agree is not None and changed_after_timing(diff, result.max_abs_diff_after_timing):
        result.agree_after_timing = outputs_agree(packed_after, base_after)
    _summarize(result)
    return result


def _compare_outputs(base: Arm, packed: Arm, seed: int, device: str, timeout_s: float, tell: Callable[[str], None],
                     when: str) -> tuple[float, list[Any], list[Any]]:
    """The largest difference between the two arms' outputs on input ``seed``, and both outputs;
    says how long each arm's answer and the comparison took (a 30 GB model's took 79 s in all on
    the H100, 12-06: the split says which part to make faster)."""
    began = time.monotonic()
    ours = base.request("outputs", seed, timeout_s=timeout_s)
    answered = time.monotonic()
    theirs = packed.request("outputs", seed, timeout_s=timeout_s)
    both = time.monotonic()
    diff = _max_abs_diff(ours, theirs, device)
    done = time.monotonic()
    size = sum(t.numel() * t.element_size() for t in [*ours, *theirs]) / 2**30
    tell(f"outputs compared {when} ({done - began:.0f} s: {size:.1f} GiB; the baseline's answer {answered - began:.1f} s, "
         f"the packed arm's {both - answered:.1f} s, the comparison {done - both:.1f} s)")
    return diff, ours, theirs


def _time_rounds(result: BenchResult, base: Arm, packed: Arm, repeat: Arm | None, turns: list[tuple[Arm, str]],
                 *, rounds: int, reps: int, timeout_s: float, split_step: bool, end_by: float | None,
                 tell: Callable[[str], None]) -> None:
    """:func:`compare_arms`'s warm-up and rounds, appended to ``result.rounds``."""
    result.warmup_passes, call_ms = _warm_up([base, packed, repeat], _pass_reps(reps), timeout_s)
    pass_reps = result.pass_reps = _pass_reps(reps, call_ms)
    result.rounds_planned = rounds
    round_s = 0.0  # the last round's seconds: the next is expected to take as long
    for r in range(rounds):
        began = time.monotonic()
        if end_by is not None and r >= min(rounds, MIN_ROUNDS) and began + round_s > end_by:
            break
        seed = SEED_BASE + r
        replies: dict[str, list[tuple[float | None, float | None]]] = {label: [] for _, label in turns}
        halves: dict[tuple[str, str], list[float | None]] = {
            (label, part): [] for label in ("baseline", "packed") for part in ("forward", "step")}
        for order in pass_orders(turns, r):
            for w, label in order:
                replies[label].append(w.request("time", seed, pass_reps, timeout_s=timeout_s) or (None, None))
            if split_step:  # the device's time alone (host hidden) of the forward half and the whole step
                for w, label in [t for t in order if t[1] in ("baseline", "packed")]:
                    for part in ("forward", "step"):
                        reply = w.request("time", seed, pass_reps, part, True, timeout_s=timeout_s)
                        halves[(label, part)].append(reply[0] if reply else None)
        times = {label: (_median_of(g for g, _ in got), _median_of(h for _, h in got)) for label, got in replies.items()}
        passes = {label: [g for g, _ in got] for label, got in replies.items()}
        host_passes = {label: [h for _, h in got] for label, got in replies.items()}
        result.rounds.append(RoundResult(
            seed, times["baseline"][0], times["packed"][0], times["baseline-repeat"][0],
            times["baseline"][1], times["packed"][1], times["baseline-repeat"][1],
            baseline_passes_ms=passes["baseline"], packed_passes_ms=passes["packed"],
            baseline_repeat_passes_ms=passes["baseline-repeat"],
            baseline_host_passes_ms=host_passes["baseline"], packed_host_passes_ms=host_passes["packed"],
            baseline_repeat_host_passes_ms=host_passes["baseline-repeat"],
            baseline_forward_ms=_median_of(halves[("baseline", "forward")]),
            packed_forward_ms=_median_of(halves[("packed", "forward")]),
            baseline_step_device_ms=_median_of(halves[("baseline", "step")]),
            packed_step_device_ms=_median_of(halves[("packed", "step")]),
            baseline_forward_passes_ms=halves[("baseline", "forward")],
            packed_forward_passes_ms=halves[("packed", "forward")],
            baseline_step_passes_ms=halves[("baseline", "step")],
            packed_step_passes_ms=halves[("packed", "step")]))
        round_s = time.monotonic() - began
        tell(f"round {r + 1} of {rounds} ({round_s:.1f} s)")


def compare_seconds(model_ms: float, rounds: int, reps: int, split_step: bool = False) -> float:
    """Seconds :func:`compare_arms` is expected to take on a model of ``model_ms`` a call, to plan
    by: each of the three arms is timed PASSES_PER_ROUND times a round, a pass making its timed
    calls, their warm-up (``time_model``'s two) and as many host-latency calls again, and the
    warm-up passes take up to WARMUP_MAX_S. On a GEMM-bound fp32 model of 20 ms a call that is
    about 30 s; planned with a fixed allowance of 10 s instead, one such measurement ran the whole
    run past its wall budget (the H200, 12-03)."""
    # split_step: the baseline and packed arms' forward half and whole step, timed again each
    # pass (counted as whole calls: a forward half is shorter, so this errs long)
    requests = rounds * PASSES_PER_ROUND * (3 + (4 if split_step else 0))
    calls = requests * time_request_calls(_pass_reps(reps, model_ms))
    return WARMUP_MAX_S + requests * REQUEST_OVERHEAD_S + calls * max(0.0, model_ms) / 1000.0


def rounds_within(model_ms: float | None, rounds: int, reps: int = 20, seconds: float = COMPARE_WITHIN_S,
                  split_step: bool = False) -> int:
    """The rounds a comparison on a model of ``model_ms`` a call takes: ``rounds`` where those
    fit in ``seconds`` (:func:`compare_seconds`), else as many as fit, at least MIN_ROUNDS (or
    ``rounds`` where that is fewer). Each round is the median of its passes, each pass several
    calls: on a model of tens of milliseconds a call, three rounds time more GPU work than ten
    rounds of a 1 ms model do. ``split_step``: a training step's comparison, which also times
    each step's halves. None or 0 (not profiled): ``rounds``."""
    if not model_ms or model_ms <= 0:
        return rounds
    fitted = rounds
    while fitted > MIN_ROUNDS and compare_seconds(model_ms, fitted, reps, split_step) > seconds:
        fitted -= 1
    return fitted


def _pass_reps(reps: int, call_ms: float | None = None) -> int:
    """The calls of one pass: a round's ``reps`` split over its PASSES_PER_ROUND passes, and on a
    model of ``call_ms`` a call (None: not known) as many as make MIN_PASS_MS, up to MAX_PASS_REPS."""
    split = max(MIN_PASS_REPS, -(-reps // PASSES_PER_ROUND))
    if not call_ms or not math.isfinite(call_ms) or call_ms <= 0:
        return split
    return max(split, min(MAX_PASS_REPS, math.ceil(MIN_PASS_MS / call_ms)))


def _warm_up(arms: list[Arm | None], pass_reps: int, timeout_s: float) -> tuple[int, float | None]:
    """Time every arm in turn, a pass each, until each arm's pass is within STEADY_WITHIN of its
    previous one (at most WARMUP_MAX_S), on the inputs of no round. Returns the passes it took and
    the first arm's last time a call (None without times: no CUDA, where one pass still warms the
    arms up)."""
    unique = {id(a): a for a in arms if a is not None}
    first = next(iter(unique), None)
    last: dict[int, float] = {}
    started, passes = time.monotonic(), 0
    while True:
        now: dict[int, float] = {}
        for key, arm in unique.items():
            reply = arm.request("time", SEED_BASE - 1, pass_reps, timeout_s=timeout_s)
            if reply and reply[0]:
                now[key] = float(reply[0])
        passes += 1
        steady = all(key in last and abs(ms / last[key] - 1.0) <= STEADY_WITHIN for key, ms in now.items())
        if not now or steady or time.monotonic() - started > WARMUP_MAX_S:
            return passes, now.get(first) if first is not None else None
        last = now


def pass_orders(turns: list[Any], round_index: int) -> list[list[Any]]:
    """The arms' order in each pass of one round: the round's rotation of ``turns``, then that
    order mirrored, alternately (an ABBA design: under a linear drift every arm's pass times have
    the same median, and the passes' paired ratios lean as far one way as the other, so their
    median is off only to second order). Rounds start at a different arm so no arm is always
    first after a pause."""
    k = round_index % len(turns)
    first = turns[k:] + turns[:k]
    return [first if p % 2 == 0 else first[::-1] for p in range(PASSES_PER_ROUND)]


def _median_of(values: Any) -> float | None:
    """The median of a round's pass times, or None if any pass measured nothing (the CPU)."""
    got = list(values)
    if not got or any(v is None for v in got):
        return None
    return statistics.median(got)


def _summarize(result: BenchResult) -> None:
    """The result's times (each arm's median over rounds), its speedup (the median of every pass's
    baseline / packed ratio: :func:`pass_ratios`, :func:`~kernelopt_bot.stats.ratio_median`) and
    noise floors (:func:`kernelopt_bot.stats.noise_floor` of the baseline / repeat ratios), of
    the GPU time and of the host latency apart."""
    base = [r.baseline_ms for r in result.rounds if r.baseline_ms is not None]
    packed = [r.packed_ms for r in result.rounds if r.packed_ms is not None]
    speedup = ratio_median([x for r in result.rounds for x in r.speedups()])
    if not base or not packed or speedup is None:
        result.reason = "no rounds measured"
        return
    result.baseline_ms = statistics.median(base)
    result.packed_ms = statistics.median(packed)
    result.step_split_ms = _step_split(result.rounds)
    result.speedup = speedup
    result.noise_floor = noise_floor([r.repeat_ratios() for r in result.rounds])
    host = [(r.baseline_host_ms, r.packed_host_ms, r.baseline_repeat_host_ms) for r in result.rounds]
    if host and all(all(t for t in row) for row in host):
        result.baseline_host_ms = statistics.median(row[0] for row in host)  # type: ignore[type-var]
        result.packed_host_ms = statistics.median(row[1] for row in host)  # type: ignore[type-var]
        result.host_speedup = ratio_median([x for r in result.rounds for x in r.speedups(host=True)])
        result.host_noise_floor = noise_floor([r.repeat_ratios(host=True) for r in result.rounds])


def _step_split(rounds: list[RoundResult]) -> dict[str, dict[str, float | None]]:
    """Forward and backward of a training step, baseline and optimized, in device time (the host
    hidden: see :func:`~kernelopt_bot.harness.timing.time_request`): medians over the rounds that
    timed both halves (the backward of a round is its step less its forward), and each half's
    ``speedup`` as the step's own is taken: the median of the passes' paired ratios (a host that
    changes speed from pass to pass weighs on both sides of a ratio alike, not on one arm's median)."""
    timed = [r for r in rounds if r.baseline_forward_ms and r.packed_forward_ms
             and r.baseline_step_device_ms and r.packed_step_device_ms]
    if not timed:
        return {}
    return {
        "forward": {"baseline": statistics.median(r.baseline_forward_ms for r in timed),  # type: ignore[misc]
                    "optimized": statistics.median(r.packed_forward_ms for r in timed),  # type: ignore[misc]
                    "speedup": ratio_median([x for r in timed for x in r.step_half_ratios("forward")])},
        "backward": {"baseline": statistics.median(r.baseline_step_device_ms - r.baseline_forward_ms  # type: ignore[operator]
                                                   for r in timed),
                     "optimized": statistics.median(r.packed_step_device_ms - r.packed_forward_ms  # type: ignore[operator]
                                                    for r in timed),
                     "speedup": ratio_median([x for r in timed for x in r.step_half_ratios("backward")])},
    }
