"""The statistics every report shares, in one place: the suite's and the bot's geomeans, the
harness's noise floor, the suite's medians. Standard library only (the publish stage imports it)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence

# The share of resampled measurements whose baseline-against-baseline gap the noise floor covers,
# and how many are drawn (noise_floor).
NOISE_QUANTILE = 0.8
NOISE_RESAMPLES = 400


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


def ratio_median(ratios: Sequence[float]) -> float | None:
    """The median of positive ratios, taken on their logarithms: of an even count, the geometric
    mean of the two middle ones. Their arithmetic mean would lean above 1 under noise that is
    symmetric in ratio (1.25 and 0.8 would read 1.025 instead of 1)."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    return math.exp(statistics.median(logs)) if logs else None


def noise_floor(rounds: Sequence[Sequence[float]]) -> float | None:
    """How far the speedup's own estimator puts the baseline from itself: ``rounds`` holds, for each
    round, the ratios baseline / repeat of its passes (a pass times every arm once, back to back).
    The estimator is the median of all such ratios (:func:`ratio_median`); the floor is the gap |median - 1| that
    NOISE_QUANTILE of the measurements made of the same rounds, drawn again with replacement
    (NOISE_RESAMPLES times, the same draws for the same rounds), stay within.

    Why rounds are drawn whole: passes of one round share its inputs and the machine's state of
    that moment, so drawing passes alone would count correlated passes as independent.
    Why the median of paired passes and not the ratio of the arms' medians: on a launch-bound
    network the host switches between states (on an H100 a ViT took 0.87 ms a call in some passes
    and 1.55 ms in the next). Within most passes the arms share the state; the passes where it
    changed midway are outvoted by the median. The ratio of medians read a 7% gap between two
    baselines where the paired passes read 0.4%. Why not the largest gap: rounds in which the
    machine hiccuped (a repeat arm at 0.175 ms where the other nine took 0.024 ms, on an H200) move
    the median only once they are about half of the draws (three of ten rarely are; four often),
    and gate 4 keeps its own rule that the candidate is faster in every round. A process whose
    every pass is slower (an offset between processes) moves every draw alike: it stays in the
    floor. What this floor is: the spread of the speedup's estimator over the rounds, not the
    spread of one round, so it narrows as rounds are added."""
    kept = [list(r) for r in rounds if r]
    if not kept:
        return None
    draw = random.Random(len(kept))  # fixed: the same rounds give the same floor
    gaps = sorted(abs((ratio_median([x for _ in kept for x in kept[draw.randrange(len(kept))]]) or 1.0) - 1.0)
                  for _ in range(NOISE_RESAMPLES))
    return gaps[math.ceil(NOISE_QUANTILE * NOISE_RESAMPLES) - 1]
