"""What else of ours waits while model arms are timed.

Issue 12 asks that nothing else run on the CPU or GPU while an arm is timed. The engine's own
sampler of the device's memory (:class:`~kernelopt_bot.harness.device_watch.DeviceMemoryWatch`)
woke five times a second and asked the driver for the free memory (``cudaMemGetInfo``), from a
thread that may land on the very core the arms launch from. On the H200 the launch-bound tiny_vit
measured a noise floor of 3.9% with ``kernelopt bench`` (no sampler) and 12.7% inside
``kernelopt optimize`` on the same machine. So the timed rounds of a comparison mark the process
as timing, and samplers skip their turn meanwhile; the reading after the rounds still sees what
the arms hold (their caching allocators keep it).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_timing = 0  # comparisons timing now, in this process (fleet jobs may time on several GPUs)


@contextlib.contextmanager
def arms_timing() -> Iterator[None]:
    """Within the block this process is timing arms (:func:`timing_now` is true)."""
    global _timing
    with _lock:
        _timing += 1
    try:
        yield
    finally:
        with _lock:
            _timing -= 1


@contextlib.contextmanager
def sampling() -> Iterator[bool]:
    """A sampler's turn: yields whether it may sample (no arms are being timed), and while it
    does, timing waits to begin, so no sample overlaps a timed round."""
    with _lock:
        yield _timing == 0


def timing_now() -> bool:
    """Whether arms are being timed in this process now."""
    return _timing > 0
