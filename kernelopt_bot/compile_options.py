"""Whole-model candidates: the compiler's own options, measured end to end.

Coordinate-descent tuning, max-autotune without CUDA graphs, and CUDA graphs can each win big or
lose big depending on the model (FINDINGS.md section 6); only an end-to-end measurement tells. Each
option gets its own arm in the model_arms, goes through gate 3 (same outputs) and gate 4's rules, and
comes back as a recommendation, verified or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kernelopt_bot.capture.settings import CompileSettings
from kernelopt_bot.harness.arm_process import (
    Arm,
    ArmError,
    ArmOursFailed,
    ArmTimeout,
    compile_seconds,
    unlike_where_asked,
)
from kernelopt_bot.harness.bench import compare_arms, compare_seconds
from kernelopt_bot.harness.failures import InfrastructureFailure, is_out_of_memory
from kernelopt_bot.harness.model_arms import ModelArms
from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackError
from kernelopt_bot.result import (
    ALREADY,
    COMPILED_UNTIMED,
    NO_ROOM,
    PASSED_OVER,
    RAN_OUT,
    WITH_PACK,
    Recommendation,
)
from kernelopt_bot.targets import Target
from kernelopt_bot.verify.model import check_model
from kernelopt_bot.verify.perf import agree_after_timing, judge


@dataclass(frozen=True)
class CompileOption:
    label: str
    mode: str | None = None
    config: dict[str, Any] | None = None
    pack: KernelPack | None = None  # installed in the option's arm too (measure_with_pack)
    # Its compile against the estimate every option starts from (schedule.OPTION_COMPILE_FACTOR
    # times the capture's): coordinate descent benchmarks each kernel's neighbouring configs as
    # it compiles, and on the H200 took a median 1.44x that estimate over seven runs (12-05).
    compile_scale: float = 1.0

    def is_part_of(self, settings: CompileSettings) -> bool:
        """Whether a model compiled with ``settings`` already runs with this option: its baseline
        then is the option, which is not measured against itself."""
        return settings.with_option(self.mode, self.config) == settings


# max-autotune first: it is also the reference the suite compares against.
COMPILE_OPTIONS = (
    CompileOption("mode=max-autotune-no-cudagraphs", mode="max-autotune-no-cudagraphs"),
    CompileOption("coordinate_descent_tuning=True", config={"coordinate_descent_tuning": True}, compile_scale=1.45),
    CompileOption("mode=reduce-overhead (CUDA graphs)", mode="reduce-overhead"),
)
CUDA_GRAPHS = next(o.label for o in COMPILE_OPTIONS if o.mode == "reduce-overhead")


def led_by(lead: str | None, options: tuple[CompileOption, ...] = COMPILE_OPTIONS) -> tuple[CompileOption, ...]:
    """``options`` with the one labelled ``lead`` first (None or unknown: as they are), the order
    they are planned into waves and timed in: the option the profile says can win is the one to
    measure where time runs short."""
    return tuple(sorted(options, key=lambda o: o.label != lead))


def in_report_order(recommendations: list[Recommendation]) -> list[Recommendation]:
    """``recommendations`` in :data:`COMPILE_OPTIONS`' order (others after, as they were)."""
    rank = {o.label: i for i, o in enumerate(COMPILE_OPTIONS)}
    return sorted(recommendations, key=lambda r: rank.get(r.option, len(rank)))


# What max-autotune's tuning of GEMM and convolution templates adds to a compile where the model
# calls such a library kernel, by dtype (precompiling and benchmarking Inductor's template choices;
# later calls' shapes add little: they precompile beside the first's). On the H200: fp32 13-27 s
# (one convolution 22-25 s, four GEMMs 27 s, eight 22 s), bf16 2-7 s (12-04).
TEMPLATE_TUNE_S = {"fp32": 25.0}
TEMPLATE_TUNE_DEFAULT_S = 8.0
TEMPLATE_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "convolution", "_int_mm", "_scaled_mm"})
MIN_OPTION_S = 30.0  # an option needs a whole compile and a benchmark: do not start one with less left
MIN_BENCH_S = 10.0  # gate 3 and the interleaved rounds of a compiled arm: not begun with less left
CHECK_CALLS = 10  # gate 3's calls, in model calls: both arms' outputs, the eager and float64 references
MAX_OPTION_CONFIGS = 16  # kernels whose option configs a recommendation keeps (keep_configs_of)
MAX_REPORTED_CONFIGS = 64  # what a published result may carry (github.trusted.RecommendationDoc)


