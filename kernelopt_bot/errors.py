"""Errors that reach the user as one line and an exit code."""

from __future__ import annotations


class KerneloptError(Exception):
    """Base class: ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class BadInputError(KerneloptError):
    """Something the user gave us is wrong (a target, a pack, a flag): exit code 2."""

    exit_code = 2


class TargetError(BadInputError):
    """A target that cannot be loaded, built or run eagerly."""


class CompileError(KerneloptError):
    """``torch.compile`` failed on a target that runs eagerly: neither the user's input nor our
    code is at fault, and the message says which compiler step raised (exit code 1)."""


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (or just ``Type``): how every failure is reported in one
    line, whether it came from a target, a sandboxed candidate or a worker process. A first line
    that only announces what follows (it ends with a colon) takes the next line with it: alone it
    said "raised:" and lost the reason."""
    text = [line.strip() for line in str(exc).strip().splitlines()]
    first = text[0] if text else ""
    if first.endswith(":"):  # a wrapper's heading (BackendCompilerFailed: "backend='inductor' raised:"): the cause is next
        first = " ".join([first, next((line for line in text[1:] if line), "")]).strip()
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
