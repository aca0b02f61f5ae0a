"""Gate 3: the re-stitched model against the eager model, with a float64 referee.

The packed model (candidate installed) and the compiler baseline run as arms on fresh inputs: each
in its own process (an :class:`~kernelopt_bot.harness.model_arms.ModelArms`'s), or, for a trusted candidate,
the engine's compiled model with the candidate swapped in (:mod:`kernelopt_bot.harness.swap_arm`). The packed outputs are
first held to a tight tolerance against eager. If that fails, a float64 eager run decides: the
candidate may reorder floating-point work, so it is accepted when its error against float64 is
within ``factor`` times the compiler baseline's own error against float64 (never below the dtype's
rounding unit) and its mean signed error against float64 (a bias the norm hides: +0.6% on
every element) is within twice the compiler's or what unbiased rounding allows. Both errors are
recorded either way. The eager outputs and the float64 referee are computed once per seed and
kept in host memory (:mod:`kernelopt_bot.verify.references`), the referee run on the host where it
has room: no GPU memory of the engine's is held for them beside the arms.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.arm_process import Arm, ArmError, failed_on_our_side
from kernelopt_bot.harness.failures import (
    InfrastructureFailure,
    OutOfWallTime,
    is_out_of_memory,
    past_deadline,
)
from kernelopt_bot.harness.memory import float64_chunks, free_memory
from kernelopt_bot.targets import Target
from kernelopt_bot.verify.references import ModelReferences, references_of
from kernelopt_bot.verify.tolerance import (
    MODEL_TIGHT_TOLERANCE,
    UNIT_ROUNDOFF,
    compare,
    relative_error,
    systematic_bias,
)
from kernelopt_bot.verify.verdict import GateResult

DEFAULT_MODEL_SEEDS = (101, 102)


def _same_nan_pattern(a: torch.Tensor, b: torch.Tensor, device: str) -> bool:
    """NaN in the same places, a piece at a time on ``device`` (the arms' outputs come through a
    pipe on the CPU; a whole output's masks are not needed at once)."""
    return all(torch.equal(torch.isnan(x), torch.isnan(y)) for x, y in float64_chunks(a, b, device=device))


def check_model(target: Target, baseline: Arm, candidate: Arm, kernel_name: str | None, *,
                seeds: tuple[int, ...] = DEFAULT_MODEL_SEEDS, factor: float = 10.0,
                timeout_s: float = 600.0, ends_at: float | None = None) -> GateResult:
    """Gate 3 on arms that are already compiled: ``candidate`` has the pack installed (or, with
    ``kernel_name`` None, is a whole-model variant such as another compile mode). No seed starts
    past ``ends_at`` (the run's wall deadline, ``time.time()``): :class:`OutOfWallTime`, ours."""
    numbers: dict[str, Any] = {"err_candidate_f64": None, "err_baseline_f64": None, "tight": True}
    references = references_of(target)
    if kernel_name is not None and kernel_name not in candidate.info.get("applied", []):
        return GateResult.fail("model", f"the pack did not apply to {kernel_name} in the compiled model "
                                        f"(applied: {candidate.info.get('applied') or 'none'})")
    try:
        for done, seed in enumerate(seeds):
            if past_deadline(ends_at):
                raise OutOfWallTime(f"the wall budget ran out during gate 3, after {done} of {len(seeds)} input sets")
            # The arms' outputs stay where they arrive (the CPU, for a process arm), and the
            # references are kept in host memory: the comparisons move both to the target's device
            # a piece at a time.
            packed = candidate.request("outputs", seed, timeout_s=timeout_s)
            verdict = _check_seed(target, references, seed, packed,
                                  lambda s=seed: baseline.request("outputs", s, timeout_s=timeout_s),
                                  factor, numbers, _arm_mb(baseline))
            if verdict is not None:
                return verdict
    except ArmError as exc:
        if failed_on_our_side(exc):
            raise InfrastructureFailure(f"model run: {exc}") from exc
        return GateResult.fail("model", f"model run failed: {exc}")
    except Exception as exc:
        # This process ran out (the eager model, the float64 referee, a comparison): ours, never a
        # verdict. The caller frees memory and tries once more (the cascade restarts the arms).
        if is_out_of_memory(exc):
            raise InfrastructureFailure(f"out of memory checking the model in the engine: {one_line(exc)}") from exc
        raise
    finally:
        free_memory(target.device)  # the comparisons' memory back to the arms and the sandbox
    how = "matched eager at tight tolerance" if numbers["tight"] else (
        f"float64 fallback: candidate error {numbers['err_candidate_f64']:.3g} <= {factor:g} x "
        f"baseline error {numbers['err_baseline_f64']:.3g}")
    return GateResult.ok("model", f"{how} on {len(seeds)} fresh input sets", **numbers)


def _check_seed(target: Target, references: ModelReferences, seed: int, packed: list[torch.Tensor],
                baseline_outputs: Any, factor: float,
                numbers: dict[str, Any], arm_mb: float | None = None) -> GateResult | None:
    """None when this seed passes; otherwise the failing result. Updates ``numbers``. ``arm_mb``:
    what the baseline arm held at its peak, where it said (the referee's room on the host)."""
    eager = references.eager(seed)
    if len(packed) != len(eager):
        return GateResult.fail("model", f"{len(packed)} outputs, eager has {len(eager)}")
    for i, (p, e) in enumerate(zip(packed, eager)):
        if p.dtype != e.dtype or p.shape != e.shape:
            return GateResult.fail("model", f"{target.output_label(i)}: {p.dtype}{tuple(p.shape)} but eager gives "
                                            f"{e.dtype}{tuple(e.shape)}")
    on = target.device
    if all(compare(p, e, MODEL_TIGHT_TOLERANCE, target.output_label(i), on=on).ok
           for i, (p, e) in enumerate(zip(packed, eager))):
        return None
    numbers["tight"] = False
    base = baseline_outputs()
    try:
        ref64 = references.float64(seed, arm_mb)
    except Exception as exc:
        if is_out_of_memory(exc):
            raise  # ours, not the candidate's: check_model reports it as such
        return GateResult.fail("model", f"tight tolerance failed and the float64 reference could not run: {exc}")
    floor = UNIT_ROUNDOFF.get(target.dtype, UNIT_ROUNDOFF[torch.float32])
    for i, (p, b, r) in enumerate(zip(packed, base, ref64)):
        if not p.is_floating_point():
            if not torch.equal(p.to(target.device), b.to(target.device)):
                return GateResult.fail("model", f"{target.output_label(i)}: integer results differ from the compiler's")
            continue
        if not _same_nan_pattern(p, b, target.device):
            return GateResult.fail("model", f"{target.output_label(i)}: NaN where the compiler's model has none (seed {seed})")
        err_c, err_b = relative_error(p, r, on=on), relative_error(b, r, on=on)
        numbers["err_candidate_f64"] = max(err_c, numbers["err_candidate_f64"] or 0.0)
        numbers["err_baseline_f64"] = max(err_b, numbers["err_baseline_f64"] or 0.0)
        if not err_c <= factor * max(err_b, floor):
            return GateResult.fail(
                "model", f"{target.output_label(i)}: error against float64 {err_c:.3g} > {factor:g} x compiler's "
                         f"{max(err_b, floor):.3g} (seed {seed}): less accurate in substance", **numbers)
        bias_c, bias_b = systematic_bias(p, r, p.dtype, on=on), systematic_bias(b, r, p.dtype, on=on)
        allowed = max(BIAS_BASELINE_FACTOR * abs(bias_b.signed), bias_c.bound)
        numbers["bias_candidate_f64"], numbers["bias_baseline_f64"] = bias_c.signed, bias_b.signed
        if abs(bias_c.signed) > allowed:
            return GateResult.fail(
                "model", f"{target.output_label(i)}: systematic error against float64: mean signed relative error "
                         f"{bias_c.signed:+.3g}, allowed {allowed:.3g} (compiler's {bias_b.signed:+.3g}; "
                         f"seed {seed})", **numbers)
    return None


def _arm_mb(arm: Any) -> float | None:
    """What the compiled model held on the GPU at its peak, as the baseline arm said (``gpu_mb``)."""
    value = getattr(arm, "info", {}).get("gpu_mb")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


# A candidate's mean signed error against float64 may be this many times the compiler's own.
BIAS_BASELINE_FACTOR = 2.0
