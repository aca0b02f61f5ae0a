"""Source transformations of our own: strategy changes a launch config cannot express.

Each takes the compiler's kernel source and returns new source (or None when it does not apply).
They keep the kernel's name, parameters, mutation contract and heuristics decorator, so every
result is an ordinary candidate for the gates; none is trusted because we wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_LOOP = re.compile(r"^(?P<indent>\s*)for (?P<var>r\d_offset) in (?:tl\.)?range\((?P<args>[^)=]*)\):\s*$", re.M)
_EVICT = re.compile(r"eviction_policy='(evict_first|evict_last)'")


def pipelined_reduction_loop(stages: int) -> Callable[[str], str | None]:
    """Looped reductions: iterate with ``tl.range(..., num_stages=N)`` so loads of the next
    chunk are issued while the current one is reduced (software pipelining)."""

    def transform(source: str) -> str | None:
        if not _LOOP.search(source):
            return None
        return _LOOP.sub(lambda m: f"{m['indent']}for {m['var']} in tl.range({m['args']}, num_stages={stages}):",
                         source)

    transform.__name__ = f"pipelined_loop_{stages}"
    return transform


def flip_eviction(source: str) -> str | None:
    """Swap the cache-eviction hints: data Inductor streams once (evict_first) is kept, and
    reused data (evict_last) is streamed. Wins when Inductor's reuse guess is wrong for the shape."""
    if not _EVICT.search(source):
        return None
    return _EVICT.sub(lambda m: "eviction_policy='evict_last'" if m[1] == "evict_first"
                      else "eviction_policy='evict_first'", source)


def drop_eviction_hints(source: str) -> str | None:
    """Remove the eviction hints altogether and let the hardware's default policy decide."""
    new = re.sub(r",\s*eviction_policy='evict_(first|last)'", "", source)
    return new if new != source else None


_WELFORD_STEP = re.compile(
    r"^(?P<indent>[ \t]*)(?P<acc>\w+)_mean_next, (?P=acc)_m2_next, (?P=acc)_weight_next = "
    r"triton_helpers\.welford_reduce\(\s*(?P<value>\w+),\s*(?P=acc)_mean,\s*(?P=acc)_m2,\s*(?P=acc)_weight,"
    r"[^()\n]*(?:\n[^()\n]*)?\)[ \t]*$", re.M)


def shifted_sums_for_welford(source: str) -> str | None:
    """Looped mean/variance reductions (layer norm, group norm, var, std): Inductor accumulates
    each lane with Welford's update, one division per element (``mean += delta / count``). This
    accumulates the lane's sum and sum of squares instead, shifted by the lane's first value so
    that a large mean does not cancel the variance away (the shifted-data algorithm), with no
    division in the loop; the lanes' (mean, M2, count) are formed once after it and combined by
    Inductor's own ``triton_helpers.welford``, as before. Rounding differs from Welford's, which
    gates 2 and 3 judge like any candidate's."""
    accumulators = [step["acc"] for step in _WELFORD_STEP.finditer(source)]
    if not accumulators or any(f"{acc}_shift" in source for acc in accumulators):
        return None
    new = source
    for acc in accumulators:
        step = next(m for m in _WELFORD_STEP.finditer(new) if m["acc"] == acc)
        init = re.search(rf"^(?P<indent>[ \t]*){acc}_mean = (?P<zeros>tl\.zeros\([^\n]*\))[ \t]*$", new, re.M)
        combine = re.search(rf"^(?P<indent>[ \t]*)\w+, \w+, \w+ = triton_helpers\.welford\("
                            rf"{acc}_mean, {acc}_m2, {acc}_weight, \d+\)[ \t]*$", new, re.M)
        if init is None or combine is None or not init.end() < step.start() < step.end() < combine.start():
            return None
        indent, value, c = step["indent"], step["value"], combine["indent"]
        accumulate = "\n".join([
            f"{indent}{acc}_shift = tl.where({acc}_weight == 0, {value}, {acc}_shift)",
            # 0 for the lane's first value itself (an infinite one would give inf - inf = NaN)
            f"{indent}{acc}_delta = tl.where({acc}_weight == 0, 0.0, {value} - {acc}_shift)",
            f"{indent}{acc}_mean_next = {acc}_mean + {acc}_delta",
            f"{indent}{acc}_m2_next = {acc}_m2 + {acc}_delta * {acc}_delta",
            f"{indent}{acc}_weight_next = {acc}_weight + 1",
        ])
        # The lane's (sum, sum of squares, count) of shifted values into Welford's (mean, M2,
        # count); an empty lane is (0, 0, 0), which the combine weighs at nothing. M2's rounding
        # below zero is cut to zero; a NaN stays NaN (as Welford's would).
        finish = "\n".join([
            f"{c}{acc}_count = tl.where({acc}_weight == 0, 1.0, {acc}_weight)",
            f"{c}{acc}_m2 = {acc}_m2 - {acc}_mean * ({acc}_mean / {acc}_count)",
            f"{c}{acc}_m2 = tl.where(({acc}_weight == 0) | ({acc}_m2 < 0.0), 0.0, {acc}_m2)",
            f"{c}{acc}_mean = tl.where({acc}_weight == 0, 0.0, {acc}_shift + {acc}_mean / {acc}_count)",
        ])
        # Spliced from the last position back, so the earlier matches' offsets still hold.
        new = new[:combine.start()] + finish + "\n" + new[combine.start():]
        new = new[:step.start()] + accumulate + new[step.end():]
        new = new[:init.end()] + f"\n{init['indent']}{acc}_shift = {init['zeros']}" + new[init.end():]
    return new


TRANSFORMS: tuple[Callable[[str], str | None], ...] = (
    pipelined_reduction_loop(2),
    pipelined_reduction_loop(3),
    shifted_sums_for_welford,
    flip_eviction,
    drop_eviction_hints,
)


STACKED = "stacked_transforms"
# Transformations that are alternatives to each other: a stack takes the first of each group it
# is given (dropping the hints after flipping them is dropping them alone).
_EXCLUSIVE = {"pipelined_loop_2": "pipelining", "pipelined_loop_3": "pipelining",
              "flip_eviction": "eviction", "drop_eviction_hints": "eviction"}


def stack(source: str, names: list[str]) -> tuple[str, list[str]]:
    """``source`` with the named transformations applied one on another, in the order given;
    of alternatives (two pipelining depths, the two eviction rewrites) only the first, and one
    that no longer applies to what the earlier ones made is skipped. Returns the source and
    the names that applied."""
    by_name = {t.__name__: t for t in TRANSFORMS}
    applied: list[str] = []
    taken: set[str] = set()
    for name in names:
        group = _EXCLUSIVE.get(name, name)
        if group in taken:
            continue
        new = by_name[name](source) if name in by_name else None
        if new is not None and new != source:
            source, applied = new, [*applied, name]
            taken.add(group)
    return source, applied


def applicable(source: str) -> list[tuple[str, str]]:
    """(name, new source) for every transformation that applies to ``source``."""
    out = []
    for transform in TRANSFORMS:
        new = transform(source)
        if new is not None and new != source:
            out.append((transform.__name__, new))
    return out
