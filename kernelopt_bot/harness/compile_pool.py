"""Variants compile in a separate, killable process that only fills the Triton cache.

Inductor does the same (``CachingAutotuner.precompile(warm_cache_only=True)`` in its subprocess
pool): compiling a Triton kernel needs no GPU, only its target (the kernel's ``DeviceProperties``).
The engine then loads each variant from the cache, which takes milliseconds. What this buys: a
compile that hangs or runs long (a pathological config, a compiler bug) is killed at its deadline
with its process, instead of a thread that cannot be stopped and goes on using the CPU while the
engine times kernels; a compile that crashes takes only its own process down, not the engine.

One long-lived process per engine, started on first use (it imports torch and Triton's compiler
once) and replaced after a kill. For each batch it forks short-lived children, one per core share,
each taking the batch's next variant whenever it finishes one: Triton's front end is Python and
holds the GIL, so threads in one process compiled a batch of ~60 reduction variants in 13-18 s on
the H200's host, where forked processes share nothing but the cache on disk (11 s for the same
batch, the rest being the few variants that compile slowest). A child that crashes loses only the
variant it was compiling (reported as that variant's failure) and is replaced. Killing the
process at a deadline kills its process group, children included (and they die with their parent
in any case).
"""

from __future__ import annotations

import contextlib
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
    """Compile ``jobs`` in up to ``processes`` forked children, each taking the next job as it
    finishes one (a few variants take far longer than the rest: a fixed split would wait for the
    child that drew them); yield ``(index, error or None)`` per job as it finishes. A child that
    dies mid-job yields that job's crash and is replaced while jobs remain."""
    queue = list(range(len(jobs)))[::-1]  # positions in ``jobs``, popped from the end
    selector = selectors.DefaultSelector()
    children: dict[int, _Child] = {}

    def start() -> None:
        child = _Child.fork(jobs)
        children[child.fd] = child
        selector.register(child.fd, selectors.EVENT_READ)
        child.assign(queue.pop())

    for _ in range(min(max(1, processes), len(jobs))):
        start()
    try:
        while children:
            for key, _ in selector.select():
                child = children[key.fd]
                done = child.read()
                if done is not None:
                    yield jobs[done[0]][0], done[1]
                    if queue:
                        child.assign(queue.pop())
                    else:
                        child.finish()
                if child.open:
                    continue
                selector.unregister(key.fd)
                del children[key.fd]
                status = child.reap()
                if child.current is not None:  # it died compiling this one
                    yield jobs[child.current][0], f"the compile process crashed while compiling it ({status})"
                    if queue:
                        start()
    finally:
        for child in children.values():
            child.kill()
        selector.close()


class _Child:
    """One forked compile child: it reads a job's position in the batch (which it has, forked
    after the batch arrived) from one pipe, compiles it, writes ``[position, error]`` on another,
    and exits when its job pipe closes."""

    def __init__(self, pid: int, fd: int, job_fd: int) -> None:
        self.pid, self.fd, self.job_fd = pid, fd, job_fd
        self.current: int | None = None
        self.open = True
        self._buffer = b""

    @classmethod
    def fork(cls, jobs: Sequence[tuple[int, str, str]]) -> _Child:
        read_fd, write_fd = os.pipe()
        job_read, job_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compile what it is handed, report each, exit without cleanup
            try:
                os.close(read_fd)
                os.close(job_write)
                _die_with_parent()
                with os.fdopen(job_read, "rb", buffering=0) as handed:
                    for line in iter(handed.readline, b""):
                        position = int(line)
                        _, text, name = jobs[position]
                        try:
                            warm_cache(text, name)
                            error = None
                        except BaseException as exc:  # noqa: BLE001 - any failure is that variant's
                            error = one_line(exc) or type(exc).__name__
                        _write_all(write_fd, (json.dumps([position, error]) + "\n").encode())
            finally:
                os._exit(0)
        os.close(write_fd)
        os.close(job_read)
        return cls(pid, read_fd, job_write)

    def assign(self, position: int) -> None:
        self.current = position
        with contextlib.suppress(OSError):  # it died: its pipe's end of file reports the job as its crash
            _write_all(self.job_fd, f"{position}\n".encode())

    def finish(self) -> None:
        """No more jobs: closing its job pipe lets it exit."""
        if self.job_fd >= 0:
            os.close(self.job_fd)
            self.job_fd = -1

    def read(self) -> tuple[int, str | None] | None:
        """The job it just finished, or ``None`` (a partial line, or end of file: then ``open``
        is false)."""
        data = os.read(self.fd, 1 << 16)
        if not data:
            os.close(self.fd)
            self.open = False
            return None
        self._buffer += data
        if b"\n" not in self._buffer:
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        position, error = json.loads(line)
        self.current = None
        return position, error

    def reap(self) -> str:
        self.finish()
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit code {os.WEXITSTATUS(status)}"

    def kill(self) -> None:
        self.finish()
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
