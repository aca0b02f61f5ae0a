"""Failures of ours, told apart from a candidate's: a deadline we set, memory we ran out of, a
process that could not start. Whatever reports them (a sandbox, a model arm, the engine's kernel
service, a gate) uses these, so such a failure is never recorded as a verdict on a candidate."""

from __future__ import annotations


class InfrastructureFailure(Exception):
    """Our side failed (a deadline of ours, out of memory, a process that could not start): the
    candidate was not judged, so this is never a verdict on it."""


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
    return "out of memory" in lowered or "outofmemoryerror" in lowered
