"""The statistics every report shares, in one place: the suite's and the bot's geomeans, the
harness's noise floor, the suite's medians. Standard library only (the publish stage imports it)."""

from __future__ import annotations

import math
from collections.abc import Iterable

# The share of rounds whose baseline-against-baseline gap the noise floor covers (nearest rank).
NOISE_QUANTILE = 0.8


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive, finite values (None when there are none)."""
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def upper_median(values: Iterable[float]) -> float | None:
    """The middle value (of an even count, the upper of the two middle ones): always one that was
    measured, None when there are none."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def noise_floor(ratios: list[float]) -> float | None:
    """How far the baseline is from itself: the gap |baseline / repeat - 1| that 80% of the rounds
    stay within: of 10 rounds the third-largest gap, of 3 to 5 rounds the second-largest (a slow
    model's comparison takes 3: ``harness.bench.rounds_within``; by the rank alone its floor would
    be its one worst round).

    Why not the largest: the speedup is a median over rounds, so one round in which the machine
    hiccuped (a repeat arm at 0.175 ms where the other nine took 0.024 ms, seen on the H200) does not
    move it, but it set the old floor to 86% and made every speedup "within the noise". The floor
    still reads the spread of most rounds, and gate 4 keeps its own rule that the candidate is
    faster in every round."""
    gaps = sorted(abs(r - 1.0) for r in ratios)
    if not gaps:
        return None
    rank = math.ceil(NOISE_QUANTILE * len(gaps))
    if len(gaps) >= 3:
        rank = min(rank, len(gaps) - 1)
    return gaps[max(0, rank - 1)]
