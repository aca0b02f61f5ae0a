"""The final end-to-end benchmark: the number a run reports, for the pack it delivers.

The pack is installed in a fresh arm (``install(pack)`` then a fresh ``torch.compile``), checked
against the baseline (gate 3) and timed interleaved with the two baseline arms
(:func:`~kernelopt_bot.harness.bench.compare_arms`). Where gate 4 already measured exactly this
pack in fresh processes in this run, its numbers are taken instead (:func:`measured_in_this_run`);
where the combined pack misbehaves, its best single entry is kept, and an entry this measurement
finds short of gate 4's gamma is dropped (the compiler's kernel stays). A failure of ours (a dead
arm, out of memory) is never a verdict on the pack.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Callable, Iterator
from typing import Any

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.pack.format import KernelPack
from kernelopt_bot.result import RunResult
from kernelopt_bot.schedule import arms_end_by

BASELINE_REPS = 20  # calls a round of an empty pack's final benchmark times the baseline for


def final_need_s(pack: KernelPack, result: RunResult, final_arm: Any, model_ms: float | None,
                 rounds: int, reserve: float, train: bool = False) -> float:
    """Seconds the final benchmark still needs, as things stand: its ``reserve`` is kept for a
    fresh compile of the packed model and its rounds, but where the pack is empty (the baseline
    alone is timed), where gate 4 already measured exactly this pack, or where the pack's arm
    compiled beside the options and is ready, only the rounds are left to run, and the rest may
    time a compiled option; rounds longer than the reserve (a slow model, a training step's split
    rounds) need their whole time. On the H200 a scan's options compiled with 7 s of the search's
    time left and were not timed, while 14 s of the reserve went unused (log_cumsum_exp bf16,
    12-03). All of it without a profiled model time to size the rounds by. ``train``: the model is
    a training step, whose rounds also time each arm's forward half and whole step."""
    from kernelopt_bot.compile_options import bench_need_s

    if not model_ms:
        return reserve
    if not len(pack):
        return empty_pack_need_s(model_ms, rounds, reserve, train)
    if measured_in_this_run(pack, result) is not None:
        return 0.0
    rounds_s = bench_need_s(model_ms, rounds, split_step=train)
    if final_arm is not None and getattr(final_arm, "ready", False):
        return rounds_s
    return max(reserve, rounds_s)


def empty_pack_need_s(model_ms: float | None, rounds: int, reserve: float, train: bool = False) -> float:
    """Seconds the final benchmark needs for an empty pack: the baseline's rounds alone, as
    nothing compiles (its whole ``reserve`` without a profiled model time); a training step's
    rounds are timed three times (the step, then its forward half and whole step apart): on the
    H200 a 90 ms MLP training step's took 28 s of a 20 s reserve (12-04)."""
    from kernelopt_bot.harness.timing import time_request_calls

    if not model_ms:
        return reserve
    passes = 3 if train else 1
    return 1.0 + passes * rounds * time_request_calls(BASELINE_REPS) * model_ms / 1000.0


@contextlib.contextmanager
def final_pack_arm(model_arms: Any, tgt: Any, pack: KernelPack, result: RunResult, budget: Any,
                   reserve: float) -> Iterator[Any]:
    """The final benchmark's arm (``install(pack)`` then a fresh compile), started now without
    waiting, or None where the final benchmark needs none (no GPU, an empty pack, or gate 4's
    fresh-process numbers for exactly this pack) or where the GPU would not hold it beside a
    compiler option's arm (it starts when the benchmark runs); closed on leaving."""
    from kernelopt_bot.harness.arm_process import ArmError

    arm = None
    if (tgt.device == "cuda" and len(pack) and measured_in_this_run(pack, result) is None
            and baselines_started(model_arms) and model_arms.room_for(2) == 2):  # itself and an option's arm
        left = budget.wall_s_left()
        with arms_end_by(model_arms, None if left is None else left + reserve), contextlib.suppress(ArmError):
            arm = model_arms.candidate(pack, label="final", wait=False)
    try:
        yield arm
    finally:
        if arm is not None:
            arm.close()


