"""What the engine is running right now, told to the process that supervises it.

The engine runs trusted candidates in its own process (our launch configs and source
transformations: :class:`~kernelopt_bot.harness.kernel_service.KernelService`, gates 2-4 in the
engine). One of them can still bring the process down: a config that miscompiles into an illegal
memory access poisons the CUDA context, a crash takes the process, a hang holds it. Before each
such piece of work the engine says what it is (``begin``, with a deadline) and after it that it
ended (``end``); the supervisor (:mod:`kernelopt_bot.harness.supervisor`) then knows which work
killed the engine, starts a new one and tells it to skip that work (its *quarantine*), so the
failure is that candidate's and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.failures import WorkerPoisoned, is_sticky_device_error

Send = Callable[[tuple[str, Any]], None]


class StartWatch(Protocol):
    """A fresh context around a step the run cannot go on without (the target's load and first
    run: ``pipeline._start_watch``), named as an error would name it; :func:`no_start_watch`
    where nothing bounds it."""

    def __call__(self, what: str, *, kernels: bool = False) -> AbstractContextManager[None]: ...


def no_start_watch(what: str, *, kernels: bool = False) -> AbstractContextManager[None]:
    return nullcontext()


class WorkWatch:
    """The engine's side: ``watching(key, label, deadline_s)`` around each risky piece of work.

    ``send``: the channel to the supervisor (``None``: nobody watches, as in a test or a direct
    call). ``quarantine``: work that brought an earlier engine down, by key, with why."""

    def __init__(self, send: Send | None = None, device: str = "cpu",
                 quarantine: dict[str, str] | None = None) -> None:
        self._send = send
        self.device = device
        self.quarantine = dict(quarantine or {})

    def quarantined(self, key: str) -> str | None:
        """Why ``key`` must not run again (it brought an engine down), or ``None``."""
        reason = self.quarantine.get(key)
        return None if reason is None else f"not run again: it brought the engine down before ({reason})"

    @contextmanager
    def watching(self, key: str, label: str, deadline_s: float | None, *,
                 ends_run: str | None = None) -> Iterator[None]:
        """Run the block as work ``key``: announced before, and after it the device is checked
        (a sticky CUDA error surfaces at the next synchronization, whoever catches the first
        one): a poisoned device raises :class:`WorkerPoisoned` for this work.

        ``ends_run``: work no run can go on without (the model's load and capture). If it
        outlives its deadline the supervisor ends the run with this error instead of starting
        an engine that would skip it."""
        self._tell("begin", {"key": key, "label": label, "deadline_s": deadline_s, "ends_run": ends_run})
        try:
            yield
        except Exception as exc:
            if is_sticky_device_error(exc):
                raise WorkerPoisoned(key, label, one_line(exc)) from exc
            self._ended(key, label)  # an error still in flight from this work is this work's
            raise
        self._ended(key, label)

    def _ended(self, key: str, label: str) -> None:
        """The work is over: the device checked (a poisoned one ends the process), then ``end``
        sent, whatever else the check raised."""
        try:
            self._check_device(key, label)
        except WorkerPoisoned:
            raise
        except Exception:
            self._tell("end", key)
            raise
        self._tell("end", key)

    def _check_device(self, key: str, label: str) -> None:
        if self.device != "cuda":
            return
        import torch

        try:
            torch.cuda.synchronize()
        except Exception as exc:
            if is_sticky_device_error(exc):
                raise WorkerPoisoned(key, label, one_line(exc)) from exc
            raise

    def _tell(self, kind: str, payload: Any) -> None:
        if self._send is not None:
            self._send((kind, payload))


NO_WATCH = WorkWatch()
