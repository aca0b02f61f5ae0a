"""Variants compile in a separate, killable process that only fills the Triton cache.

Inductor does the same (``CachingAutotuner.precompile(warm_cache_only=True)`` in its subprocess
pool): compiling a Triton kernel needs no GPU, only its target (the kernel's ``DeviceProperties``).
The engine then loads each variant from the cache, which takes milliseconds. What this buys: a
compile that hangs or runs long (a pathological config, a compiler bug) is killed at its deadline
with its process, instead of a thread that cannot be stopped and goes on using the CPU while the
engine times kernels; a compile that crashes takes only its own process down, not the engine.

One long-lived process per engine, started on first use (it imports torch and Triton's compiler
once) and replaced after a kill. For each batch it forks short-lived children, one per core share,
each compiling its part of the batch one variant after another: Triton's front end is Python and
holds the GIL, so threads in one process compiled a batch of ~60 reduction variants in 13-18 s on
the H200's host, where forked processes share nothing but the cache on disk. A child that crashes
loses only the variant it was compiling (reported as that variant's failure); the rest of its
part goes to a new child. Killing the process at a deadline kills its process group, children
included (and they die with their parent in any case).
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import signal
import time
from collections.abc import Iterator, Sequence

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


def compile_worker_main(conn: Channel, processes: int) -> None:
    """The compile process: ``("warm", [(index, text, name), ...])`` is answered with one
    ``("warmed", index, error_text_or_None)`` per job as each finishes, then ``("batch done",)``."""
    # This process compiles for GPU targets only: Triton's interpreter (the CPU's) has no part here.
    os.environ.pop("TRITON_INTERPRET", None)
    _import_compiler()  # before answering, and once: every forked child starts with it imported
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] != "warm":
            return
        for index, error in compile_forked(message[1], processes):
            conn.send(("warmed", index, error))
        conn.send(("batch done",))


def _import_compiler() -> None:
    import torch
    import torch._inductor.codecache
    import torch._inductor.runtime.triton_heuristics  # noqa: F401

    try:
        import triton.compiler.compiler  # noqa: F401
        from triton.backends import backends  # noqa: F401 - discovers the GPU backends
    except ImportError:
        pass  # no Triton: every job fails with its own import error


def compile_forked(jobs: Sequence[tuple[int, str, str]], processes: int) -> Iterator[tuple[int, str | None]]:
    """Compile ``jobs`` in up to ``processes`` forked children; yield ``(index, error or None)``
    for each job as it finishes. A child that dies mid-job yields that job's crash and hands the
    rest of its part to a new child."""
    parts = [list(jobs[i::max(1, min(processes, len(jobs)))]) for i in range(max(1, min(processes, len(jobs))))]
    selector = selectors.DefaultSelector()
    children: dict[int, _Child] = {}

    def start(part: list[tuple[int, str, str]]) -> None:
        child = _Child.fork(part)
        children[child.fd] = child
        selector.register(child.fd, selectors.EVENT_READ)

    for part in parts:
        if part:
            start(part)
    try:
        while children:
            for key, _ in selector.select():
                child = children[key.fd]
                yield from child.read()
                if child.open:
                    continue
                selector.unregister(key.fd)
                del children[key.fd]
                status = child.reap()
                if child.pending:  # it died compiling its first pending job
                    culprit, *rest = child.pending
                    yield culprit[0], f"the compile process crashed while compiling it ({status})"
                    if rest:
                        start(rest)
    finally:
        for child in children.values():
            child.kill()
        selector.close()


class _Child:
    """One forked compile child: its pid, the read end of its result pipe, the jobs it has not
    reported yet (in the order it compiles them)."""

    def __init__(self, pid: int, fd: int, pending: list[tuple[int, str, str]]) -> None:
        self.pid, self.fd, self.pending = pid, fd, pending
        self.open = True
        self._buffer = b""

    @classmethod
    def fork(cls, part: list[tuple[int, str, str]]) -> _Child:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compile, report each job on the pipe, exit without cleanup
            try:
                os.close(read_fd)
                _die_with_parent()
                for index, text, name in part:
                    try:
                        warm_cache(text, name)
                        error = None
                    except BaseException as exc:  # noqa: BLE001 - any failure is that variant's
                        error = one_line(exc) or type(exc).__name__
                    _write_all(write_fd, (json.dumps([index, error]) + "\n").encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        return cls(pid, read_fd, list(part))

    def read(self) -> list[tuple[int, str | None]]:
        """The jobs it reported since the last read; at end of file the pipe is closed."""
        data = os.read(self.fd, 1 << 16)
        if not data:
            os.close(self.fd)
            self.open = False
            return []
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        done = []
        for line in lines:
            index, error = json.loads(line)
            self.pending = [job for job in self.pending if job[0] != index]
            done.append((index, error))
        return done

    def reap(self) -> str:
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit code {os.WEXITSTATUS(status)}"

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        if self.open:
            os.close(self.fd)
            self.open = False


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _die_with_parent() -> None:
    """SIGKILL this child when the compile process dies (Linux; elsewhere the process group's
    kill does it)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class CompilePool:
    """The engine's side: :meth:`warm` a batch with a deadline; :meth:`close` at the end."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
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
                self._process = spawn_isolated(WORKER_ENTRY, self.processes, name=PROCESS_NAME)
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


def start_pool(device: str, processes: int) -> CompilePool | None:
    """A compile pool, its process already starting, where kernels compile to a GPU target
    (CUDA); else ``None``: in the CPU interpreter nothing is compiled ahead."""
    if device != "cuda":
        return None
    pool = CompilePool(processes)
    pool.prestart()
    return pool