def baselines_started(model_arms: Any) -> bool:
    """Start the baseline arms (if not yet) and wait for them: the arms that come after them are
    sized by what they hold. False when they did not start (reported where they are asked for)."""
    from kernelopt_bot.harness.arm_process import ArmError

    try:
        model_arms.baselines()
    except ArmError:
        return False
    return True


def benchmark_pack(cascade: Any, tgt: Any, pack: KernelPack, result: RunResult, rounds: int,
                   started: Any = None, gamma: float = DEFAULT_GAMMA,
                   withdraw: Callable[[list[str]], None] | None = None) -> KernelPack:
    """Measure the combined pack end to end; if the combination misbehaves, keep the best single
    entry. An arm of ours that fails (its compile outlived the wall budget, say) is no verdict on
    the pack: the combination, never checked together, is cut to its best entry, which every gate
    passed on its own, and gate 4's numbers stand where this run has them. ``started``: this
    pack's arm, already compiling (see :func:`final_pack_arm`).

    This measurement is the trusted one (fresh processes, ``install(pack)`` then a fresh
    compile), so gate 4's threshold holds on it too: a pack it finds short of ``gamma`` is cut to
    its best entry, and a single entry short of it is dropped (:func:`drop_short_entry`), its
    kernel key handed to ``withdraw`` (the verified-kernel cache forgets it: measured on its own
    and found wanting, unlike an entry cut from a combination). On an H100 a tuner candidate that
    gate 4 had timed at 1.047x on the engine's model (a 55 us instance norm) measured 0.985x here,
    and was shipped before this rule."""
    from kernelopt_bot.harness.arm_process import ArmError, unlike_where_asked
    from kernelopt_bot.harness.bench import compare_arms
    from kernelopt_bot.harness.failures import InfrastructureFailure, is_out_of_memory
    from kernelopt_bot.verify.model import check_model

    model_arms = cascade.model_arms
    if len(pack) == 0 and tgt.device != "cuda":  # nothing replaced and nothing to time: no arm to start
        return pack
    try:
        baseline, repeat = model_arms.baselines()
    except ArmError as exc:
        # The model compiled and ran in the capture: a baseline arm that does not start (out of
        # memory, or past the deadline this run's budget gave it) is ours, not the pack's.
        why = "out of GPU memory starting the baseline arms" if is_out_of_memory(str(exc)) else \
            "the baseline arms did not start"
        note_not_benchmarked(pack, result, f"{why}: {exc}")
        return pack
    if len(pack) == 0:
        if tgt.device == "cuda":
            times = [baseline.request("time", 2000 + i, BASELINE_REPS) for i in range(rounds)]
            result.baseline_ms = result.optimized_ms = statistics.median(t[0] for t in times)
            if all(t[1] is not None for t in times):
                host = statistics.median(t[1] for t in times)
                result.latency_ms = {"baseline": host, "optimized": host, "speedup": 1.0, "noise_floor": None}
            result.speedup = 1.0  # nothing replaced: the compiler's code runs
            if tgt.train:  # where a training step's time goes, even with nothing to change in it (device time)
                forward, step = (statistics.median(baseline.request("time", 2000 + i, BASELINE_REPS, part, True)[0]
                                                   for i in range(rounds)) for part in ("forward", "step"))
                halves = {"forward": forward, "backward": step - forward}
                result.step_split_ms = {half: {"baseline": ms, "optimized": ms} for half, ms in halves.items()}
        return pack
    if take_gate4_numbers(pack, result):
        return pack
    try:
        with started or model_arms.candidate(pack, label="final", wait=False) as arm:
            model_arms.settle()  # nothing is timed while an arm compiles (its own replacement loads beside no compile)
            arm.wait_ready()
            model = check_model(tgt, baseline, arm, None)
            if not model.passed and len(pack) > 1:
                pack = keep_best(pack, result, f"combined pack failed gate 3: {model.reason}")
                return benchmark_pack(cascade, tgt, pack, result, rounds)
            if not model.passed:
                raise RuntimeError(f"the verified pack failed gate 3 when re-checked: {model.reason}")
            bench = compare_arms(baseline, arm, repeat, target=tgt.spec, device=tgt.device,
                                 dtype=result.dtype, rounds=rounds, split_step=tgt.train)
    except (ArmError, InfrastructureFailure) as exc:  # ours (a dead arm, out of memory): no verdict
        if len(pack) > 1:
            pack = keep_best(pack, result, f"the combined pack could not be checked end to end ({exc})")
        note_not_benchmarked(pack, result, str(exc))
        return pack
    short = short_of_gamma(bench.speedup, bench.noise_floor, gamma)
    if short is not None and len(pack) > 1:
        pack = keep_best(pack, result, f"the combined pack {short}")
        return benchmark_pack(cascade, tgt, pack, result, rounds, gamma=gamma, withdraw=withdraw)
    if short is not None:
        if withdraw is not None:
            withdraw(list(pack.entries))
        return drop_short_entry(pack, result, bench, short)
    result.baseline_ms, result.optimized_ms = bench.baseline_ms, bench.packed_ms
    result.speedup, result.noise_floor = bench.speedup, bench.noise_floor
    result.started_unlike = unlike_where_asked(arm, baseline)
    result.step_split_ms = bench.step_split_ms
    result.latency_ms = {"baseline": bench.baseline_host_ms, "optimized": bench.packed_host_ms,
                         "speedup": bench.host_speedup, "noise_floor": bench.host_noise_floor}
    pack.measured = {"baseline_ms": bench.baseline_ms, "packed_ms": bench.packed_ms,
                     "speedup": bench.speedup, "noise_floor": bench.noise_floor}
    if len(pack) == 1 and bench.speedup is not None:
        report_fresh_kernel_speedup(pack, result, bench.speedup)
    return pack


