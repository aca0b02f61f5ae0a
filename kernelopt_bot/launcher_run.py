"""The pipeline for a standalone-kernel target (issue 14): capture the launcher's kernels, search
the configs of each autotuned one, put candidates through the four gates, and deliver the verified
configs as a patch to the user's own source (``patch.diff``), not a pack.

Candidates are the kernel's own ``@triton.autotune`` entries other than the one that ran, and the
neighbours of that one (a block size or the warp count doubled or halved, one stage more or less).
On a GPU each is timed on the launcher first and only those faster than the original by
:data:`~kernelopt_bot.search.tuner.MIN_KERNEL_GAIN` go to the gates; gate 4 is the modules' own
comparison (:class:`~kernelopt_bot.harness.launcher_arm.LauncherArm`). In the CPU interpreter
gates 1-3 run and nothing is timed: no patch is written without a measured speedup.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelopt_bot.harness.bench import compare_arms
from kernelopt_bot.harness.launcher_arm import LauncherArm
from kernelopt_bot.harness.model_worker import ArmRaised
from kernelopt_bot.harness.work_watch import NO_WATCH, WorkWatch
from kernelopt_bot.launchers import (
    LAUNCH_OPTIONS,
    KernelLaunch,
    LauncherTarget,
    capture_launches,
    load_launcher,
)
from kernelopt_bot.result import KernelOutcome, RunResult
from kernelopt_bot.search.tuner import MIN_KERNEL_GAIN
from kernelopt_bot.source_patch import PatchError, autotune_patch
from kernelopt_bot.verify.launcher import check_config_outputs, check_config_static
from kernelopt_bot.verify.perf import judge
from kernelopt_bot.verify.result import GateResult, Verdict

PATCH_FILE = "patch.diff"
PROBE_REPS = 20
PROBE_DEADLINE_S = 120.0  # one config's probe timing on the launcher
GATES_DEADLINE_S = 900.0  # one config's gates 2-4 (several launcher runs, interleaved rounds)
GATES_RESERVE_S = 10.0  # a config's gates do not start closer than this to the wall budget's end


def candidate_configs(launch: KernelLaunch) -> list[dict[str, Any]]:
    """The autotune list's other entries, then the chosen config's neighbours; each once."""
    chosen = launch.chosen or {}
    out: list[dict[str, Any]] = []

    def add(config: dict[str, Any]) -> None:
        if config != chosen and config not in out:
            out.append(config)

    for config in launch.autotune_configs or []:
        add(dict(config))
    for key, value in chosen.items():
        if key in ("num_ctas", "maxnreg") or not isinstance(value, int) or isinstance(value, bool):
            continue
        steps = (value + 1, value - 1) if key == "num_stages" else (value * 2, value // 2)
        for new in steps:
            if new >= 1 and (key != "num_warps" or new <= 32):
                add({**chosen, key: new})
    return out


def run_launcher_target(spec: str, device: str | None, dtype: str, *, gamma: float, rounds: int,
                        candidates_per_kernel: int, result: RunResult, out_dir: Path,
                        log: Callable[[str], None], work_watch: WorkWatch = NO_WATCH,
                        ends_at: float | None = None) -> Path | None:
    """The whole run on a launcher file; fills ``result`` and returns the patch's path (None
    when nothing was verified). Each config's probe and gates are announced work
    (:class:`WorkWatch`): one that poisons the device or crashes the engine is skipped by the next.
    ``ends_at`` (:func:`time.time`): the wall budget's deadline; no config's gates start after
    :data:`GATES_RESERVE_S` before it."""
    log("loading the launcher")
    target = load_launcher(spec, device, dtype)
    result.device = target.device
    log("running the launcher and recording its kernel launches")
    launches = capture_launches(target)
    seen: dict[str, KernelLaunch] = {}
    for launch in launches:
        seen.setdefault(launch.name, launch)
    verified: dict[str, tuple[KernelLaunch, dict[str, Any], Verdict]] = {}
    for name, launch in seen.items():
        outcome = KernelOutcome(name, "triton (hand-written)")
        result.kernels.append(outcome)
        if launch.autotune_configs is None or launch.chosen is None:
            outcome.status = "not searched (no @triton.autotune list: its launch parameters are the launcher's)"
            continue
        log(f"searching {name}")
        picks = _ranked(target, launch, candidate_configs(launch), candidates_per_kernel, log, work_watch)
        tried = []
        for config in picks:
            if ends_at is not None and time.time() > ends_at - GATES_RESERVE_S:
                outcome.detail = f"the wall-time budget ran out after {len(tried)} of {len(picks)} configs"
                break
            tried.append((config, _watched_verify(target, launch, config, gamma, rounds, work_watch)))
        outcome.candidates = len(tried)
        counts = outcome.strategies.setdefault("config", {"gated": 0, "accepted": 0, "chosen": 0})
        counts["gated"] = len(tried)
        accepted = [(c, v) for c, v in tried if v.accepted]
        counts["accepted"] = len(accepted)
        for config, verdict in tried:
            log(f"  {_describe(config)}: {verdict.status}")
        if accepted:
            config, verdict = max(accepted, key=lambda cv: cv[1].speedup or 0.0)
            counts["chosen"] = 1
            outcome.status, outcome.speedup, outcome.replacement = "accepted", verdict.speedup, "config"
            outcome.detail = _describe(config)
            verified[name] = (launch, config, verdict)
        elif not tried:
            outcome.status = "not searched (budget)" if outcome.detail else "no proposal"
        else:
            outcome.status = "no candidate accepted"
            outcome.detail = "; ".join([*sorted({v.status for _, v in tried}), *([outcome.detail] if outcome.detail else [])])
    if target.device == "cuda" and verified:
        _measure_together(target, verified, rounds, result)
    return _write_patch(verified, spec, out_dir, result, log)


def _work_key(launch: KernelLaunch, config: dict[str, Any]) -> str:
    return f"launcher:{launch.name}:{json.dumps(config, sort_keys=True)}"


def _watched_verify(target: LauncherTarget, launch: KernelLaunch, config: dict[str, Any], gamma: float,
                    rounds: int, work_watch: WorkWatch) -> Verdict:
    key = _work_key(launch, config)
    downed = work_watch.quarantined(key)
    if downed is not None:
        verdict = Verdict(launch.name, _describe(config))
        verdict.gates = [check_config_static(launch, config), GateResult.fail("correctness", downed)]
        return verdict.finished()
    with work_watch.watching(key, f"gates for {_describe(config)} on {launch.name}", GATES_DEADLINE_S):
        return _verify(target, launch, config, gamma, rounds)


def _ranked(target: LauncherTarget, launch: KernelLaunch, configs: list[dict[str, Any]], limit: int,
            log: Callable[[str], None], work_watch: WorkWatch = NO_WATCH) -> list[dict[str, Any]]:
    """On a GPU the configs faster than the original on the launcher, fastest first; on the CPU
    the first ``limit`` (nothing can be timed)."""
    if target.device != "cuda":
        return configs[:limit]
    original = LauncherArm(target, {launch.name: dict(launch.chosen or {})}, "original").request("time", 0, PROBE_REPS)
    timed: list[tuple[float, dict[str, Any]]] = []
    for config in configs:
        key = _work_key(launch, config)
        if not check_config_static(launch, config).passed or work_watch.quarantined(key) is not None:
            continue
        try:
            with work_watch.watching(key, f"timing {_describe(config)} on {launch.name}", PROBE_DEADLINE_S):
                reply = LauncherArm(target, {launch.name: config}, "probe").request("time", 0, PROBE_REPS)
        except Exception:  # noqa: BLE001 - a config that fails is no candidate
            continue
        if reply and original and original[0] / reply[0] >= MIN_KERNEL_GAIN:
            timed.append((reply[0], config))
    log(f"  {len(configs)} configs timed on the launcher; {len(timed)} faster than the original by "
        f"{MIN_KERNEL_GAIN - 1:.0%}")
    return [c for _, c in sorted(timed, key=lambda t: t[0])][:limit]


def _verify(target: LauncherTarget, launch: KernelLaunch, config: dict[str, Any], gamma: float, rounds: int) -> Verdict:
    verdict = Verdict(launch.name, _describe(config))
    static = check_config_static(launch, config)
    verdict.gates.append(static)
    if static.passed:
        verdict.gates.extend(check_config_outputs(target, launch, config, dict(launch.chosen or {})))
    if all(g.passed is not False for g in verdict.gates):
        verdict.gates.append(_performance(target, {launch.name: config}, {launch.name: dict(launch.chosen or {})},
                                          launch.name, gamma, rounds))
    return verdict.finished()


def _performance(target: LauncherTarget, forced: dict[str, dict[str, Any]], original: dict[str, dict[str, Any]],
                 kernel: str | None, gamma: float, rounds: int) -> GateResult:
    if target.device != "cuda":
        return GateResult.not_run("performance", "not measured: no CUDA device (interpreter mode)")
    try:
        bench = _compare(target, original, forced, "candidate", rounds)
    except ArmRaised as exc:
        if exc.label == "candidate":  # the launcher with this config raised while it was timed
            return GateResult.fail("performance", f"benchmark failed: {exc.payload}")
        return GateResult.not_run("performance", f"not measured: the original config failed while timed ({exc.payload})")
    numbers = {"speedup": bench.speedup, "baseline_ms": bench.baseline_ms, "packed_ms": bench.packed_ms,
               "noise_floor": bench.noise_floor}
    return judge(bench, kernel, gamma, numbers)


def _compare(target: LauncherTarget, original: dict[str, dict[str, Any]], forced: dict[str, dict[str, Any]],
             label: str, rounds: int) -> Any:
    """Gate 4's comparison: the launcher with ``forced`` against it with ``original`` and again
    with ``original`` (the noise floor), interleaved (:func:`compare_arms`)."""
    return compare_arms(LauncherArm(target, original, "baseline"), LauncherArm(target, forced, label),
                        LauncherArm(target, original, "baseline-repeat"), target=target.spec,
                        device=target.device, dtype=str(target.dtype), rounds=rounds)


def _measure_together(target: LauncherTarget, verified: dict[str, tuple[KernelLaunch, dict[str, Any], Verdict]],
                      rounds: int, result: RunResult) -> None:
    """The launcher with every verified config at once, against the original, as the run's number."""
    forced = {name: config for name, (_, config, _) in verified.items()}
    original = {name: dict(launch.chosen or {}) for name, (launch, _, _) in verified.items()}
    try:
        bench = _compare(target, original, forced, "patched", rounds)
    except ArmRaised as exc:
        result.error = f"the verified configs together were not measured: {exc}"
        return
    result.baseline_ms, result.optimized_ms = bench.baseline_ms, bench.packed_ms
    result.speedup, result.noise_floor = bench.speedup, bench.noise_floor


