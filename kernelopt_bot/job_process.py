"""One job's process: a session and process group of its own, a scrubbed environment, a deadline.

A suite problem or a sweep target runs as a ``kernelopt optimize`` process (:mod:`kernelopt_bot.fleet`).
It leads its own session, so at its deadline everything it started is ended with it, and a
signal to our group (a Ctrl-C) does not reach it - in exchange it is made to die with the thread
that started it. Its environment is the scrubbed one every isolated child gets
(:func:`~kernelopt_bot.harness.isolation.child_environment`: no token, no key, a private ``HOME``)
plus what the job names: its GPU, and the secrets a trusted optimize process keeps (the LLM key,
which it holds behind a proxy, away from the engine and the candidates).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelopt_bot.harness.isolation import child_environment

TIMED_OUT = "timed out after"
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL when a job's group is ended
POLL_S = 0.1
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Exit:
    """How a job's process ended."""

    code: int  # the process's exit status (negative: the signal that killed it)
    seconds: float
    timed_out: bool = False
    stopped: bool = False  # ended because the caller gave up (an error, Ctrl-C)


def run_command(argv: Sequence[str], *, env: Mapping[str, str], log_path: Path, timeout_s: float,
                cpus: list[int] | None = None, stop: threading.Event | None = None, cwd: Path | None = None) -> Exit:
    """Run ``argv`` in a session of its own with stdout and stderr in ``log_path``.

    At ``timeout_s``, or when ``stop`` is set, its whole process group is ended: SIGTERM, then
    SIGKILL after ``KILL_GRACE_S``. Whatever the group still holds when its leader exits is killed
    too (a stray compile worker must not keep a GPU); the leader is reaped only after that, so its
    group id cannot have been reused by then.
    """
    start = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(env), start_new_session=True, preexec_fn=_child_setup(cpus), cwd=cwd)
    timed_out = stopped = False
    try:
        while not _ended(proc.pid):
            stopped = stop is not None and stop.is_set()
            timed_out = not stopped and time.monotonic() - start >= timeout_s
            if stopped or timed_out:
                _signal_group(proc.pid, signal.SIGTERM)
                grace = time.monotonic() + KILL_GRACE_S
                while not _ended(proc.pid) and time.monotonic() < grace:
                    time.sleep(POLL_S)
                break
            if stop is not None:
                stop.wait(POLL_S)
            else:
                time.sleep(POLL_S)
    finally:
        _signal_group(proc.pid, signal.SIGKILL)
        code = proc.wait()
    if timed_out:
        with log_path.open("a") as log:
            log.write(f"kernelopt: {TIMED_OUT} {timeout_s:.0f} s; its process group was killed\n")
    return Exit(code, time.monotonic() - start, timed_out, stopped)


def _ended(pid: int) -> bool:
    """Whether the child has exited, without reaping it (its pid stays its group's id meanwhile)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signum)


def _child_setup(cpus: list[int] | None) -> Callable[[], None]:
    """What a job's process does before it runs: die with the thread that started it (it leads a
    session of its own, out of reach of a signal to ours, so a fleet killed outright would otherwise
    leave it running on its GPU), and keep to its own cores, which everything it starts inherits."""
    parent = os.getpid()
    prctl = None
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
            if os.getppid() != parent:  # gone before the line above took effect
                os._exit(1)
        if cpus:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, cpus)

    return setup


def job_environment(home: str, extra: Mapping[str, str] | None = None, *, secrets: Iterable[str] = ()) -> dict[str, str]:
    """A job's whole environment: the scrubbed one of an isolated child (private ``HOME``), then
    ``extra`` (its GPU) and the ``secrets`` it names as they are here. ``PYTHONSAFEPATH``: the
    folder a job starts in (a repository) is not put first on its import path (Python 3.11+)."""
    kept = {name: os.environ[name] for name in secrets if name in os.environ}
    return child_environment(home, {"PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1", **(extra or {}), **kept})


def run_alone(argv: Sequence[str], log_path: Path, timeout_s: float) -> Exit:
    """:func:`run_command` on the default device, outside any fleet, with a job's environment."""
    with tempfile.TemporaryDirectory(prefix="kernelopt-job-", ignore_cleanup_errors=True) as home:
        return run_command(argv, env=job_environment(home), log_path=log_path, timeout_s=timeout_s)
