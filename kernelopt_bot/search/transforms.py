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


TRANSFORMS: tuple[Callable[[str], str | None], ...] = (
    pipelined_reduction_loop(2),
    pipelined_reduction_loop(3),
    flip_eviction,
    drop_eviction_hints,
)


def applicable(source: str) -> list[tuple[str, str]]:
    """(name, new source) for every transformation that applies to ``source``."""
    out = []
    for transform in TRANSFORMS:
        new = transform(source)
        if new is not None and new != source:
            out.append((transform.__name__, new))
    return out
