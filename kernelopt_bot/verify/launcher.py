"""Gates 1-3 for a config of a kernel target (issue 14): a standalone Triton kernel's launch config
or a Helion kernel's config is the user's own kernel run another way, so the gates compare it with
the config that kernel ran.

* static: for a Triton kernel, every key is one of the kernel's parameters or a launch option,
  with a sane value (``num_warps`` a power of two up to 32, ``num_stages`` 1-8, block sizes
  positive integers); for a Helion kernel, Helion's own check against the kernel's config space
  and its code generation;
* correctness, end to end on the launcher: on fresh inputs of several seeds the launcher with the
  candidate config returns what it returns with the original config (the tolerances of
  :func:`~kernelopt_bot.verify.tolerance.compare`), so a config that drops or repeats rows fails;
* where the launcher file has ``reference(*inputs)``: against that PyTorch reference in float64,
  the candidate is not less accurate than the original in substance (at most 10x its relative
  error, or within the dtype's tolerance).

Performance (gate 4) needs a GPU; without one it is reported as not measured.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.arm_process import flatten_outputs
from kernelopt_bot.harness.failures import is_out_of_memory
from kernelopt_bot.helion_targets import HelionTarget, normalized
from kernelopt_bot.launchers import LAUNCH_OPTIONS, KernelLaunch, KernelTarget
from kernelopt_bot.verify.tolerance import compare, relative_error
from kernelopt_bot.verify.verdict import GateResult

DEFAULT_SEEDS = (0, 1, 2)


class InfrastructureFailure(Exception):
    """Our side failed while a config's gates ran (out of memory): no verdict on the config."""
ACCURACY_FACTOR = 10.0  # as gate 3 for modules: less accurate in substance means 10x the original's error


def check_config_static(launch: KernelLaunch, config: dict[str, Any]) -> GateResult:
    """Gate 1 for a config of ``launch``'s kernel."""
    unknown = sorted(k for k in config if k not in launch.arg_names and k not in LAUNCH_OPTIONS)
    if unknown:
        return GateResult.fail("static", f"config key(s) {unknown} are neither parameters of {launch.name} "
                                         f"nor launch options")
    for key, value in config.items():
        if key == "num_warps" and not (isinstance(value, int) and not isinstance(value, bool)
                                       and value in (1, 2, 4, 8, 16, 32)):
            return GateResult.fail("static", f"num_warps={value!r} is not a power of two between 1 and 32")
        if key == "num_stages" and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 8):
            return GateResult.fail("static", f"num_stages={value!r} must be an int between 1 and 8")
        if key not in LAUNCH_OPTIONS and not (isinstance(value, bool) or (isinstance(value, int) and value > 0)):
            return GateResult.fail("static", f"{key}={value!r} must be a positive integer or a boolean")
    return GateResult.ok("static", "config keys and values are the kernel's")


def check_helion_static(target: HelionTarget, config: dict[str, Any]) -> GateResult:
    """Gate 1 for a Helion config: inside the kernel's config space, and Helion generates its
    Triton code."""
    import helion

    try:
        bound = target.bound()
        made = normalized(bound, config)
        bound.to_triton_code(helion.Config(**made))
    except Exception as exc:  # noqa: BLE001 - Helion's own refusal is the verdict
        return GateResult.fail("static", f"Helion does not take this config: {one_line(exc)}")
    return GateResult.ok("static", "a config of the kernel's space; Helion generates its code")


def check_config_outputs(target: KernelTarget, kernel: str, config: dict[str, Any],
                         original: dict[str, Any], seeds: tuple[int, ...] = DEFAULT_SEEDS) -> list[GateResult]:
    """Gates 2 and 3: the target with ``kernel`` run with ``config`` against it with ``original``
    (the config the kernel ran), seed by seed, and against ``reference`` where the file has one
    (on the same runs: each seed's two runs serve both gates)."""
    worst_rel = 0.0
    model: GateResult | None = None  # gate 3's verdict, once one seed decided it
    if target.reference is None:
        model = GateResult.not_run("model", "the target file has no reference(): compared with the original only")
    for seed in seeds:
        try:
            ours = flatten_outputs(target.run(seed, {kernel: config}))
        except Exception as exc:  # the candidate's run failed: its verdict, unless it was ours
            if is_out_of_memory(exc):
                raise InfrastructureFailure(f"out of memory running the target (seed {seed}): {one_line(exc)}") from exc
            return [GateResult.fail("correctness", f"the target failed with this config (seed {seed}): {one_line(exc)}")]
        theirs = flatten_outputs(target.run(seed, {kernel: original}))
        if len(ours) != len(theirs) or not ours:
            return [GateResult.fail("correctness", f"the target returned {len(ours)} tensor(s) with this config "
                                                   f"and {len(theirs)} with the original (seed {seed})")]
        for i, (a, b) in enumerate(zip(ours, theirs)):
            verdict = compare(a, b, what=f"output {i}")
            if not verdict.ok:
                return [GateResult.fail("correctness", f"{verdict.reason} (seed {seed})")]
            if b.is_floating_point():
                worst_rel = max(worst_rel, relative_error(a, b))
        if model is None:
            model = _against_reference(target, seed, ours, theirs)
    correctness = GateResult.ok("correctness", f"same outputs as the original config on {len(seeds)} seeds",
                                rel_norm_err=worst_rel)
    return [correctness, model or GateResult.ok(
        "model", f"as accurate as the original against reference() in float64 on {len(seeds)} seeds")]


def _against_reference(target: KernelTarget, seed: int, ours: list[torch.Tensor],
                       theirs: list[torch.Tensor]) -> GateResult | None:
    """Gate 3 on one seed's runs: a verdict when this seed decides it (a failure, or a reference
    that cannot run), None when it passed here."""
    assert target.reference is not None
    inputs = target.make_inputs(seed)
    wide = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)
    try:
        exact = flatten_outputs(target.reference(*wide))
    except Exception as exc:  # noqa: BLE001 - the user's reference failing is no verdict on the config
        return GateResult.not_run("model", f"reference() failed in float64: {one_line(exc)}")
    for i, (a, b, r) in enumerate(zip(ours, theirs, exact)):
        if not (a.is_floating_point() and r.is_floating_point()):
            continue
        err_a, err_b = relative_error(a.double(), r.to(a.device)), relative_error(b.double(), r.to(b.device))
        tol = torch.finfo(a.dtype).eps * 16
        if err_a > max(ACCURACY_FACTOR * err_b, tol):
            return GateResult.fail("model", f"output {i}: error against float64 {err_a:.3g} > "
                                            f"{ACCURACY_FACTOR:g} x the original's {err_b:.3g} (seed {seed})")
    return None