def calls_templates(extern_ops: list[str]) -> bool:
    """Whether the compiled model calls a GEMM or convolution (``extern_ops``: its library calls,
    ``extern_kernels.mm``, ``aten.convolution.default``, ...), the calls max-autotune tunes
    templates for."""
    return any(part in TEMPLATE_OPS for op in extern_ops for part in op.split("."))


def template_tune_s(extern_ops: list[str], dtype: str) -> float:
    """What max-autotune's template tuning adds to an option's compile (:data:`TEMPLATE_TUNE_S`):
    nothing where the compiled model calls no GEMM or convolution (:func:`calls_templates`)."""
    return TEMPLATE_TUNE_S.get(dtype, TEMPLATE_TUNE_DEFAULT_S) if calls_templates(extern_ops) else 0.0


def tunes_templates(option: CompileOption) -> bool:
    """Whether ``option``'s compile tunes GEMM and convolution templates (max-autotune's modes)."""
    return (option.mode or "").startswith("max-autotune") or bool((option.config or {}).get("max_autotune"))


def compile_estimate_s(option: CompileOption, compile_s: float | None, template_s: float = 0.0) -> float:
    """Seconds ``option``'s arm is expected to compile: ``compile_s`` (an option's compile,
    estimated from the capture's; None: unknown, 0) times the option's ``compile_scale`` and, for
    an option that tunes GEMM and convolution templates, ``template_s`` (:func:`template_tune_s`)."""
    return (compile_s or 0.0) * option.compile_scale + (template_s if tunes_templates(option) else 0.0)


def bench_need_s(model_ms: float | None, rounds: int = 10, reps: int = 20, split_step: bool = False) -> float:
    """Seconds a compiled arm needs for gate 3 and the timed rounds on a model of ``model_ms`` a
    call (None: not profiled): MIN_BENCH_S, or more where the model is slow
    (:func:`~kernelopt_bot.harness.bench.compare_seconds`; ``split_step``: a training step's final
    benchmark, which also times each arm's forward half and whole step)."""
    if not model_ms:
        return MIN_BENCH_S
    return max(MIN_BENCH_S, compare_seconds(model_ms, rounds, reps, split_step) + CHECK_CALLS * model_ms / 1000.0)


