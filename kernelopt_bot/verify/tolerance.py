"""Comparing a candidate's tensors with the reference's: dtype-aware, elementwise and on the norm.

Elementwise checks alone let a kernel that is slightly wrong everywhere through; norm checks alone
let a kernel that is badly wrong in a few places through. We do both, and NaN/inf must sit exactly
where the reference has them (an output pre-filled with NaN that the candidate never wrote shows up
here). On inputs seeded with infinities and NaN, or wide enough to overflow (``specials``; which
distributions: ``correctness.OVERFLOWING_DISTRIBUTIONS``), where a value is not finite is checked,
not which non-finite value it is: IEEE arithmetic on infinities depends on the order of the
operations (a Welford lane whose first element is inf gets m2 = inf * 0 = NaN, one that meets it
later m2 = inf; partial sums that overflowed to both signs meet as NaN in one order and stay inf in
another), so two honest launch configs of one reduction give NaN and inf on the same element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelopt_bot.harness import memory


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float  # relative to the largest finite |reference| value
    norm: float  # bound on ||candidate - reference|| / ||reference||


# Kernel level (gate 2): loose enough for reordered floating-point sums, tight enough that zeros,
# constants and a 1% scale error fail. Lower precision in substance is gate 3's job (float64).
KERNEL_TOLERANCE = {
    torch.float32: Tolerance(rtol=1e-3, atol=1e-4, norm=1e-3),
    torch.float64: Tolerance(rtol=1e-7, atol=1e-9, norm=1e-7),
    torch.bfloat16: Tolerance(rtol=2e-2, atol=1e-2, norm=1e-2),
    torch.float16: Tolerance(rtol=5e-3, atol=1e-3, norm=5e-3),
}

# Model level (gate 3), before the float64 fallback decides.
MODEL_TIGHT_TOLERANCE = {
    torch.float32: Tolerance(rtol=1e-5, atol=1e-6, norm=1e-6),
    torch.float64: Tolerance(rtol=1e-10, atol=1e-12, norm=1e-10),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-3, norm=4e-3),
    torch.float16: Tolerance(rtol=1e-3, atol=1e-4, norm=5e-4),
}

# Rounding unit per dtype: the smallest baseline error the float64 comparison assumes.
UNIT_ROUNDOFF = {
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
    torch.bfloat16: 2.0**-8,
    torch.float16: 2.0**-11,
}


@dataclass
class Comparison:
    ok: bool
    reason: str
    numbers: dict[str, Any]


def _scale(ref: torch.Tensor, on: torch.device | str | None = None) -> float:
    """The largest finite ``|ref|`` (0 when there is none), a piece at a time on ``on`` (default:
    where ``ref`` is)."""
    worst = 0.0
    for (piece,) in memory.flat_pieces(ref):
        piece = piece if on is None else piece.to(on)
        finite = piece[torch.isfinite(piece)]
        if finite.numel():
            worst = max(worst, float(finite.abs().max()))
    return worst


def _norm(pieces: list[float]) -> float:
    """The 2-norm of a vector from its pieces' 2-norms: exactly that norm for one piece, scaled by
    the largest otherwise (no overflow in the squares); NaN or inf when a piece is."""
    if len(pieces) == 1:
        return pieces[0]
    if any(math.isnan(x) for x in pieces):
        return math.nan
    top = max(pieces, default=0.0)
    if top == 0.0 or math.isinf(top):
        return top
    return top * math.sqrt(math.fsum((x / top) ** 2 for x in pieces))


def _beyond(err: torch.Tensor, reference: torch.Tensor, atol_abs: float, rtol: float) -> torch.Tensor:
    """The elementwise rule both :func:`compare` and :func:`disagreeing` apply: where ``err``
    (``|value - reference|``) exceeds ``atol_abs + rtol * |reference|``."""
    return err > atol_abs + rtol * reference.abs()


@dataclass
class _Sums:
    """What :func:`compare` needs from every element, added up a piece at a time so the float64
    temporaries stay bounded (:func:`~kernelopt_bot.harness.memory.float64_chunks`) however large
    the output."""

    atol_abs: float
    rtol: float
    dtype: torch.dtype
    specials: bool = False  # NaN and inf interchangeable where both sides are not finite
    stray_nan: int = 0
    missing_nan: int = 0
    infinities_differ: bool = False
    mismatches: int = 0
    max_abs_err: float | None = None
    ref_norms: list[float] = field(default_factory=list)
    err_norms: list[float] = field(default_factory=list)
    bias: _BiasSums = field(default_factory=lambda: _BiasSums())
    flushed: int = 0
    normal: int = 0

    def add(self, c: torch.Tensor, r: torch.Tensor) -> None:
        nan_c, nan_r = torch.isnan(c), torch.isnan(r)
        inf_c, inf_r = torch.isinf(c), torch.isinf(r)
        if self.specials:  # only finite against not finite decides; two infinities keep their signs
            finite_c, finite_r = ~(nan_c | inf_c), ~(nan_r | inf_r)
            self.stray_nan += int((nan_c & finite_r).sum())
            self.missing_nan += int((nan_r & finite_c).sum())
            both = inf_c & inf_r
            if bool((inf_c & finite_r).any() or (inf_r & finite_c).any()) or not torch.equal(c[both], r[both]):
                self.infinities_differ = True
        else:
            self.stray_nan += int((nan_c & ~nan_r).sum())
            self.missing_nan += int((nan_r & ~nan_c).sum())
            if not torch.equal(inf_c, inf_r) or not torch.equal(c[inf_c], r[inf_r]):
                self.infinities_differ = True
        if self.stray_nan or self.missing_nan or self.infinities_differ:
            return  # the verdict is decided; the statistics below are never reported
        finite = ~(nan_r | inf_r)
        c, r = c[finite], r[finite]
        err = (c - r).abs()
        self.mismatches += int(_beyond(err, r, self.atol_abs, self.rtol).sum())
        if err.numel():
            worst = float(err.max())
            self.max_abs_err = worst if self.max_abs_err is None else max(self.max_abs_err, worst)
        self.ref_norms.append(float(r.norm()))
        self.err_norms.append(float((c - r).norm()))
        self.bias.add(c, r)
        flushed, normal = flushed_to_zero(c, r, self.dtype)
        self.flushed += flushed
        self.normal += normal


def compare(candidate: torch.Tensor, reference: torch.Tensor,
            table: dict[torch.dtype, Tolerance] | None = None, what: str = "output", *,
            cancelling: bool = False, specials: bool = False, skip: torch.Tensor | None = None,
            on: torch.device | str | None = None) -> Comparison:
    """Is ``candidate`` the same tensor as ``reference`` within the dtype's tolerance?

    ``cancelling``: the inputs were built to cancel (equal or zero rows, a large common offset).
    The elementwise and norm rules hold as always; the flushed-to-zero and systematic-error rules
    do not apply, because both assume the reference is accurate to a few rounding units, and there
    it is not: its small values are rounding noise (an honest reordering may compute them as
    exactly 0), and a variance over values offset by 1e3 loses about six digits in float32, so
    two summation orders differ by a consistent 1e-6-1e-5 (an honest layer norm's rstd on the
    H200: -5e-6 against the compiler's, in every row).

    ``specials``: the inputs were seeded with infinities and NaN, or are wide enough to overflow
    float32. A NaN against an infinity is then accepted (the order of operations decides between
    them: on an H100 every launch config of a split ``var_mean``, max-autotune's own included, gave
    NaN where the compiler's kernel gave inf on a few elements, 12-07); a non-finite value where
    the reference is finite, or the reverse, still fails, and so do two infinities of opposite sign.

    ``skip``: a flat mask of elements left out of every rule (gate 2's elements where the
    compiler's own kernel disagrees with itself and the candidate gives what one of its configs
    gives), dropped a piece at a time.

    The float64 work runs on ``on`` (default: the reference's device) in pieces of at most
    :data:`~kernelopt_bot.harness.memory.CHUNK_ELEMENTS` elements (a tensor on another device, a
    reference kept in host memory, moves a piece at a time), so its extra memory is bounded
    whatever the output's size; the statistics and messages are those of one pass over the whole
    tensor."""
    if candidate.shape != reference.shape:
        return Comparison(False, f"{what}: shape {tuple(candidate.shape)} != {tuple(reference.shape)}", {})
    if candidate.dtype != reference.dtype:
        return Comparison(False, f"{what}: dtype {candidate.dtype} != {reference.dtype}", {})
    n = reference.numel()
    if n == 0:
        return Comparison(True, "empty", {})
    if not reference.is_floating_point():
        where = reference.device if on is None else torch.device(on)
        differ = (candidate.to(where) != reference.to(where)).reshape(-1)
        if skip is not None:
            differ &= ~skip.to(differ.device)
        wrong = int(differ.sum())
        return Comparison(wrong == 0, f"{what}: {wrong} of {n} elements differ" if wrong else "exact",
                          {"mismatches": wrong})
    tol = (table or KERNEL_TOLERANCE).get(reference.dtype, KERNEL_TOLERANCE[torch.float32])
    sums = _Sums(tol.atol * _scale(reference, on), tol.rtol, reference.dtype, specials)
    skips = memory.flat_pieces(skip) if skip is not None else None
    for c, r in memory.float64_chunks(candidate, reference, device=on):
        if skips is not None:
            kept = ~next(skips)[0].to(c.device)
            c, r = c[kept], r[kept]
        sums.add(c, r)
    if sums.stray_nan or sums.missing_nan:
        stray, missing = sums.stray_nan, sums.missing_nan
        return Comparison(False, f"{what}: NaN pattern differs ({stray} NaN where the reference has "
                                 f"values, e.g. unwritten elements; {missing} missing)",
                          {"stray_nan": stray, "missing_nan": missing})
    if sums.infinities_differ:
        return Comparison(False, f"{what}: infinities differ", {})
    mismatches = sums.mismatches
    ref_norm, err_norm = _norm(sums.ref_norms), _norm(sums.err_norms)
    rel_norm = err_norm / ref_norm if ref_norm > 0 else err_norm
    numbers = {"max_abs_err": sums.max_abs_err or 0.0, "rel_norm_err": rel_norm,
               "mismatches": mismatches, "elements": n}
    if mismatches:
        return Comparison(False, f"{what}: {mismatches} of {n} elements outside rtol={tol.rtol:g}, "
                                 f"atol={tol.atol:g}*max|ref| (max abs err {numbers['max_abs_err']:.3g})", numbers)
    if rel_norm > tol.norm:
        return Comparison(False, f"{what}: relative norm error {rel_norm:.3g} > {tol.norm:g}", numbers)
    bias = sums.bias.result(reference.dtype)
    numbers.update(bias_signed=bias.signed, bias_bound=bias.bound)
    if not cancelling and not bias.ok:
        return Comparison(False, f"{what}: systematic error: mean signed relative error {bias.signed:+.3g} "
                                 f"exceeds {bias.bound:.3g} (rounding of {reference.dtype}, {COMPUTE_BIAS_UNITS:g} float32 "
                                 "rounding units, and 4 x the spread an unbiased error would have)", numbers)
    flushed, normal = sums.flushed, sums.normal
    numbers.update(flushed_to_zero=flushed)
    if not cancelling and flushed > FLUSH_FRACTION * normal and flushed > 1:
        return Comparison(False, f"{what}: {flushed} of {normal} normal nonzero reference values are exactly "
                                 "0 in the candidate (small values flushed to zero)", numbers)
    return Comparison(True, "within tolerance", numbers)


def disagreeing(first: torch.Tensor, second: torch.Tensor,
                table: dict[torch.dtype, Tolerance] | None = None) -> torch.Tensor:
    """A flat mask (on ``second``'s device) of the elements where two results disagree as gate 2
    judges inputs that overflow (:func:`compare`'s ``specials``): one finite and the other not,
    two infinities of opposite sign, or, both finite, a gap beyond the dtype's elementwise
    tolerance (``atol`` scaled by the largest finite ``|second|``). NaN against an infinity agrees.
    Gate 2 asks it of the compiler's own kernel at two launch configs (where those disagree, the
    inputs decide nothing) and of the candidate against the second. Filled a piece at a time:
    beside the mask itself, the float64 pieces are the only temporaries."""
    if first.shape != second.shape:
        raise ValueError(f"shape {tuple(first.shape)} != {tuple(second.shape)}")
    if not second.is_floating_point():
        return (first.to(second.device) != second).reshape(-1)
    tol = (table or KERNEL_TOLERANCE).get(second.dtype, KERNEL_TOLERANCE[torch.float32])
    atol_abs = tol.atol * _scale(second)
    mask = torch.empty(second.numel(), dtype=torch.bool, device=second.device)
    start = 0
    for a, b in memory.float64_chunks(first, second):
        finite_a, finite_b = torch.isfinite(a), torch.isfinite(b)
        opposite = torch.isinf(a) & torch.isinf(b) & (a != b)
        apart = finite_a & finite_b & _beyond((a - b).abs(), b, atol_abs, tol.rtol)
        mask[start:start + a.numel()] = (finite_a != finite_b) | opposite | apart
        start += a.numel()
    return mask


# Where the reference holds a normal nonzero value, a candidate may give exactly 0 on at most this
# fraction of elements (cancellation can do that honestly; flushing small values does it widely).
FLUSH_FRACTION = 0.01
BIAS_SIGMAS = 4.0  # how far beyond an unbiased error's spread a mean signed error may go
# Honest kernels compute in float32 and may be biased by a few of its rounding units against the
# compiler's kernel: another exp (exp2 of x*log2(e)), another summation order in a normalizer. On
# an H200 an honest softmax with exp via exp2 measured +6e-8 (one unit) over 512 outputs. Cheats
# the bias test exists for are orders of magnitude above this: fp16 rounding 5e-5, a bf16 result
# pushed up by 0.6%.
COMPUTE_BIAS_UNITS = 8.0


@dataclass(frozen=True)
class Bias:
    """The mean signed relative error of a result and the most an honest one may have."""

    signed: float
    bound: float

    @property
    def ok(self) -> bool:
        return abs(self.signed) <= self.bound


@dataclass
class _BiasSums:
    """:func:`systematic_bias`'s sums over finite nonzero reference elements, a piece at a time."""

    signed: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    spread: list[float] = field(default_factory=list)

    def add(self, v: torch.Tensor, r: torch.Tensor) -> None:
        keep = torch.isfinite(v) & torch.isfinite(r) & (r != 0)
        v, r = v[keep], r[keep]
        diff = v - r
        self.signed.append(float((diff * r.sign()).sum()))
        self.total.append(float(r.abs().sum()))
        self.spread.append(float(diff.norm()))

    def result(self, dtype: torch.dtype) -> Bias:
        total = sum(self.total)
        if total == 0.0 or not math.isfinite(total):
            return Bias(0.0, math.inf)
        signed = sum(self.signed) / total
        spread = _norm(self.spread) / total
        rounding = 0.5 * UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF[torch.float32])
        compute = COMPUTE_BIAS_UNITS * UNIT_ROUNDOFF[torch.float32]
        return Bias(signed, rounding + compute + BIAS_SIGMAS * spread)


def systematic_bias(value: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype, *,
                    on: torch.device | str | None = None) -> Bias:
    """``sum((value - ref) * sign(ref)) / sum(|ref|)`` over finite nonzero reference elements: an
    error that pushes results away from (or toward) zero everywhere adds up here, while honest
    rounding and reordering errors, of either sign, cancel. The bound is half the dtype's rounding
    unit, plus ``COMPUTE_BIAS_UNITS`` of float32's (the precision kernels compute in), plus
    ``BIAS_SIGMAS`` times what unbiased errors of the observed size would average to
    (``||value - ref|| / sum|ref|``), so it shrinks with the number of elements. In float64, a
    piece at a time (:func:`~kernelopt_bot.harness.memory.float64_chunks`), on ``on`` (default:
    the reference's device)."""
    sums = _BiasSums()
    for v, r in memory.float64_chunks(value, reference, device=on):
        sums.add(v, r)
    return sums.result(dtype)


def flushed_to_zero(value: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> tuple[int, int]:
    """(elements exactly 0 in ``value`` where ``reference`` is a normal nonzero number, such
    reference elements in all)."""
    tiny = torch.finfo(dtype).tiny if dtype.is_floating_point else 0.0
    normal = torch.isfinite(reference) & (reference.abs() >= tiny)
    return int((normal & (value == 0)).sum()), int(normal.sum())


def relative_error(value: torch.Tensor, reference: torch.Tensor, *, on: torch.device | str | None = None) -> float:
    """||value - reference|| / ||reference|| over the reference's finite elements, in float64, a
    piece at a time (:func:`~kernelopt_bot.harness.memory.float64_chunks`), on ``on`` (default: the
    reference's device)."""
    ref_norms: list[float] = []
    diff_norms: list[float] = []
    for v, r in memory.float64_chunks(value, reference, device=on):
        finite = torch.isfinite(r)
        r, v = r[finite], v[finite]
        ref_norms.append(float(r.norm()))
        diff_norms.append(float((v - r).norm()))
    if not ref_norms:
        return 0.0
    denom, diff = _norm(ref_norms), _norm(diff_norms)
    if not math.isfinite(diff):
        return float("inf")
    return diff / denom if denom > 0 else diff
