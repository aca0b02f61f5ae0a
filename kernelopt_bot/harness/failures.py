"""Failures of ours, told apart from a candidate's: a deadline we set, memory we ran out of, a
process that could not start. Whatever reports them (a sandbox, a model arm, the engine's kernel
service, a gate) uses these, so such a failure is never recorded as a verdict on a candidate."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator


class InfrastructureFailure(Exception):
    """Our side failed (a deadline of ours, out of memory, a process that could not start): the
    candidate was not judged, so this is never a verdict on it."""


class OutOfWallTime(InfrastructureFailure):
    """The run's wall deadline passed while a candidate's gates ran: it was not judged."""


def past_deadline(ends_at: float | None, *, ahead_s: float = 0.0) -> bool:
    """Would work started now and taking ``ahead_s`` seconds end past ``ends_at`` (the run's wall
    deadline, a ``time.time()``; None: there is none)? The one test every step of a run makes."""
    return ends_at is not None and time.time() + ahead_s > ends_at


def is_infrastructure_text(text: str) -> bool:
    """Does an error text say our side failed (our deadline, out of memory) rather than the
    candidate's code? Used where only a reason string comes back (a worker's error, a sandbox
    outcome without its ``infrastructure`` flag)."""
    return text.lower().startswith("timed out") or is_out_of_memory(text)


def is_out_of_memory(error: BaseException | str) -> bool:
    """CUDA's or the host's out-of-memory, as an exception or as the text one left behind."""
    if isinstance(error, BaseException):
        if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
            return True
        error = str(error)
    lowered = error.lower()
    # The host's allocator says it in its own words: "DefaultCPUAllocator: can't allocate memory"
    return any(words in lowered for words in ("out of memory", "outofmemoryerror", "can't allocate memory",
                                              "not enough memory"))


# A CUDA error that poisons the process's context: every later call fails the same way, so the
# process must be replaced (an out-of-memory error is not one of these: freeing memory mends it).
_STICKY_DEVICE_ERROR = re.compile(
    r"illegal memory access|misaligned address|unspecified launch failure|illegal instruction|"
    r"device-side assert|invalid program counter|hardware stack error|uncorrectable ECC|"
    r"CUDA error: launch failure|an illegal instruction", re.IGNORECASE)


def is_sticky_device_error(error: BaseException | str) -> bool:
    """Does this error leave the process's CUDA context unusable (a kernel's illegal access, a
    device-side assert)? Then the process is replaced, and the work that raised it is what
    failed, not the run."""
    return bool(_STICKY_DEVICE_ERROR.search(str(error)))


class WorkerPoisoned(BaseException):
    """The process's device is unusable after ``label`` (work ``key``) ran: it must end and be
    replaced. A ``BaseException``, like ``KeyboardInterrupt``, so the many handlers that turn a
    candidate's exception into its error text cannot keep a poisoned process running."""

    def __init__(self, key: str, label: str, reason: str) -> None:
        super().__init__(f"{label}: {reason}")
        self.key, self.label, self.reason = key, label, reason


def poisoned_in(exc: BaseException | None) -> WorkerPoisoned | None:
    """The :class:`WorkerPoisoned` behind ``exc``: itself, or one that was unwinding when cleanup
    on the poisoned device raised something else (freeing memory, closing arms)."""
    return next((e for e in causes(exc) if isinstance(e, WorkerPoisoned)), None)


def causes(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then what it was raised from or while handling, and so on to the root cause."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
