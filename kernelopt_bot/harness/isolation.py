"""Child processes that run generated code: scrubbed environment, resource limits, deadlines.

Kernel candidates are untrusted code. They run in a child process whose environment holds no
secrets (tokens, keys, LLM and GitHub variables), with a wall-clock deadline enforced by the
parent; a crash or hang of the child is a result, never a crash of the tool.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

SECRET_PATTERNS = (
    "*_TOKEN",
    "*_KEY",
    "*_SECRET",
    "*_SECRETS",
    "*_PASSWORD",
    "OPENAI_*",
    "GITHUB_*",
    "ACTIONS_*",
    "AWS_*",
    "KERNELOPT_LLM_API_KEY",
)


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p) for p in SECRET_PATTERNS)


def scrubbed(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` without anything that looks like a secret."""
    return {k: v for k, v in environ.items() if not is_secret(k)}


@contextmanager
def scrubbed_environ() -> Iterator[None]:
    """Remove secrets from ``os.environ`` while a child process is being started.

    ``multiprocessing`` children inherit ``os.environ`` at start; the parent's values come back
    afterwards.
    """
    removed = {k: os.environ.pop(k) for k in list(os.environ) if is_secret(k)}
    try:
        yield
    finally:
        os.environ.update(removed)