def short_of_gamma(speedup: float | None, noise_floor: float | None, gamma: float) -> str | None:
    """Why a fresh end-to-end measurement does not hold a pack up (gate 4's threshold and noise
    rule), or None where it does or where nothing was timed (the CPU interpreter: no verdict)."""
    if speedup is None:
        return None
    noise = f" (noise floor {noise_floor:.2%})" if noise_floor is not None else ""
    if speedup < gamma:
        return f"measured {speedup:.3f}x end to end on fresh processes{noise}, below gamma {gamma:g}"
    if noise_floor is not None and speedup - 1.0 <= noise_floor:
        return f"measured {speedup:.3f}x end to end on fresh processes, within the noise floor {noise_floor:.2%}"
    return None


def drop_short_entry(pack: KernelPack, result: RunResult, bench: Any, why: str) -> KernelPack:
    """The compiler's kernel stays: the one entry left is taken out of the pack, its kernel's row
    says so (``dropped``, with ``why``), and the run reports the baseline as measured (1.0x)."""
    for outcome in result.kernels:
        if outcome.status == "accepted" and any(outcome.name == e.kernel_name for e in pack.entries.values()):
            outcome.status, outcome.speedup = "dropped", bench.speedup
            outcome.detail = "; ".join(filter(None, [outcome.detail, f"{why}: the compiler's kernel stays"]))
    result.baseline_ms = result.optimized_ms = bench.baseline_ms
    result.speedup, result.noise_floor = 1.0, bench.noise_floor
    host = bench.baseline_host_ms
    result.latency_ms = {"baseline": host, "optimized": host, "speedup": 1.0, "noise_floor": bench.host_noise_floor}
    result.step_split_ms = {}
    return KernelPack(entries={}, target=pack.target, created_by=pack.created_by)


