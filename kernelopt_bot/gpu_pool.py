"""Several GPUs of one machine at once: one long-lived worker process per GPU, one job queue.

A self-hosted runner usually holds several GPUs, and a suite or sweep shard is a list of
independent jobs. Each worker is a ``spawn`` process started with ``CUDA_VISIBLE_DEVICES`` set to
its one GPU, so inside it the GPU is ``cuda:0`` and every timing it does is on that GPU alone; it
also gets a fair share of the CPU cores for compilation (``KERNELOPT_COMPILE_THREADS`` and
Inductor's ``TORCHINDUCTOR_COMPILE_THREADS``) and is pinned to that many cores of its own, so
workers compiling at the same time neither oversubscribe the machine nor disturb each other's
timing. Jobs go out in order from one queue to whichever worker is free.

A GPU can fail under a job: a CUDA error, the worker process dying, or a hang. Such a failure
costs that job only: the worker is killed with everything it started (its own process group) and
replaced, and the job is retried once on a *different* worker (on the same GPU after the restart
when there is no other); if it fails again it is reported failed with both reasons. An ordinary
exception is the job's own fault and is reported without a retry. The pool always completes.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import re
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from kernelopt_bot.errors import BadInputError

COMPILE_THREADS_ENV = "KERNELOPT_COMPILE_THREADS"
INDUCTOR_THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"
STARTUP_TIMEOUT_S = 120.0  # a worker that is not ready by then is restarted (its GPU may be wedged)
RETIRE_AFTER = 3  # consecutive GPU failures after which a worker's GPU is given up (if others remain)

# What a failing device (not a failing job) says: sticky CUDA errors, out of memory, a lost device.
_GPU_ERROR = re.compile(
    r"CUDA error|CUDA out of memory|OutOfMemoryError|out of memory|CUBLAS_STATUS|CUDNN_STATUS|cuDNN error|"
    r"illegal memory access|device-side assert|unspecified launch failure|uncorrectable ECC|"
    r"AcceleratorError|CUDA driver|no CUDA-capable device|busy or unavailable|NCCL error")


class GpuFailure(Exception):
    """Raised by a job to say that the device failed, not the job: the pool retries it elsewhere.

    ``value`` (picklable) is what the job would report if this was its last attempt, so a caller can
    keep the job's own partial result next to the pool's reason.
    """

    def __init__(self, reason: str, value: Any = None) -> None:
        super().__init__(reason)
        self.value = value


def looks_like_gpu_failure(error: BaseException | str | None) -> bool:
    """Whether an exception or error text is the device's fault (worth a retry on another GPU)."""
    if error is None:
        return False
    if isinstance(error, BaseException):
        if type(error).__name__ in ("OutOfMemoryError", "AcceleratorError", "CudaError"):
            return True
        error = f"{type(error).__name__}: {error}"
    return bool(_GPU_ERROR.search(error))


def _ran_out_of_time(reason: str) -> bool:
    """A failure that was a deadline (the pool's own, or a job's subprocess timing out)."""
    text = reason.lower()
    return "deadline" in text or "timed out" in text


@dataclass
class JobResult:
    """One job's outcome. ``gpu`` ran the last attempt; ``seconds`` is summed over attempts."""

    job_index: int
    ok: bool
    value: Any
    error: str | None
    gpu: int | None
    attempts: int
    seconds: float


# --- choosing GPUs ---------------------------------------------------------------------------------


