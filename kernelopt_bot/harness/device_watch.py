"""The GPU's memory in use over a run, every process on it included.

Each model arm, sandbox and the engine hold their own memory; ``torch.cuda.max_memory_allocated``
in one process sees only its own share. The issue that matters (do the run's processes together
fit beside each other?) needs the device's view: a thread samples ``cudaMemGetInfo`` (used =
total - free) and keeps the peak, except while arms are timed (``harness.quiet``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from types import TracebackType

from kernelopt_bot.harness.quiet import sampling


class DeviceMemoryWatch:
    """Peak device-wide memory in use (MiB) between ``__enter__`` and ``__exit__``; ``peak_mb``
    stays None without CUDA. ``phase`` (the run's current phase, as its log names it) splits the
    peak by phase in ``peaks_by_phase``: which step holds the memory is what a plan to cut it needs;
    ``engine_peaks_by_phase`` is this process's own share (what its caching allocator holds), so
    the engine's part and the arms' part of a phase's peak can be told apart. ``processes``: how
    many processes hold a CUDA context now (the engine and its children on the GPU); how many did
    at the peak is ``processes_at_peak``: each context holds hundreds of MiB, more than a small
    model itself, and is the part of the peak no plan of ours can cut.

    ``context_mb``: what one process's CUDA context is taken to hold, at most. Readings with the
    engine alone on the device measure it (the memory in use less what the engine's allocator
    holds, the largest such: 527 MiB on an H100 with torch 2.11), and the cap stays where that is
    more: another user of the device then makes no context look larger. With it, every reading counts what the device
    holds beyond the contexts of the processes alive then: ``peak_beyond_mb`` (and its phase and
    process count) is the largest, which a phase with fewer processes but more memory can hold,
    not the overall peak's share."""

    def __init__(self, device: str, interval_s: float = 0.2, phase: Callable[[], str | None] | None = None,
                 processes: Callable[[], int] | None = None, context_mb: float | None = None) -> None:
        self.device, self.interval_s = device, interval_s
        self.peak_mb: float | None = None
        self.processes_at_peak: int | None = None
        self._processes = processes
        self._context_cap = context_mb
        self._context_seen: float | None = None  # the largest the engine's context read while alone
        self.peak_beyond_mb: float | None = None
        self.processes_at_peak_beyond: int | None = None
        self.phase_at_peak_beyond: str | None = None
        self.peaks_by_phase: dict[str, float] = {}
        self.engine_peaks_by_phase: dict[str, float] = {}
        self._phase = phase
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        from kernelopt_bot.harness.memory import device_memory

        info = device_memory(self.device)
        if info is None:
            return
        free, total = info
        import torch

        self.record((total - free) / 2**20, torch.cuda.memory_reserved() / 2**20)

    @property
    def context_mb(self) -> float | None:
        """One context's MiB: the largest measured, never above the cap; the cap until measured."""
        if self._context_cap is None or self._context_seen is None:
            return self._context_cap
        return min(self._context_cap, self._context_seen)

    @property
    def context_measured(self) -> bool:
        return self._context_cap is not None and self._context_seen is not None

    def _count(self) -> int | None:
        if self._processes is None:
            return None
        with contextlib.suppress(Exception):  # a count we cannot take leaves the figures standing
            return self._processes()
        return None

    def record(self, used_mb: float, engine_mb: float | None = None) -> None:
        """One reading of the memory in use (and of this process's own), counted in the overall
        peak and its phase's, and beyond the contexts of the processes alive now."""
        count = self._count()
        if self._context_cap is not None and engine_mb is not None and count == 1:
            # The engine alone: its context is what its allocator does not hold. It grows as
            # libraries and kernels load (the first reading is before any ran), so the largest seen
            # while alone counts, never above the cap.
            self._context_seen = max(self._context_seen or 0.0, used_mb - engine_mb)
        phase = self._phase() if self._phase is not None else None
        if self.peak_mb is None or used_mb > self.peak_mb:
            self.peak_mb = used_mb
            self.processes_at_peak = count
        context = self.context_mb
        if context is not None and count is not None:
            beyond = used_mb - count * context
            if self.peak_beyond_mb is None or beyond > self.peak_beyond_mb:
                self.peak_beyond_mb, self.processes_at_peak_beyond, self.phase_at_peak_beyond = beyond, count, phase
        if phase:
            self.peaks_by_phase[phase] = max(self.peaks_by_phase.get(phase, 0.0), used_mb)
            if engine_mb is not None:
                self.engine_peaks_by_phase[phase] = max(self.engine_peaks_by_phase.get(phase, 0.0), engine_mb)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with sampling() as may:  # nothing of ours runs while arms are timed (harness.quiet)
                if may:
                    self.sample()

    def __enter__(self) -> DeviceMemoryWatch:
        if self.device == "cuda":
            self.sample()
            self._thread = threading.Thread(target=self._run, name="kernelopt-memory-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self.sample()
