"""GPU timing: CUDA events around each call, L2 flushed before each call, median of many.

Without a GPU nothing is timed: a :class:`Timing` then says ``measured=False`` and carries no
number, because interpreter times say nothing about a GPU.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

NOT_MEASURED = "not measured: no CUDA device (interpreter mode)"


@dataclass
class Timing:
    """Median time of one callable, or why there is none."""

    median_ms: float | None
    samples_ms: list[float] = field(default_factory=list)
    reason: str = ""
    host_ms: float | None = None  # median host-inclusive latency of a call (see time_model)

    @property
    def measured(self) -> bool:
        return self.median_ms is not None

    @classmethod
    def not_measured(cls, reason: str = NOT_MEASURED) -> Timing:
        return cls(None, [], reason)

    def to_json(self) -> dict[str, Any]:
        return {"median_ms": self.median_ms, "samples": len(self.samples_ms), "reason": self.reason,
                "host_ms": self.host_ms}

    def reply(self) -> tuple[float, float | None] | None:
        """What a model arm answers to ``("time", seed, reps)``: ``(gpu_ms, host_ms)``, or None
        where nothing was timed (the CPU interpreter)."""
        return None if self.median_ms is None else (self.median_ms, self.host_ms)


def flush_bytes(device: torch.device | str | int = "cuda") -> int:
    """The size of :class:`L2Flusher`'s buffer on ``device``: twice its L2 cache."""
    props = torch.cuda.get_device_properties(device)
    return 2 * int(getattr(props, "L2_cache_size", 0) or 64 << 20)