def recommend(model_arms: ModelArms, target: Target, *, gamma: float, rounds: int = 10, reps: int = 20,
              options: tuple[CompileOption, ...] = COMPILE_OPTIONS,
              time_left: Callable[[], float | None] | None = None,
              bench_left: Callable[[], float | None] | None = None,
              model_ms: float | None = None, compile_s: float | None = None,
              template_s: float = 0.0, cached: frozenset[str] = frozenset()) -> list[Recommendation]:
    """Measure each option against the default compile; never raises for an option that fails.

    The options' arms compile at once (as many as the GPU's memory holds: ``ModelArms.room_for``),
    beside the baseline arms where those are compiling already, and are timed one after the other
    once none compiles any more (``ModelArms.settle``).
    ``time_left`` (seconds of wall budget left, None = no limit): options that would start too
    close to the end are reported as not measured, so the run keeps its wall budget; an option
    compiled with less of ``bench_left`` (default: ``time_left``) than its check and timing take
    (:func:`bench_need_s` for ``model_ms``, the profiled model's time a call; then what the last
    option's took) is not checked or timed, and none starts without that time beside its compile.
    ``compile_s`` (one option's compile, estimated; None: unknown), plus ``template_s`` for
    an option that tunes GEMM and convolution templates (:func:`template_tune_s`), sizes each wave
    by :func:`plan_wave`: no option starts whose compile, check and rounds cannot finish in
    ``bench_left`` (default ``time_left``), and no more compile at once than can then be timed.
    ``cached``: the options that compiled earlier in the run (:func:`short_of_time`): their compile
    is a load from the compiler's cache, estimated as ``compile_s`` alone.
    """
    if model_arms.device != "cuda":
        return [Recommendation(o.label, None, False, "not measured: no CUDA device") for o in options]
    baseline: Arm | None = None
    repeat: Arm | None = None
    done: dict[str, Recommendation] = {}
    passed_over: dict[str, str] = {}  # why an option whose compile could not finish did not start

    def no_baselines(exc: ArmError) -> list[Recommendation]:  # ours (out of memory, say): none is judged
        return [done.get(o.label) or Recommendation(
            o.label, None, False, f"not measured: the baseline arms did not start ({exc})") for o in options]

    if not model_arms.prestart():  # not started (no room beside this process): they go first, and
        try:  # the options' arms are sized by what they hold
            baseline, repeat = model_arms.baselines()
        except ArmError as exc:
            return no_baselines(exc)
    users = CompileSettings(model_arms.mode, model_arms.config)
    for option in options:  # an option the model is already compiled with is its baseline
        if option.is_part_of(users):
            done[option.label] = Recommendation(option.label, None, False,
                                                f"{ALREADY} {users.label}")
    pending = [o for o in options if o.label not in done]
    need_s = bench_need_s(model_ms, rounds, reps)

    def estimate(option: CompileOption) -> float:  # its compile, and a cold arm's replacement's load
        return later_compile_s(option, compile_s, template_s, cached) + model_arms.warm_load_s()

    def planned(option: CompileOption) -> float | None:  # reported beside what it took
        return None if compile_s is None else round(estimate(option), 1)

    while pending:
        left = time_left() if time_left is not None else None
        if left is not None and left < MIN_OPTION_S + need_s - MIN_BENCH_S:
            break
        room = model_arms.room_for(len(pending))
        if room == 0:  # others (the final benchmark's arm) still compile: let them finish first
            model_arms.settle()
            room = model_arms.room_for(len(pending))
        if room == 0:
            for option in pending:
                done[option.label] = Recommendation(option.label, None, False, NO_ROOM)
            break
        timing_left = bench_left or time_left
        t_left = timing_left() if compile_s is not None and timing_left is not None else None
        wave = plan_wave(pending, room, t_left, estimate, need_s)
        for option in pending:  # the first reason an option could not start is the one it keeps
            if t_left is not None and estimate(option) + need_s > t_left:
                passed_over.setdefault(option.label, f"{PASSED_OVER} {estimate(option):.0f} s), "
                                                     f"check and timing ({need_s:.0f} s) would not finish in the "
                                                     f"{max(0.0, t_left):.0f} s left")
        if not wave:
            break
        pending = [o for o in pending if o not in wave]
        arms: list[tuple[CompileOption, Arm | ArmError]] = []
        for option in wave:
            try:
                arms.append((option, model_arms.candidate(option.pack, label=option.label, mode=option.mode,
                                                     config=option.config, wait=False)))
            except ArmError as exc:
                arms.append((option, exc))
        try:
            if baseline is None:  # waited for after the first wave started: they compile side by side
                try:
                    baseline, repeat = model_arms.baselines()
                except ArmError as exc:
                    return no_baselines(exc)
            model_arms.settle()  # nothing is timed while an arm compiles
            for option, arm in arms:
                started = time.monotonic()
                found = _measure(option, arm, target, baseline, repeat, model_arms.device, model_arms.dtype,
                                 gamma=gamma, rounds=rounds, reps=reps, time_left=bench_left or time_left,
                                 need_s=need_s)
                if found.speedup is not None:  # measured: the next option's check and rounds take as long
                    need_s = max(need_s, time.monotonic() - started)
                # The option's own compile's choices (with a pack on top they would be the pack's)
                chosen = {} if isinstance(arm, ArmError) or option.pack is not None else config_changes(baseline, arm)
                compiled_s = None if isinstance(arm, ArmError) else compile_seconds(getattr(arm, "info", None))
                done[option.label] = replace(found, configs=chosen, compile_s=compiled_s,
                                             compile_estimate_s=planned(option))
        finally:
            for _, arm in arms:
                if not isinstance(arm, ArmError):
                    arm.close()
    return [done.get(o.label) or Recommendation(o.label, None, False, passed_over.get(o.label, RAN_OUT),
                                                compile_estimate_s=planned(o) if o.label in passed_over else None)
            for o in options]


def later_compile_s(option: CompileOption, compile_s: float | None, template_s: float,
                    cached: frozenset[str]) -> float:
    """An option's compile, estimated (:func:`compile_estimate_s`); one that compiled earlier in
    the run (``cached``) loads its graphs and tuned configs from the compiler's cache: ``compile_s``."""
    if option.label in cached:
        return compile_s or 0.0
    return compile_estimate_s(option, compile_s, template_s)


