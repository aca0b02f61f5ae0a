"""The pipeline for a Helion kernel target (issue 14): the original is the kernel's pinned config
(or Helion's default), candidates are what Helion's own autotuner picks within the budget (GPU
only) and the original's neighbours, the gates are the launchers' (:func:`search_kernel`), and a
verified config is delivered pinned in the decorator (``patch.diff``).

A pinned config is re-verified first: against the default config on fresh inputs (gates 2-3),
so a pin that has gone wrong for these shapes is reported, and it stays when no candidate beats
it end to end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kernelopt_bot.harness.work_watch import NO_WATCH, StartWatch, WorkWatch, no_start_watch
from kernelopt_bot.helion_targets import (
    autotuned_config,
    changes,
    load_helion,
    neighbour_configs,
    written_config,
)
from kernelopt_bot.launcher_run import (
    KernelSearch,
    SearchContext,
    Verified,
    device_name,
    edit_note,
    measure_together,
    search_kernel,
    write_edits,
)
from kernelopt_bot.result import RunResult
from kernelopt_bot.source_patch import SourceEdit
from kernelopt_bot.verify.launcher import check_config_outputs, check_helion_static

# Helion's autotuner runs only with this much of the wall budget left, and takes at most half of
# it, at most AUTOTUNE_MAX_S (its quick effort; the rest is for our own search and the gates).
AUTOTUNE_MIN_LEFT_S = 60.0
AUTOTUNE_MAX_S = 40.0


def run_helion_target(spec: str, device: str | None, dtype: str, *, gamma: float, rounds: int,
                      candidates_per_kernel: int, result: RunResult, out_dir: Path,
                      log: Callable[[str], None], work_watch: WorkWatch = NO_WATCH,
                      ends_at: float | None = None, untimed_patch: bool = False,
                      start_watch: StartWatch = no_start_watch) -> Path | None:
    """The whole run on a Helion kernel file; fills ``result`` and returns the patch's path
    (None when nothing was verified). Arguments as :func:`~kernelopt_bot.launcher_run.run_launcher_target`."""
    log("loading the Helion kernel")
    with start_watch("loading the Helion kernel file"):
        target = load_helion(spec, device, dtype)
    result.device = target.device
    original = target.original_config()
    stale = ""
    if target.pinned is not None:
        log(f"re-verifying the pinned config of {target.kernel_name} against Helion's default config")
        checks = check_config_outputs(target, target.kernel_name, original, target.default_config())
        for gate in checks:
            log(f"  {gate.name}: {'passed' if gate.passed else 'FAILED' if gate.passed is False else 'not run'}: "
                f"{gate.reason}")
        if any(g.passed is False for g in checks):
            # A pin that disagrees with the default config is no reference for the gates: the
            # default is, and every candidate (the pin among them) is checked against it.
            stale = f"the pinned config failed against Helion's default config ({checks[-1].reason})"
            log(f"  warning: {stale}; candidates are compared with the default config instead")
            original = target.default_config()
    candidates = neighbour_configs(target, original)
    left = None if ends_at is None else ends_at - time.time()
    if target.device == "cuda" and (left is None or left > AUTOTUNE_MIN_LEFT_S):
        budget = AUTOTUNE_MAX_S if left is None else min(AUTOTUNE_MAX_S, left / 2)
        log(f"running Helion's autotuner (effort quick, at most {budget:.0f} s)")
        best = autotuned_config(target, budget, log)
        if best is not None and best != original:
            candidates = [best, *(c for c in candidates if c != best)]
    context = SearchContext(target, gamma, rounds, candidates_per_kernel, log, work_watch, ends_at, untimed_patch)
    search = KernelSearch(target.kernel_name, "helion", original, candidates,
                          lambda config: check_helion_static(target, config),
                          lambda config: changes(original, config))
    verified: Verified = {}
    search_kernel(context, search, result, verified)
    if stale:
        result.kernels[-1].detail = "; ".join(filter(None, [stale, result.kernels[-1].detail]))
    if not verified:
        if target.pinned is not None and not stale:
            result.kernels[-1].detail = "; ".join(filter(None, [result.kernels[-1].detail,
                                                                "the pinned config stays: no candidate beat it"]))
        return None
    config, verdict = verified[target.kernel_name]
    if target.device == "cuda":
        measure_together(target, {target.kernel_name: (original, config)}, rounds, result)
    note = edit_note("config verified for get_inputs()'s shapes", device_name(target.device), verdict)
    file = Path(target.file)
    edit = SourceEdit(file.name, "helion", target.kernel_name, written_config(target, config), note)
    return write_edits([(file, edit)], file.parent, out_dir, result, log)