def note_not_benchmarked(pack: KernelPack, result: RunResult, why: str) -> None:
    """The end-to-end benchmark did not run for a reason of ours: gate 4's numbers stand where
    this run has them for exactly this pack, and each packed kernel's line says why."""
    if take_gate4_numbers(pack, result):
        return
    for outcome in result.kernels:
        if any(outcome.name == e.kernel_name for e in pack.entries.values()):
            outcome.detail = "; ".join(filter(None, [outcome.detail, f"end-to-end benchmark not run ({why})"]))


def report_fresh_kernel_speedup(pack: KernelPack, result: RunResult, speedup: float) -> None:
    """A one-entry pack's fresh measurement is its kernel's reported speedup too (the kernel table,
    the entry): gate 4's own number (perhaps measured in the engine) stays in the entry's gates."""
    key, entry = next(iter(pack.entries.items()))
    pack.entries[key] = dataclasses.replace(entry, measured={**entry.measured, "speedup": speedup})
    for outcome in result.kernels:
        if outcome.name == entry.kernel_name and outcome.status == "accepted":
            outcome.speedup = speedup


def keep_best(pack: KernelPack, result: RunResult, why: str) -> KernelPack:
    """The pack cut to its entry with the best measured speedup; the other accepted kernels are
    marked dropped, with ``why``."""
    best = max(pack.entries.values(), key=lambda e: e.measured.get("speedup") or 0.0)
    for outcome in result.kernels:
        if outcome.status == "accepted" and outcome.name != best.kernel_name:
            outcome.status, outcome.detail = "dropped", why
    return KernelPack(entries={best.key: best}, target=pack.target, created_by=pack.created_by)


def take_gate4_numbers(pack: KernelPack, result: RunResult) -> bool:
    """Use gate 4's end-to-end numbers from this run where they measure exactly this pack."""
    gate4 = measured_in_this_run(pack, result)
    if gate4 is None:
        return False
    result.baseline_ms, result.optimized_ms = gate4["baseline_ms"], gate4["packed_ms"]
    result.speedup, result.noise_floor = gate4["speedup"], gate4.get("noise_floor")
    result.latency_ms = {"baseline": gate4.get("baseline_host_ms"), "optimized": gate4.get("packed_host_ms"),
                         "speedup": gate4.get("host_speedup"), "noise_floor": gate4.get("host_noise_floor")}
    result.step_split_ms = dict(gate4.get("step_split_ms") or {})
    result.started_unlike = gate4.get("started_unlike") if isinstance(gate4.get("started_unlike"), str) else None
    pack.measured = {k: gate4.get(k) for k in ("baseline_ms", "packed_ms", "speedup", "noise_floor")}
    return True


def measured_in_this_run(pack: KernelPack, result: RunResult) -> dict[str, Any] | None:
    """Gate 4's numbers when the pack is exactly one candidate the gates accepted in this run.

    That measurement already is the end-to-end benchmark of this very pack: the same baseline
    arms, interleaved rounds, L2 flushed, median, noise floor, minutes ago. Compiling the packed
    model again to repeat it would only cost time. A pack of several entries (their combination
    was never measured), a cached entry (measured in an earlier run), or the best of several
    accepted candidates (the largest of several noisy measurements is biased upwards) is
    benchmarked anew, and so is a candidate whose gate 4 ran in the engine (a trusted candidate
    swapped into the engine's compiled model): the reported number is always measured on fresh
    processes, ``install(pack)`` then a fresh compile.
    """
    if len(pack) != 1:
        return None
    entry = next(iter(pack.entries.values()))
    if entry.measured.get("accepted_candidates") != 1:
        return None
    if not any(k.name == entry.kernel_name and k.status == "accepted" for k in result.kernels):
        return None
    perf = next((g for g in entry.measured.get("gates", []) if g.get("name") == "performance"), None)
    numbers = (perf or {}).get("numbers") or {}
    if not (perf or {}).get("passed") or numbers.get("arms") != "process":
        return None
    if not all(isinstance(numbers.get(k), (int, float)) for k in ("baseline_ms", "packed_ms", "speedup")):
        return None
    return numbers