class L2Flusher:
    """Writes a buffer twice the L2 cache's size, so every timed call starts with a cold L2 (a
    write of twice the cache evicts all of it; the 256 MiB that ``triton.testing.do_bench`` uses
    was, in every process of a run, 0.7x a 378 MiB model beside it)."""

    def __init__(self, device: torch.device | str = "cuda") -> None:
        self.buffer = torch.empty(flush_bytes(device) // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


_FLUSHERS: dict[int, L2Flusher] = {}


def flusher() -> L2Flusher:
    index = torch.cuda.current_device()
    if index not in _FLUSHERS:
        _FLUSHERS[index] = L2Flusher(torch.device("cuda", index))
    return _FLUSHERS[index]


def release_flushers() -> None:
    """Drop the flush buffers (the next timing makes its own): a process idle between requests
    holds none (:func:`kernelopt_bot.harness.arm_process._idle`)."""
    _FLUSHERS.clear()


def time_cuda(fn: Callable[[], Any], *, reps: int = 50, warmup: int = 3,
              before_each: Callable[[], Any] | None = None, hide_host: bool = False) -> Timing:
    """Time ``fn`` on the current CUDA device: per-call events, L2 flushed before each call.

    ``before_each`` runs outside the timed region (e.g. restoring in-place arguments).
    ``hide_host``: the GPU waits (a sleep kernel) while the host queues each call, so the events
    see only the device's work: for a call whose Python costs as much as its kernels (a kernel
    target's launcher, a Helion kernel's wrapper), the host's share is the same in every arm and
    otherwise only noise.
    """
    flush = flusher()
    host_s = 0.0
    for _ in range(warmup):
        if before_each is not None:
            before_each()
        queued = time.perf_counter()
        fn()
        host_s = time.perf_counter() - queued
    torch.cuda.synchronize()
    cover = _sleep_cycles(min(MAX_HOST_COVER_S, 1.5 * host_s + 20e-6)) if hide_host else 0
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    with no_collection():
        for start, end in zip(starts, ends):
            if before_each is not None:
                before_each()
            flush()
            if cover:
                torch.cuda._sleep(cover)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return Timing(statistics.median(samples), samples)


MAX_HOST_COVER_S = 0.02  # the longest a sleep kernel covers a call's host work
_CYCLES_PER_S: dict[int, float] = {}


def _sleep_cycles(seconds: float) -> int:
    """GPU clock cycles of ``torch.cuda._sleep`` that last ``seconds`` on this device (measured once)."""
    index = torch.cuda.current_device()
    if index not in _CYCLES_PER_S:
        probe = 2_000_000
        torch.cuda._sleep(probe)  # warm
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        torch.cuda.synchronize()
        _CYCLES_PER_S[index] = probe / max(start.elapsed_time(end) / 1000.0, 1e-6)
    return int(seconds * _CYCLES_PER_S[index])


@contextmanager
def no_collection() -> Iterator[None]:
    """Python's garbage collector off while calls are timed: on a launch-bound model the host's
    launch time is the GPU time, and a collection pause in the middle of a call is noise read as
    the model's speed. (Nothing is collected before either: in a process holding a compiled model
    a full collection costs 0.1-0.3 s, paid on every request; on the H200 that made gate 4 in the
    engine 9 s a candidate instead of 2.)"""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def time_on(device: str, fn: Callable[[], Any], **kwargs: Any) -> Timing:
    """:func:`time_cuda` on CUDA; on the CPU interpreter, run once and report not measured."""
    if device == "cuda":
        return time_cuda(fn, **kwargs)
    before = kwargs.get("before_each")
    if before is not None:
        before()
    fn()
    return Timing.not_measured()


MODEL_WARMUP_CALLS = 2  # untimed calls before a model's timed ones (time_model)


def time_request_calls(reps: int) -> int:
    """The model calls one ``time_model`` of ``reps`` makes: its warm-up, the timed calls and as
    many host-latency calls again (what a model arm's "time" request costs, to plan by)."""
    return MODEL_WARMUP_CALLS + 2 * reps


def time_model(device: str, fn: Callable[[], Any], *, reps: int = 20, warmup: int = MODEL_WARMUP_CALLS,
               hide_host: bool = False) -> Timing:
    """A whole model's call, timed two ways: GPU time (CUDA events, calls queued back to back after
    an L2 flush, as for a kernel) and host-inclusive latency (wall clock from the call to the end
    of its GPU work, synchronized before and after each call). On a launch-bound model the two
    differ: the GPU time hides the host's launch overhead behind the flush, the latency does not,
    and that overhead is what CUDA graphs remove. ``hide_host``: see :func:`time_cuda`."""
    timing = time_on(device, fn, reps=reps, warmup=warmup, **({"hide_host": True} if hide_host else {}))
    if not timing.measured:
        return timing
    flush = flusher()
    latencies: list[float] = []
    with no_collection():
        for _ in range(reps):
            flush()
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            latencies.append((time.perf_counter() - start) * 1000.0)
    timing.host_ms = statistics.median(latencies)
    return timing


def time_request(args: Sequence[Any]) -> tuple[int, int, str, bool]:
    """A model arm's ``("time", seed, reps[, part[, hide_host]])`` request's arguments: ``part`` is
    what one call runs (``"step"``, the target's call; ``"forward"``, a training step's forward
    half alone) and ``hide_host`` times the device alone (:func:`time_cuda`), as the split of a
    training step into forward and backward needs: on a call whose host work outlasts its kernels
    the events measure the host, and a faster kernel in one half would show in the other."""
    seed, reps, *rest = args
    part = str(rest[0]) if rest else "step"
    return int(seed), int(reps), part, bool(rest[1]) if len(rest) > 1 else False


class StepClock:
    """Seconds per named step, added into ``seconds`` as each step ends: a slow run shows which
    step was slow. Two ways to mark steps, one clock: :meth:`done` ends a step now (it began when
    the last one ended), :meth:`begin` starts one that lasts until the next :meth:`begin` or
    :meth:`stop` (the pipeline's phases, named as they are logged). A step that happens twice adds
    up. With ``sent_at`` (the parent's :func:`time.time` when it started this process) the first
    entry, ``start``, is the process start itself."""

    def __init__(self, seconds: dict[str, float] | None = None, *, sent_at: Any = None) -> None:
        self.seconds: dict[str, float] = {} if seconds is None else seconds
        self._last = time.time()
        self._current: str | None = None
        if isinstance(sent_at, (int, float)):
            self.seconds["start"] = round(self._last - sent_at, 2)

    @property
    def current(self) -> str | None:
        """The step :meth:`begin` started and no later step ended, if any."""
        return self._current

    def done(self, step: str) -> None:
        now = time.time()
        self.seconds[step] = round(self.seconds.get(step, 0.0) + now - self._last, 2)
        self._last = now
        self._current = None

    def begin(self, step: str) -> None:
        self.stop()
        self._last, self._current = time.time(), step

    def stop(self) -> None:
        """End the step :meth:`begin` started, if one is running."""
        if self._current is not None:
            self.done(self._current)