def short_of_time(recommendations: list[Recommendation]) -> tuple[list[str], frozenset[str]]:
    """The options the wall budget left unmeasured (never started, passed over, stopped while
    compiling, or compiled with no time left to time them), and of those the ones that compiled
    (their compile is in the cache): what may be measured after the search. On the H100 a GEMM
    model's coordinate descent compiled before the search and found no time to be timed, CUDA graphs
    did not start, and the search then ended with 30 s of the budget unused (mlp bf16, 12-06)."""
    waiting = [r.option for r in recommendations
               if not r.with_pack and r.speedup is None and (r.detail.startswith((RAN_OUT, PASSED_OVER)))]
    return waiting, frozenset(r.option for r in recommendations if r.detail == COMPILED_UNTIMED)


def merge_recommendations(before: list[Recommendation], again: list[Recommendation]) -> list[Recommendation]:
    """``before`` with each option measured ``again`` in its place (the rest appended): where the
    options that could not start before the search are measured after it."""
    later = {r.option: r for r in again}
    return [later.pop(r.option, r) for r in before] + list(later.values())


def not_started(recommendations: list[Recommendation]) -> list[str]:
    """The options whose arms never started, as their compile and timing would not have finished
    in the time given or the GPU held no arm beside the others
    (:attr:`~kernelopt_bot.result.Recommendation.never_started`, the baseline's own setting
    aside); ``[]`` where any option's arm started (it compiled, failed, was stopped or measured:
    the options had their time) or the baselines did not."""
    if not all(r.never_started for r in recommendations):
        return []
    return [r.option for r in recommendations if not r.detail.startswith(ALREADY)]


def plan_wave(pending: list[CompileOption], room: int, left: float | None,
              estimate: Callable[[CompileOption], float], need_s: float) -> list[CompileOption]:
    """The options that compile at once, in order: as many as the GPU's memory holds (``room``),
    each only where the wave's compile (its longest, ``estimate``) and then every member's check
    and rounds (``need_s`` each, one after the other) finish in ``left`` (None: no limit, or no
    estimate: the wave is what the GPU holds). The options of a wave are timed only once all of
    them have compiled: on the H200 a 30 ms fp32 MLP-Mixer's three options compiled side by side
    for 61 s and left 10 s, under the 16 s one check and its rounds take, so none was timed, and
    a convolution model's max-autotune compiled its templates for 54 s and was stopped, while the
    two others, which needed about 28 s, waited beside it and were never timed (12-04). An option
    that cannot finish is passed over for the next, which may; none: nothing starts."""
    if left is None:
        return pending[:room]
    wave: list[CompileOption] = []
    for option in pending:
        if len(wave) == room:
            break
        longest = max([estimate(option)] + [estimate(o) for o in wave])
        if longest + (len(wave) + 1) * need_s <= left:
            wave.append(option)
    return wave


def config_changes(baseline: Any, arm: Any) -> dict[str, str]:
    """The launch configs ``arm``'s compile settled on where the baseline's differ (each arm
    reports its own, described: ``info["configs"]``)."""
    ours = (getattr(baseline, "info", None) or {}).get("configs") or {}
    theirs = (getattr(arm, "info", None) or {}).get("configs") or {}
    changed = {name: config for name, config in sorted(theirs.items()) if ours.get(name) != config}
    return dict(list(changed.items())[:MAX_REPORTED_CONFIGS])


def keep_configs_of(recommendations: list[Recommendation], kernels: list[str],
                    limit: int = MAX_OPTION_CONFIGS) -> list[Recommendation]:
    """Each recommendation with only the configs of ``kernels`` (the searched ones, in the order they
    are searched), at most ``limit``: those are the ones the report shows and the search gates, and a
    large model's every kernel (hundreds under max-autotune) would not fit a published result."""
    rank = {name: i for i, name in enumerate(kernels)}
    out = []
    for rec in recommendations:
        kept = sorted((n for n in rec.configs if n in rank), key=rank.__getitem__)[:limit]
        out.append(replace(rec, configs={n: rec.configs[n] for n in kept}) if rec.configs else rec)
    return out


def option_configs(recommendations: list[Recommendation]) -> list[tuple[str, str, LaunchConfig]]:
    """(option, kernel name, config) for the kernels whose configs the verified options changed,
    fastest option first, one config a kernel: where an option beats the default compile end to
    end, its kernels' configs are candidates for the pack too (gated like any), so the pack is not
    behind what the compiler's own tuning found."""
    out: list[tuple[str, str, LaunchConfig]] = []
    seen: set[str] = set()
    verified = [r for r in recommendations if r.verified and r.speedup and not r.with_pack and r.configs]
    for rec in sorted(verified, key=lambda r: -(r.speedup or 0.0)):
        for name, text in rec.configs.items():
            try:
                config = LaunchConfig.from_description(text)
            except PackError:
                continue
            if name not in seen:
                seen.add(name)
                out.append((rec.option, name, config))
    return out


