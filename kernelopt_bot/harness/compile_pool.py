"""Variants compile in a separate, killable process that only fills the Triton cache.

Inductor does the same (``CachingAutotuner.precompile(warm_cache_only=True)`` in its subprocess
pool): compiling a Triton kernel needs no GPU, only its target (the kernel's ``DeviceProperties``).
The engine then loads each variant from the cache, which takes milliseconds. What this buys: a
compile that hangs or runs long (a pathological config, a compiler bug) is killed at its deadline
with its process, instead of a thread that cannot be stopped and goes on using the CPU while the
engine times kernels; a compile that crashes takes this process down, not the engine.

One long-lived process per engine (compiling on threads inside: Triton's compiler releases the
GIL), started on first use and replaced after a kill or a crash; on a crash the jobs left are
tried once more in a new process, so one bad variant does not sink its batch.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.isolation import Channel, IsolatedProcess, spawn_isolated

WORKER_ENTRY = "kernelopt_bot.harness.compile_pool.compile_worker_main"
PROCESS_NAME = "kernelopt-compile"
START_TIMEOUT_S = 120.0  # the process imports torch before it answers
LATE = "late"  # a job still compiling at the deadline (its process is killed)

_UNIQUE = itertools.count()


def warm_cache(text: str, name: str) -> None:
    """Compile kernel ``name`` of module ``text`` for its target into the Triton cache."""
    from torch._inductor.codecache import PyCodeCache

    module = PyCodeCache.load(f"{text}\n# kernelopt compile process {os.getpid()} {next(_UNIQUE)}\n")
    getattr(module, name).precompile(warm_cache_only=True)


def compile_worker_main(conn: Channel, threads: int) -> None:
    """The compile process: ``("warm", [(index, text, name), ...])`` is answered with one
    ``("warmed", index, error_text_or_None)`` per job as each finishes, then ``("batch done",)``."""
    # This process compiles for GPU targets only: Triton's interpreter (the CPU's) has no part here.
    os.environ.pop("TRITON_INTERPRET", None)
    import torch  # noqa: F401 - imported before answering, so the first batch is not charged for it

    conn.send(("ready", os.getpid()))
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message[0] != "warm":
                return
            futures = {pool.submit(warm_cache, text, name): index for index, text, name in message[1]}
            for future in as_completed(futures):
                exc = future.exception()
                conn.send(("warmed", futures[future], None if exc is None else one_line(exc)))
            conn.send(("batch done",))


class CompilePool:
    """The engine's side: :meth:`warm` a batch with a deadline; :meth:`close` at the end."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._process: IsolatedProcess | None = None
        self._ready = False
        self.started = 0  # processes started, for the run's count
        self.killed = 0  # processes killed at a deadline or after a crash

    def warm(self, jobs: Sequence[tuple[str, str]], deadline_s: float | None) -> list[str | None]:
        """Compile each ``(module text, kernel name)`` into the Triton cache: per job ``None``
        (compiled), its compile error's text, or :data:`LATE` (not done by the deadline: the
        process was killed with it). Raises ``OSError`` when no compile process can start (the
        caller compiles in its own process instead)."""
        results: list[str | None] = [LATE] * len(jobs)
        ends = None if deadline_s is None else time.monotonic() + deadline_s
        pending = set(range(len(jobs)))
        for attempt in range(2):  # a crash: the jobs left get one more process
            if not pending:
                break
            crashed = self._run_batch(jobs, pending, results, ends)
            if not crashed:
                break
            if attempt == 1:
                for index in pending:
                    results[index] = f"the compile process crashed while compiling it ({crashed})"
        return results

    def _run_batch(self, jobs: Sequence[tuple[str, str]], pending: set[int], results: list[str | None],
                   ends: float | None) -> str | None:
        """One process's go at the ``pending`` jobs; what crashed it, or ``None``."""
        process = self._ready_process(ends)
        try:
            process.conn.send(("warm", [(i, *jobs[i]) for i in sorted(pending)]))
            while pending:
                wait = None if ends is None else ends - time.monotonic()
                if wait is not None and wait <= 0:
                    self._kill()
                    return None
                if not process.conn.poll(wait):
                    continue
                message = process.conn.recv()
                if message[0] == "warmed":
                    results[message[1]] = message[2]
                    pending.discard(message[1])
            process.conn.recv()  # ("batch done",)
            return None
        except (EOFError, OSError) as exc:
            self._kill()
            return one_line(exc) if not isinstance(exc, EOFError) else "it exited"

    def prestart(self) -> None:
        """Start the compile process now without waiting for it (it imports torch meanwhile)."""
        if self._process is None:
            try:
                self._process = spawn_isolated(WORKER_ENTRY, self.threads, name=PROCESS_NAME)
            except OSError:
                return  # tried again, and reported, on first use
            self._ready = False
            self.started += 1

    def ready_now(self) -> bool:
        """Is the compile process up (checked without waiting)? A batch that comes before it is
        compiled by the caller itself: waiting for the process's start would cost more. One that
        was killed or crashed is started again here."""
        return self._await_ready(0.0)

    def _ready_process(self, ends: float | None) -> IsolatedProcess:
        limit = START_TIMEOUT_S if ends is None else max(1.0, min(START_TIMEOUT_S, ends - time.monotonic()))
        if not self._await_ready(limit) or self._process is None:
            self._kill()
            raise OSError(f"the compile process could not start within {limit:.0f} s")
        return self._process

    def _await_ready(self, wait_s: float) -> bool:
        """Wait up to ``wait_s`` for the process's ``ready``; a dead one is replaced first."""
        if self._process is not None and not self._process.alive():
            self._kill()
        if self._process is None:
            self.prestart()
        if self._process is None:
            return False
        if self._ready:
            return True
        try:
            if not self._process.conn.poll(wait_s):
                return False
            self._process.conn.recv()  # ("ready", pid)
        except (EOFError, OSError):
            self._kill()
            return False
        self._ready = True
        return True

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.close()
            self._process = None
            self._ready = False
            self.killed += 1

    def close(self) -> None:
        if self._process is not None:
            self._process.close()
            self._process = None
            self._ready = False


def start_pool(device: str, threads: int) -> CompilePool | None:
    """A compile pool, its process already starting, where kernels compile to a GPU target
    (CUDA); else ``None``: in the CPU interpreter nothing is compiled ahead."""
    if device != "cuda":
        return None
    pool = CompilePool(threads)
    pool.prestart()
    return pool