def select_gpus(spec: str, available: int) -> list[int]:
    """``all`` | ``N`` (the first N) | ``0,1,3`` (these; ``3,`` is GPU 3 alone) as GPU indices.

    Indices count the GPUs this process can see (``CUDA_VISIBLE_DEVICES`` applies first).
    """
    text = spec.strip().lower()
    if available < 1:
        raise BadInputError(f"--gpus {spec}: no CUDA device")
    if text == "all":
        return list(range(available))
    if "," not in text:
        try:
            count = int(text)
        except ValueError:
            raise BadInputError(f"--gpus {spec!r}: expected all, a count N, or indices like 0,1") from None
        if count < 1:
            raise BadInputError(f"--gpus {spec}: a plain number counts GPUs (at least 1); "
                                "for GPU 0 alone write --gpus 0,")
        if count > available:
            raise BadInputError(f"--gpus {spec}: only {available} CUDA device(s) visible")
        return list(range(count))
    parts = [p.strip() for p in text.split(",")]
    if parts[-1] == "":
        parts.pop()  # "3," names GPU 3 alone
    indices: list[int] = []
    for part in parts:
        if not part.isdigit():
            raise BadInputError(f"--gpus {spec!r}: {part!r} is not a GPU index")
        index = int(part)
        if index >= available:
            raise BadInputError(f"--gpus {spec}: no GPU {index} (visible: 0..{available - 1})")
        if index in indices:
            raise BadInputError(f"--gpus {spec}: GPU {index} given twice")
        indices.append(index)
    return indices