def measure_with_pack(model_arms: ModelArms, target: Target, best: Recommendation, pack: KernelPack, *,
                      gamma: float, rounds: int = 10, reps: int = 20,
                      options: tuple[CompileOption, ...] = COMPILE_OPTIONS,
                      time_left: Callable[[], float | None] | None = None,
                      model_ms: float | None = None) -> Recommendation | None:
    """The best verified option with ``pack`` installed on top, against the same baseline: what a
    user who takes both gets (the pack's kernels were verified under the baseline's compile; the
    option's compile is checked again by gate 3, and its speedup by gate 4's rules), measured as
    :func:`recommend` measures an option. None where there is nothing to measure: no such option,
    an empty pack, no GPU. Never raises for the option."""
    option = next((o for o in options if o.label == best.option), None)
    if option is None or not len(pack) or model_arms.device != "cuda":
        return None
    both = CompileOption(option.label + WITH_PACK, option.mode, option.config, pack, option.compile_scale)
    (found,) = recommend(model_arms, target, gamma=gamma, rounds=rounds, reps=reps, options=(both,),
                         time_left=time_left, model_ms=model_ms)
    return found


def _measure(option: CompileOption, arm: Arm | ArmError, target: Target, baseline: Arm,
             repeat: Arm | None, device: str, dtype: str, *, gamma: float, rounds: int, reps: int,
             time_left: Callable[[], float | None] | None, need_s: float = MIN_BENCH_S) -> Recommendation:
    """Gate 3 and gate 4's rules for one option's (compiled) arm, begun only with ``need_s``
    (what they are expected to take) left; ``timed_s`` is what they took, once begun (whatever
    their outcome)."""
    began: list[float] = []  # when the check began

    def judged() -> Recommendation:
        try:
            if isinstance(arm, ArmError):
                raise arm
            arm.wait_ready()
            applied = ""
            if option.pack is not None:
                found = set(arm.info.get("applied") or [])
                if not found:  # the option's compile has other kernels: this would be the option alone
                    return Recommendation(option.label, None, False, "not measured: the pack applies to none of "
                                                                     "the kernels this option compiles")
                entries = {e.kernel_name for e in option.pack.entries.values()}
                applied = f"{len(found & entries)} of {len(entries)} pack entries applied; "
            left = time_left() if time_left is not None else None
            if left is not None and left < need_s:  # compiled, but no time to check and time it
                return Recommendation(option.label, None, False, COMPILED_UNTIMED)
            began.append(time.monotonic())
            end_by = None if left is None else began[0] + left  # its rounds stop there (past MIN_ROUNDS)
            model = check_model(target, baseline, arm, None)
            if not model.passed:
                return Recommendation(option.label, None, False, f"outputs differ: {model.reason}")
            result = compare_arms(baseline, arm, repeat, target=target.spec, device=device, dtype=dtype,
                                  rounds=rounds, reps=reps, end_by=end_by, outputs_agree=agree_after_timing)
            verdict = judge(result, None, gamma, {})
            cut = (f" ({len(result.rounds)} of {result.rounds_planned} rounds: the wall-time budget ran out)"
                   if len(result.rounds) < result.rounds_planned else "")
            unlike = unlike_where_asked(arm, baseline)
            if unlike:  # arms started unlike lean one way on a launch-bound model: the verdict says so
                cut += f" ({unlike})"
            return Recommendation(option.label, result.speedup, bool(verdict.passed), applied + verdict.reason + cut)
        except InfrastructureFailure as exc:  # out of memory after a retry: ours, not the option's
            return Recommendation(option.label, None, False, f"not measured: {exc}")
        except ArmOursFailed as exc:  # our deadline, or no process for it: the option is not judged
            if isinstance(exc, ArmTimeout) and exc.budget:
                return Recommendation(option.label, None, False,
                                      "not measured: the wall-time budget ran out while it compiled (stopped)")
            return Recommendation(option.label, None, False, f"not measured: {exc}")
        except ArmError as exc:
            if is_out_of_memory(str(exc)):  # ours: the option is not judged
                return Recommendation(option.label, None, False, f"not measured: out of GPU memory ({exc})")
            return Recommendation(option.label, None, False, f"failed: {exc}")

    found = judged()
    return replace(found, timed_s=round(time.monotonic() - began[0], 2)) if began else found