def _write_patch(verified: dict[str, tuple[KernelLaunch, dict[str, Any], Verdict]], spec: str, out_dir: Path,
                 result: RunResult, log: Callable[[str], None]) -> Path | None:
    if not verified:
        return None
    root = Path(spec).resolve().parent
    pieces = []
    for name, (launch, config, _) in verified.items():
        if launch.file is None:
            continue
        if config in (launch.autotune_configs or []):
            # Already in the list: putting it first would not make Triton's own benchmark pick it.
            log(f"    {name}: {_describe(config)} is already in its @triton.autotune list (Triton's benchmark "
                f"picked another); no patch for it")
            continue
        try:
            pieces.append(autotune_patch(launch.file, name, _written(config), root=_root_for(Path(launch.file), root)))
        except (PatchError, ValueError) as exc:
            log(f"warning: {name}'s config could not be written into {launch.file}: {exc}")
    if not pieces:
        return None
    path = out_dir / PATCH_FILE
    path.write_text("".join(pieces))
    result.pack_entries = len(pieces)
    return path


def _root_for(file: Path, launcher_dir: Path) -> Path:
    """Paths in the patch are relative to the launcher's folder when the kernel lives under it."""
    resolved = file.resolve()
    return launcher_dir if launcher_dir in resolved.parents else resolved.parent


def _written(config: dict[str, Any]) -> dict[str, Any]:
    """The config as the source writes it: launch options Triton fills in by default left out."""
    return {k: v for k, v in config.items() if k not in ("num_ctas", "maxnreg") or v not in (1, None)}


def _describe(config: dict[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in config.items() if k not in LAUNCH_OPTIONS)
    options = ", ".join(f"{k}={config[k]}" for k in LAUNCH_OPTIONS if config.get(k) not in (None,))
    return f"config {params}{', ' if params and options else ''}{options}"
