"""The pipeline for a standalone-kernel target (issue 14): capture the launcher's kernels, search
the configs of each, put candidates through the four gates, and deliver the verified configs as a
patch to the user's own source (``patch.diff``), not a pack.

Candidates for an autotuned kernel are its own ``@triton.autotune`` entries other than the one that
ran, and the neighbours of that one (a block size or the warp count doubled or halved, one stage
more or less); for a plain ``@triton.jit`` kernel, the launch options (warps and stages) around the
ones its launcher gave it, nearest first: its block sizes are the launcher's own logic. On a GPU
each is timed on the launcher first and only those faster than the original by
:data:`~kernelopt_bot.search.tuner.MIN_KERNEL_GAIN` go to the gates; gate 4 is the modules' own
comparison (:class:`~kernelopt_bot.harness.launcher_arm.LauncherArm`). In the CPU interpreter
gates 1-3 run and nothing is timed: no patch is written without a measured speedup, unless the
user asks for one (``untimed_patch``, to see the patch flow on a machine without a GPU; the patch
then says it was not timed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelopt_bot.harness.arm_process import ArmRaised
from kernelopt_bot.harness.bench import compare_arms
from kernelopt_bot.harness.failures import past_deadline
from kernelopt_bot.harness.launcher_arm import LauncherArm
from kernelopt_bot.harness.work_watch import NO_WATCH, StartWatch, WorkWatch, no_start_watch
from kernelopt_bot.launchers import (
    LAUNCH_OPTIONS,
    KernelLaunch,
    KernelTarget,
    capture_launches,
    load_launcher,
)
from kernelopt_bot.result import KernelOutcome, RunResult
from kernelopt_bot.search.tuner import MIN_KERNEL_GAIN
from kernelopt_bot.source_patch import (
    DEFAULT_OPTIONS,
    PatchError,
    SourceEdit,
    apply_edits,
    fit_note,
    launch_keywords,
    unified_diff,
)
from kernelopt_bot.targets import dtype_name
from kernelopt_bot.verify.launcher import InfrastructureFailure, check_config_outputs, check_config_static
from kernelopt_bot.verify.perf import agree_after_timing, judge
from kernelopt_bot.verify.verdict import UNTIMED, GateResult, Verdict

PATCH_FILE = "patch.diff"
PROBE_REPS = 20
PROBE_DEADLINE_S = 120.0  # one config's probe timing on the launcher
GATES_DEADLINE_S = 900.0  # one config's gates 2-4 (several launcher runs, interleaved rounds)
GATES_RESERVE_S = 10.0  # a config's gates do not start closer than this to the wall budget's end
PLAIN_WARPS = (1, 2, 4, 8, 16, 32)
PLAIN_STAGES = (1, 2, 3, 4, 5)


def candidate_configs(launch: KernelLaunch) -> list[dict[str, Any]]:
    """For an autotuned kernel the chosen config's neighbours that its list lacks (an entry
    already there cannot be delivered: putting it first does not make Triton's benchmark pick
    it); for a plain kernel, its warps and stages around the launcher's, nearest first; each once."""
    chosen = launch.chosen or {}
    out: list[dict[str, Any]] = []

    def add(config: dict[str, Any]) -> None:
        if config != chosen and config not in out:
            out.append(config)

    if not launch.autotuned:
        settable = _settable_options(launch)
        warps, stages = chosen.get("num_warps", 4), chosen.get("num_stages", 3)

        def distance(config: dict[str, Any]) -> tuple[float, ...]:
            w = abs(PLAIN_WARPS.index(config["num_warps"]) - (PLAIN_WARPS.index(warps) if warps in PLAIN_WARPS else 2))
            return (w + abs(config["num_stages"] - stages), w, config["num_warps"], config["num_stages"])

        grid = [{"num_warps": w, "num_stages": st} for w in PLAIN_WARPS for st in PLAIN_STAGES]
        for config in sorted(grid, key=distance):
            if all(k in settable or chosen.get(k) == v for k, v in config.items()):
                add(config)
        return out
    listed = [dict(c) for c in launch.autotune_configs or []]
    for key, value in chosen.items():
        if key in ("num_ctas", "maxnreg") or not isinstance(value, int) or isinstance(value, bool):
            continue
        steps = (value + 1, value - 1) if key == "num_stages" else (value * 2, value // 2)
        for new in steps:
            if new >= 1 and (key != "num_warps" or new <= 32):
                add({**chosen, key: new})
    # An entry already in the list cannot be delivered (putting it first does not make Triton's
    # own benchmark pick it): only configs the list lacks are candidates.
    return [c for c in out if c not in listed]


@dataclass
class KernelSearch:
    """One kernel of a kernel target to search: its name as the target's runs force it, the
    config it ran with, the configs to try (nearest first), and gate 1 for a config."""

    name: str
    kind: str
    original: dict[str, Any]
    candidates: list[dict[str, Any]]
    static: Callable[[dict[str, Any]], GateResult]
    describe: Callable[[dict[str, Any]], str] | None = None  # a config in the log (default: every key)

    def label(self, config: dict[str, Any]) -> str:
        return (self.describe or _describe)(config)


@dataclass
class SearchContext:
    """What every kernel's search on one target shares: the target, the gates' settings, the
    run's limits and where it reports."""

    target: KernelTarget
    gamma: float
    rounds: int
    candidates_per_kernel: int
    log: Callable[[str], None]
    work_watch: WorkWatch = NO_WATCH
    ends_at: float | None = None  # the wall budget's deadline (time.time())
    untimed_patch: bool = False


Verified = dict[str, tuple[dict[str, Any], Verdict]]


def run_launcher_target(spec: str, device: str | None, dtype: str, *, gamma: float, rounds: int,
                        candidates_per_kernel: int, result: RunResult, out_dir: Path,
                        log: Callable[[str], None], work_watch: WorkWatch = NO_WATCH,
                        ends_at: float | None = None, untimed_patch: bool = False,
                        start_watch: StartWatch = no_start_watch) -> Path | None:
    """The whole run on a launcher file; fills ``result`` and returns the patch's path (None
    when nothing was verified). Each config's probe and gates are announced work
    (:class:`WorkWatch`): one that poisons the device or crashes the engine is skipped by the next.
    ``ends_at`` (:func:`time.time`): the wall budget's deadline; no config's gates start after
    :data:`GATES_RESERVE_S` before it. ``untimed_patch``: with no GPU, the first config that
    passes gates 1-3 goes into the patch, marked as not timed. ``start_watch``: around the
    launcher's load and first run, which the run cannot go on without (the pipeline's, bounded
    by the wall budget)."""
    log("loading the launcher")
    with start_watch("loading the kernel file"):
        target = load_launcher(spec, device, dtype)
    result.device = target.device
    log("running the launcher and recording its kernel launches")
    with start_watch("running the kernel file's launcher", kernels=True):
        launches = capture_launches(target)
    seen: dict[str, KernelLaunch] = {}
    for launch in launches:
        seen.setdefault(launch.name, launch)
    context = SearchContext(target, gamma, rounds, candidates_per_kernel, log, work_watch, ends_at, untimed_patch)
    verified: Verified = {}
    for name, launch in seen.items():
        kind = "triton (hand-written)" if launch.autotuned else "triton (hand-written, plain @triton.jit)"
        search = KernelSearch(name, kind, dict(launch.chosen or {}), candidate_configs(launch),
                              lambda config, launch=launch: check_config_static(launch, config))
        search_kernel(context, search, result, verified)
    if target.device == "cuda" and verified:
        measure_together(target, {name: (seen[name].chosen or {}, config) for name, (config, _) in verified.items()},
                         rounds, result)
    return _write_patch({name: (seen[name], *picked) for name, picked in verified.items()}, spec, out_dir, result,
                        log, device_name(target.device))


def search_kernel(context: SearchContext, search: KernelSearch, result: RunResult, verified: Verified) -> None:
    """Rank ``search``'s configs, put the best through the gates within the budget, and record
    the kernel's outcome in ``result``; a verified config goes into ``verified``."""
    target, log = context.target, context.log
    outcome = KernelOutcome(search.name, search.kind)
    result.kernels.append(outcome)
    log(f"searching {search.name}")
    picks = _ranked(context, search)
    tried = []
    for config in picks:
        if past_deadline(context.ends_at, ahead_s=GATES_RESERVE_S):
            outcome.detail = f"the wall-time budget ran out after {len(tried)} of {len(picks)} configs"
            break
        tried.append((config, _watched_verify(context, search, config)))
    outcome.candidates = len(tried)
    counts = outcome.strategies.setdefault("config", {"gated": 0, "accepted": 0, "chosen": 0})
    counts["gated"] = len(tried)
    accepted = [(c, v) for c, v in tried if v.accepted]
    # Without a GPU a config that passed gates 1-3 is not settled (gate 4 never ran): not "no
    # candidate accepted", which reads as rejected. Its patch is written only when asked for.
    untimed = [(c, v) for c, v in tried if target.device != "cuda" and v.passed_first_three]
    counts["accepted"] = len(accepted)
    for config, verdict in tried:
        deciding = verdict.gate(verdict.rejected_by) if verdict.rejected_by else verdict.gate("performance")
        why = f" ({deciding.reason})" if deciding is not None and deciding.passed is not None else ""
        log(f"  {search.label(config)}: {verdict.status}{why}")
    if accepted:
        config, verdict = max(accepted, key=lambda cv: cv[1].speedup or 0.0)
        counts["chosen"] = 1
        outcome.status, outcome.speedup, outcome.replacement = "accepted", verdict.speedup, "config"
        outcome.detail = search.label(config)
        verified[search.name] = (config, verdict)
    elif untimed and context.untimed_patch:
        config, verdict = untimed[0]
        outcome.status, outcome.replacement, outcome.detail = UNTIMED, "config", search.label(config)
        verified[search.name] = (config, verdict)
    elif not tried:
        outcome.status = "not searched (budget)" if outcome.detail else "no proposal"
    else:
        outcome.status = UNTIMED if untimed else "no candidate accepted"
        outcome.detail = "; ".join([*sorted({v.status for _, v in tried}), *([outcome.detail] if outcome.detail else [])])


def device_name(device: str) -> str:
    """The GPU's name, for the note a patch carries."""
    if device == "cuda":
        from kernelopt_bot.pack.runtime import running_environment

        return running_environment(device).gpu or device
    return "the CPU interpreter"


def _work_key(search: KernelSearch, config: dict[str, Any]) -> str:
    return f"kernel:{search.name}:{json.dumps(config, sort_keys=True, default=str)}"


def _watched_verify(context: SearchContext, search: KernelSearch, config: dict[str, Any]) -> Verdict:
    key = _work_key(search, config)
    downed = context.work_watch.quarantined(key)
    if downed is not None:
        verdict = Verdict(search.name, search.label(config))
        verdict.gates = [search.static(config), GateResult.fail("correctness", downed)]
        return verdict.finished()
    with context.work_watch.watching(key, f"gates for {search.label(config)} on {search.name}", GATES_DEADLINE_S):
        return _verify(context, search, config)


def _ranked(context: SearchContext, search: KernelSearch) -> list[dict[str, Any]]:
    """On a GPU the configs faster than the original on the target, fastest first; on the CPU
    the first ``candidates_per_kernel`` (nothing can be timed). Each config is timed in a pair
    with the original, back to back, and ranked by the pair's ratio: a single timing of the
    original, taken first, would carry the GPU's warm-up into every comparison."""
    target, limit = context.target, context.candidates_per_kernel
    if target.device != "cuda":
        return search.candidates[:limit]
    original = LauncherArm(target, {search.name: search.original}, "original")
    original.request("time", 0, PROBE_REPS)  # compiled and warm before the first pair
    timed: list[tuple[float, dict[str, Any]]] = []
    for config in search.candidates:
        if past_deadline(context.ends_at, ahead_s=GATES_RESERVE_S):
            break
        key = _work_key(search, config)
        if not search.static(config).passed or context.work_watch.quarantined(key) is not None:
            continue
        try:
            with context.work_watch.watching(key, f"timing {search.label(config)} on {search.name}", PROBE_DEADLINE_S):
                probe = LauncherArm(target, {search.name: config}, "probe")
                probe.request("time", 0, 2)  # compiled before it is timed
                reply = probe.request("time", 0, PROBE_REPS)
                before = original.request("time", 0, PROBE_REPS)
        except Exception:  # noqa: BLE001 - a config that fails is no candidate
            continue
        if reply and before and reply[0] and before[0] / reply[0] >= MIN_KERNEL_GAIN:
            timed.append((reply[0] / before[0], config))
    context.log(f"  {len(search.candidates)} configs timed on the target; {len(timed)} faster than the original "
                f"by {MIN_KERNEL_GAIN - 1:.0%}" + (f" (best {1 / min(t for t, _ in timed):.3f}x)" if timed else ""))
    return [c for _, c in sorted(timed, key=lambda t: t[0])][:limit]


def _verify(context: SearchContext, search: KernelSearch, config: dict[str, Any]) -> Verdict:
    verdict = Verdict(search.name, search.label(config))
    static = search.static(config)
    verdict.gates.append(static)
    if static.passed:
        try:
            verdict.gates.extend(check_config_outputs(context.target, search.name, config, search.original))
        except InfrastructureFailure as exc:
            verdict.infrastructure = str(exc)
            return verdict
    if all(g.passed is not False for g in verdict.gates):
        verdict.gates.append(_performance(context.target, {search.name: config}, {search.name: search.original},
                                          search.name, context.gamma, context.rounds))
    return verdict.finished()


def _performance(target: KernelTarget, forced: dict[str, dict[str, Any]], original: dict[str, dict[str, Any]],
                 kernel: str | None, gamma: float, rounds: int) -> GateResult:
    if target.device != "cuda":
        return GateResult.not_run("performance", "not measured: no CUDA device (interpreter mode)")
    try:
        bench = _compare(target, original, forced, "candidate", rounds)
    except ArmRaised as exc:
        if exc.label == "candidate":  # the target with this config raised while it was timed
            return GateResult.fail("performance", f"benchmark failed: {exc.payload}")
        return GateResult.not_run("performance", f"not measured: the original config failed while timed ({exc.payload})")
    numbers = {"speedup": bench.speedup, "baseline_ms": bench.baseline_ms, "packed_ms": bench.packed_ms,
               "noise_floor": bench.noise_floor}
    return judge(bench, kernel, gamma, numbers)


def _compare(target: KernelTarget, original: dict[str, dict[str, Any]], forced: dict[str, dict[str, Any]],
             label: str, rounds: int) -> Any:
    """Gate 4's comparison: the target with ``forced`` against it with ``original`` and again
    with ``original`` (the noise floor), interleaved (:func:`compare_arms`)."""
    return compare_arms(LauncherArm(target, original, "baseline"), LauncherArm(target, forced, label),
                        LauncherArm(target, original, "baseline-repeat"), target=target.spec,
                        device=target.device, dtype=dtype_name(target.dtype), rounds=rounds,
                        outputs_agree=agree_after_timing)


def measure_together(target: KernelTarget, configs: dict[str, tuple[dict[str, Any], dict[str, Any]]],
                     rounds: int, result: RunResult) -> None:
    """The target with every verified config at once (kernel -> (original, verified)), against
    the original, as the run's number."""
    original = {name: dict(before) for name, (before, _) in configs.items()}
    forced = {name: config for name, (_, config) in configs.items()}
    try:
        bench = _compare(target, original, forced, "patched", rounds)
    except ArmRaised as exc:
        result.error = f"the verified configs together were not measured: {exc}"
        return
    result.baseline_ms, result.optimized_ms = bench.baseline_ms, bench.packed_ms
    result.speedup, result.noise_floor = bench.speedup, bench.noise_floor


def _write_patch(verified: dict[str, tuple[KernelLaunch, dict[str, Any], Verdict]], spec: str, out_dir: Path,
                 result: RunResult, log: Callable[[str], None], device_name: str) -> Path | None:
    root = Path(spec).resolve().parent
    edits: list[tuple[Path, SourceEdit]] = []
    for launch, config, verdict in verified.values():
        edit = _launch_edit(launch, config, verdict, root, device_name, log) if not launch.autotuned \
            else _autotune_edit(launch, config, verdict, root, device_name, log)
        if edit is not None:
            edits.append(edit)
    return write_edits(edits, root, out_dir, result, log)


def write_edits(edits: list[tuple[Path, SourceEdit]], root: Path, out_dir: Path, result: RunResult,
                log: Callable[[str], None]) -> Path | None:
    """``patch.diff`` from the edits (each file's made together, in ``edit_order``, to the file
    as it is now: one diff per file; paths relative to the target's folder, or the file's own where
    it lives outside), and the edits as data in the result (what the bot's publish stage rebuilds
    the change from); None when none applies."""
    by_file: dict[Path, list[SourceEdit]] = {}
    for path, edit in edits:
        by_file.setdefault(path, []).append(edit)
    pieces, kept = [], []
    for path, file_edits in by_file.items():
        try:
            text = path.read_text()
        except OSError as exc:
            log(f"warning: {path} could not be read; {', '.join(e.kernel for e in file_edits)} not written: {exc}")
            continue
        acceptable, refused = [], []
        for edit in file_edits:
            try:
                SourceEdit.from_json(edit.to_json())  # what the bot's publish stage will accept of it
                acceptable.append(edit)
            except (PatchError, ValueError) as exc:
                refused.append((edit, str(exc)))
        new, made, failed = apply_edits(text, acceptable)
        for edit, why in [*refused, *failed]:
            log(f"warning: {edit.kernel}'s config could not be written into {path}: {why}")
        kept.extend(edit.to_json() for edit in made)
        if new != text:
            pieces.append(unified_diff(path, text, new, _root_for(path, root)))
    if not pieces:
        return None
    patch = out_dir / PATCH_FILE
    patch.write_text("".join(pieces))
    result.pack_entries, result.source_edits = len(kept), kept
    return patch


def _autotune_edit(launch: KernelLaunch, config: dict[str, Any], verdict: Verdict, root: Path, device_name: str,
                   log: Callable[[str], None]) -> tuple[Path, SourceEdit] | None:
    """An autotuned kernel's verified config, first in its ``@triton.autotune`` list, with a
    comment saying where it was verified and how fast (or that it was not timed)."""
    if launch.file is None:
        return None
    if config in (launch.autotune_configs or []):
        # Already in the list: putting it first would not make Triton's own benchmark pick it.
        log(f"    {launch.name}: {_describe(config)} is already in its @triton.autotune list (Triton's benchmark "
            f"picked another); no patch for it")
        return None
    path = Path(launch.file)
    written = _written(config)
    note = edit_note(f"{_describe(written).removeprefix('config ')} added to the list, verified", device_name, verdict)
    return path, SourceEdit(_relative(path, root), "autotune", launch.name, written, note)


def _launch_edit(launch: KernelLaunch, config: dict[str, Any], verdict: Verdict, root: Path, device_name: str,
                 log: Callable[[str], None]) -> tuple[Path, SourceEdit] | None:
    """A plain kernel's verified options written at its launch, for the shape they were verified
    on; None (with a warning) where it is not known where the launch is."""
    if launch.call_file is None or launch.call_line is None:
        log(f"warning: {launch.name}: where it is launched is unknown; no patch for it")
        return None
    changed = {k: v for k, v in config.items() if (launch.chosen or {}).get(k) != v}
    note = edit_note(f"{_describe(changed).removeprefix('config ')} for this shape, verified", device_name, verdict)
    values = {k: v for k, v in {**dict(zip(launch.arg_names, launch.args)), **launch.constexprs}.items()
              if isinstance(v, int) and not isinstance(v, bool)}
    path = Path(launch.call_file)
    grid = [] if launch.grid_function else list(launch.grid)  # a grid function's value is no tuple to compare
    return path, SourceEdit(_relative(path, root), "launch", launch.name, changed, note, launch.call_line,
                            list(launch.arg_names), values, grid)


def edit_note(what: str, device_name: str, verdict: Verdict) -> str:
    """A patch's comment line, for every kind of edit: ``what`` (what it sets and how it was
    verified), on which device, and how fast (or that it was not timed); kept to what a source
    edit's note may be (one printable line, 300 characters)."""
    speed = f"{verdict.speedup:.3f}x end to end" if verdict.speedup is not None else "gates 1-3 only, not timed"
    return fit_note(f"{what} on {device_name} ({speed})")


def _settable_options(launch: KernelLaunch) -> set[str]:
    """The launch options a patch can give the launch new values for: any, unless the call also
    passes ``**kwargs`` (then those it names), none where the launch's source is unknown."""
    if launch.call_file is None or launch.call_line is None:
        return set()
    try:
        named, spread = launch_keywords(Path(launch.call_file).read_text(), launch.call_line, launch.name)
    except (PatchError, OSError, ValueError):
        return set()
    return {k for k in DEFAULT_OPTIONS if k in named} if spread else set(DEFAULT_OPTIONS)


def _relative(path: Path, root: Path) -> str:
    """``path`` relative to the target's folder (``..`` where it lives beside it)."""
    return Path(os.path.relpath(path.resolve(), root)).as_posix()


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
