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
    line, whether it came from a target, a sandboxed candidate or a worker process."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