def cuda_device_count() -> int:
    """The CUDA devices this process can see (0 without CUDA). Imports torch, so only when asked."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def available_cores() -> int:
    """The cores this process may run on: a CI container's CPU set, not the host's core count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def compile_threads(cores: int, workers: int) -> int:
    """A worker's fair share of the cores for compilation: ``cores // workers``, at least one."""
    return max(1, cores // max(1, workers))


def cpu_slices(workers: int, cores: int | None = None) -> list[list[int] | None]:
    """Disjoint CPU sets, one per worker, of ``compile_threads`` cores each (None: not pinned, where
    there are fewer cores than workers or no affinity API)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [None] * workers
    cpus = cpus[:cores] if cores else cpus
    share = len(cpus) // max(1, workers)
    if share < 1:
        return [None] * workers
    return [cpus[k * share:(k + 1) * share] for k in range(workers)]


def resolve(path: str) -> Callable[..., Any]:
    """An importable ``module.function`` (or ``module:function``): how a job names code for a worker."""
    module, sep, name = path.rpartition(":") if ":" in path else path.rpartition(".")
    if not sep or not module or not name:
        raise ValueError(f"{path!r}: expected module.function")
    obj = getattr(importlib.import_module(module), name)
    if not callable(obj):
        raise ValueError(f"{path!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _label(gpu: int | None) -> str:
    return "default device" if gpu is None else f"gpu {gpu}"


def _error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]


# --- the worker process ----------------------------------------------------------------------------


def _watch_parent(parent_pid: int) -> None:
    """Kill this worker and its children when the pool's process goes away (killed, crashed).

    Workers lead their own process group so a deadline can kill a job's whole tree; the price is
    that a signal to the parent's group no longer reaches them, hence this watchdog.
    """

    def loop() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                with contextlib.suppress(OSError):
                    os.killpg(0, signal.SIGKILL)
                os._exit(1)

    threading.Thread(target=loop, name="kernelopt-parent-watch", daemon=True).start()


def _worker_main(conn: Connection, env: dict[str, str], parent_pid: int, cpus: list[int] | None = None) -> None:
    """Run jobs sent over ``conn`` until told to stop; leave after a GPU failure (fresh CUDA state)."""
    os.environ.update(env)  # also set around start(); again here in case something read it early
    if cpus and hasattr(os, "sched_setaffinity"):
        # Its own cores, inherited by everything it starts: one worker's compilation cannot slow
        # down the host side of another worker's timing.
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)
    if hasattr(os, "setpgrp"):
        os.setpgrp()
        _watch_parent(parent_pid)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, fn_path, job = message
        reply: tuple[str, int, Any, str | None]
        try:
            reply = ("ok", index, resolve(fn_path)(job), None)
        except GpuFailure as exc:
            reply = ("gpu", index, exc.value, str(exc) or "GpuFailure")
        except BaseException as exc:  # noqa: BLE001 - every failure of a job is a result
            reply = ("gpu" if looks_like_gpu_failure(exc) else "error", index, None, _error_text(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - a result that cannot be pickled
            conn.send(("error", index, None, f"result could not be sent back: {_error_text(exc)}"))
        if reply[0] == "gpu":
            return  # a CUDA context that saw an error may stay broken: the pool starts a fresh worker


@contextlib.contextmanager
def _environ(updates: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``updates`` while a worker starts (a spawned child inherits it)."""
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# --- the pool --------------------------------------------------------------------------------------


@dataclass
class _Worker:
    slot: int
    gpu: int | None
    env: dict[str, str]
    cpus: list[int] | None = None
    process: BaseProcess | None = None
    conn: Connection | None = None
    ready: bool = False
    started: float = 0.0
    job: int | None = None
    job_started: float = 0.0
    failures: int = 0  # consecutive GPU failures (and failed starts)
    retired: bool = False


@dataclass
class _Book:
    """The pool's bookkeeping for one ``map``."""

    jobs: list[Any]
    pending: deque[int]
    results: list[JobResult | None]
    attempts: list[int]
    seconds: list[float]
    tried: list[set[int]] = field(default_factory=list)
    reasons: list[list[str]] = field(default_factory=list)


class GpuPool:
    """One worker per GPU; ``map`` runs jobs on them and returns results in job order.

    ``gpus`` are indices of the GPUs this process sees; ``[None]`` is one worker on the parent's own
    devices with its environment untouched (today's single-GPU or CPU behaviour). Use it as a
    context manager to keep the workers between several ``map`` calls.
    """

    def __init__(self, gpus: list[int | None], *, job_timeout_s: float, cores: int | None = None,
                 retries: int = 1, startup_timeout_s: float = STARTUP_TIMEOUT_S,
                 log: Callable[[str], Any] | None = None) -> None:
        if not gpus:
            raise ValueError("GpuPool needs at least one GPU")
        if None in gpus and len(gpus) > 1:
            raise ValueError("gpus=[None] (the default device) cannot be combined with GPU indices")
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"duplicate GPUs in {gpus}")
        self.gpus = list(gpus)
        self.job_timeout_s = job_timeout_s
        self.retries = retries
        self.startup_timeout_s = startup_timeout_s
        self.threads = compile_threads(cores if cores is not None else available_cores(), len(gpus))
        self._log = log or (lambda _msg: None)
        self._ctx = multiprocessing.get_context("spawn")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._visible = [v.strip() for v in visible.split(",")] if visible else None
        # The default worker keeps the whole machine, as a sequential run does.
        slices = [None] if self.gpus == [None] else cpu_slices(len(self.gpus), cores)
        self._workers = [_Worker(slot, gpu, self.worker_env(gpu), slices[slot]) for slot, gpu in enumerate(self.gpus)]
        self._started = False

    def worker_env(self, gpu: int | None) -> dict[str, str]:
        """What a worker's environment gets on top of ours: its GPU and its share of the cores."""
        if gpu is None:
            return {}  # the default single worker: exactly what a sequential run sees
        if self._visible is not None:
            if gpu >= len(self._visible):
                raise ValueError(f"GPU {gpu} is not visible (CUDA_VISIBLE_DEVICES={','.join(self._visible)})")
            device = self._visible[gpu]  # index into what we see, so 0 under CUDA_VISIBLE_DEVICES=2,3 is 2
        else:
            device = str(gpu)
        threads = str(self.threads)
        return {"CUDA_VISIBLE_DEVICES": device, COMPILE_THREADS_ENV: threads, INDUCTOR_THREADS_ENV: threads}

    # lifecycle

    def __enter__(self) -> GpuPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for w in self._workers:
            w.failures, w.retired = 0, False
            self._spawn(w)

    def close(self) -> None:
        """Stop every worker: idle ones are asked to leave, busy or stuck ones are killed."""
        asked = []
        for w in self._workers:
            if w.process is not None and w.process.is_alive() and w.job is None and w.conn is not None:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
                    asked.append(w)
        deadline = time.monotonic() + 5.0
        for w in asked:
            if w.process is not None:
                w.process.join(max(0.0, deadline - time.monotonic()))
        for w in self._workers:
            self._kill(w)  # also whatever a finished worker's jobs left running in its process group
            w.job = None
        self._started = False

    def _spawn(self, w: _Worker) -> None:
        parent_conn, child_conn = self._ctx.Pipe()
        # Not a daemon: a job may start processes of its own (Inductor's compile workers).
        process = self._ctx.Process(target=_worker_main, args=(child_conn, w.env, os.getpid(), w.cpus),
                                    name=f"kernelopt-{_label(w.gpu).replace(' ', '')}", daemon=False)
        with _environ(w.env):
            process.start()
        child_conn.close()
        w.process, w.conn, w.ready, w.started, w.job = process, parent_conn, False, time.monotonic(), None

    def _kill(self, w: _Worker) -> None:
        """Kill a worker and everything it started (it leads its own process group)."""
        process = w.process
        if process is not None:
            if process.pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)  # not yet a group leader: the next line
                with contextlib.suppress(OSError):
                    process.kill()
            process.join(5.0)
            with contextlib.suppress(ValueError):
                process.close()
        if w.conn is not None:
            w.conn.close()
        w.process, w.conn, w.ready = None, None, False

    # running jobs

    def map(self, fn_path: str, jobs: list[Any],
            on_result: Callable[[JobResult], Any] | None = None) -> list[JobResult]:
        """Run ``fn_path(job)`` for every job on the workers; results in job order.

        ``on_result`` is called in this process as each job finishes (e.g. to write a partial report).
        """
        if not jobs:
            return []
        owned = not self._started
        self.start()
        book = _Book(list(jobs), deque(range(len(jobs))), [None] * len(jobs), [0] * len(jobs),
                     [0.0] * len(jobs), [set() for _ in jobs], [[] for _ in jobs])
        remaining = len(jobs)
        # The first round waits until every worker is up, so job i starts on gpus[i]: reproducible.
        first_round = True
        try:
            while remaining:
                live = [w for w in self._workers if not w.retired]
                if not live:
                    for i in [*book.pending]:
                        remaining -= self._finish(book, i, False, None, "no worker could be started", None,
                                                  on_result)
                    book.pending.clear()
                    break
                if first_round and all(w.ready for w in live):
                    first_round = False
                if not first_round:
                    self._hand_out(book, live, fn_path)
                remaining -= self._wait(book, live, on_result)
        finally:
            if owned:
                self.close()
        return [r for r in book.results if r is not None]

    def _hand_out(self, book: _Book, live: list[_Worker], fn_path: str) -> None:
        for w in live:
            if not w.ready or w.job is not None or w.conn is None:
                continue
            index = self._next_for(w, book, live)
            if index is None:
                continue
            book.pending.remove(index)
            book.attempts[index] += 1
            w.job, w.job_started = index, time.monotonic()
            with contextlib.suppress(OSError, ValueError):  # a dead worker's sentinel tells us next
                w.conn.send((index, fn_path, book.jobs[index]))

    @staticmethod
    def _next_for(w: _Worker, book: _Book, live: list[_Worker]) -> int | None:
        """The first pending job this worker may take: not one that already failed on its GPU,
        unless no other live worker is left to try it."""
        slots = {x.slot for x in live}
        for index in book.pending:
            tried = book.tried[index]
            if w.slot not in tried or slots <= tried:
                return index
        return None

    def _wait(self, book: _Book, live: list[_Worker], on_result: Callable[[JobResult], Any] | None) -> int:
        """Wait for a message, a death or a deadline; returns how many jobs finished."""
        now = time.monotonic()
        deadlines = [w.job_started + self.job_timeout_s if w.job is not None else w.started + self.startup_timeout_s
                     for w in live if w.job is not None or not w.ready]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        handles: list[Any] = [w.conn for w in live if w.conn is not None]
        handles += [w.process.sentinel for w in live if w.process is not None]
        if not handles:
            return 0
        ready = set(wait(handles, timeout))
        done = 0
        for w in live:
            if w.conn is not None and w.conn in ready:
                done += self._read(w, book, on_result)
            if w.process is not None and (w.process.sentinel in ready or not w.process.is_alive()):
                if w.conn is not None and w.conn.poll():
                    done += self._read(w, book, on_result)  # its last words came with its death
                if w.process is not None and not w.process.is_alive():
                    reason = f"worker died (exit code {w.process.exitcode})"
                    done += self._device_failed(w, book, reason, None, on_result)
        now = time.monotonic()
        for w in live:
            if w.process is None:
                continue
            if w.job is not None and now > w.job_started + self.job_timeout_s:
                done += self._device_failed(w, book, f"exceeded its {self.job_timeout_s:g} s deadline", None,
                                            on_result)
            elif not w.ready and w.job is None and now > w.started + self.startup_timeout_s:
                done += self._device_failed(w, book, f"not ready after {self.startup_timeout_s:g} s", None,
                                            on_result)
        return done

    def _read(self, w: _Worker, book: _Book, on_result: Callable[[JobResult], Any] | None) -> int:
        assert w.conn is not None
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            return 0  # it died; the sentinel reports it
        kind = message[0]
        if kind == "ready":
            w.ready = True
            return 0
        _, index, value, error = message
        if index != w.job:
            return 0
        book.seconds[index] += time.monotonic() - w.job_started
        w.job = None
        if kind == "ok":
            w.failures = 0
            return self._finish(book, index, True, value, None, w.gpu, on_result)
        if kind == "error":
            w.failures = 0
            return self._finish(book, index, False, value, error, w.gpu, on_result)
        # A GPU failure: the worker leaves by itself; treat it as one whose device failed.
        w.job = index
        w.job_started = time.monotonic()  # its time was already counted
        return self._device_failed(w, book, error or "GPU failure", value, on_result)

    def _device_failed(self, w: _Worker, book: _Book, reason: str, value: Any,
                       on_result: Callable[[JobResult], Any] | None) -> int:
        """Kill and replace a worker; its current job (if any) is retried elsewhere or reported."""
        index = w.job
        if index is not None:
            book.seconds[index] += time.monotonic() - w.job_started
            book.tried[index].add(w.slot)
            book.reasons[index].append(f"{_label(w.gpu)}: {reason}")
        w.job = None
        self._kill(w)
        final = index is not None and book.attempts[index] > self.retries
        if index is not None and not final and _ran_out_of_time(reason):
            # A job that outlived its deadline would most likely do so again on the same GPU:
            # it is retried only where it has not run yet, else reported now (no second wait).
            untried = [x for x in self._workers if not x.retired and x.slot not in book.tried[index]]
            final = not untried
        if final and index is not None and len(book.tried[index]) > 1:
            # It failed on every GPU it tried: the job is to blame, not those GPUs.
            for x in self._workers:
                if x.slot in book.tried[index] and x is not w:
                    x.failures = max(0, x.failures - 1)
        else:
            w.failures += 1
        others = [x for x in self._workers if not x.retired and x is not w]
        if w.failures >= RETIRE_AFTER and (others or index is None):
            w.retired = True
            self._log(f"{_label(w.gpu)}: given up after {w.failures} failures in a row ({reason})")
        else:
            self._spawn(w)
        if index is None:
            self._log(f"{_label(w.gpu)}: worker restarted ({reason})")
            return 0
        if not final:
            self._log(f"job {index} on {_label(w.gpu)}: {reason}; retrying it")
            book.pending.appendleft(index)
            return 0
        return self._finish(book, index, False, value, "; ".join(book.reasons[index]), w.gpu, on_result)

    @staticmethod
    def _finish(book: _Book, index: int, ok: bool, value: Any, error: str | None, gpu: int | None,
                on_result: Callable[[JobResult], Any] | None) -> int:
        result = JobResult(index, ok, value, error, gpu, book.attempts[index], round(book.seconds[index], 3))
        book.results[index] = result
        if on_result is not None:
            on_result(result)
        return 1
