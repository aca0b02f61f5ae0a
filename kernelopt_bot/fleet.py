"""One fleet runner for the suite and the nightly sweep: a batch of ``kernelopt optimize`` runs on a
set of GPUs, or one after another on the default device.

A job is one run of the engine's CLI on one target, in a process of its own
(:mod:`kernelopt_bot.job_process`: its own process group and deadline, a scrubbed environment)
that sees one GPU as ``cuda:0`` with a share of the CPU (:mod:`kernelopt_bot.gpu_pool`), writes its
console to the job folder's ``optimize.log`` and its verdict to ``result.json``. That process is
the isolation: a crash, a hang or a poisoned CUDA context costs it alone, so a thread waiting on
each running job is all the machinery needed here.

What comes back is always a :class:`~kernelopt_bot.result.RunResult`: the run's own when the CLI
exited as it documents (0: completed, 1: the run failed) with a result.json; otherwise a failed one
saying what went wrong around the run (its deadline and the last step it logged, the CLI's error
line, a crash) - never a verdict on kernels. A job that timed out, crashed or failed the way a GPU
fails is retried once on a GPU it has not run on, when there is one; a GPU that failed three jobs
in a row is given up while others remain.
"""

from __future__ import annotations

import queue
import re
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelopt_bot.gpu_pool import (
    available_cores,
    compile_threads,
    cpu_slices,
    gpu_environment,
    looks_like_gpu_failure,
)
from kernelopt_bot.harness.isolation import describe_exit
from kernelopt_bot.job_process import TIMED_OUT, Exit, job_environment, run_command
from kernelopt_bot.result import RunResult

OPTIMIZE: tuple[str, ...] = (sys.executable, "-m", "kernelopt_bot.cli", "optimize")
LOG_NAME = "optimize.log"  # the run's console, kept also when it is killed: where did it stop?
CLI_EXITS = (0, 1, 2)  # kernelopt's own exit codes: completed, run failed, bad input; others are crashes
RETRIES = 1
RETIRE_AFTER = 3  # failures in a row after which a GPU is given up (while others remain)
MAX_REASON = 500  # characters of a log line kept as a failure's reason


@dataclass(frozen=True)
class FleetJob:
    """One ``kernelopt optimize TARGET`` run into ``out`` (its own folder) within ``timeout_s``."""

    name: str  # the target's name, for a result the fleet writes itself
    target: str
    dtype: str
    out: Path
    timeout_s: float
    device: str | None = None
    flags: tuple[str, ...] = ()  # optimize's other options (--budget, --gamma, --store, ...)
    # Where the run starts: a ``pkg.mod:factory`` target is imported from there (a repository). Only
    # the engine puts it on its import path: the optimize process holding a key runs with
    # PYTHONSAFEPATH, so a repository's ``yaml.py`` cannot shadow what it imports.
    cwd: Path | None = None
    secrets: tuple[str, ...] = ()  # variables the trusted optimize process keeps; all others are scrubbed

    @property
    def label(self) -> str:
        return self.out.name

    def argv(self, command: Sequence[str]) -> list[str]:
        device = ["--device", self.device] if self.device else []
        return [*command, self.target, "--dtype", self.dtype, *device, *self.flags, "--out", str(self.out.resolve())]

    def failed(self, reason: str, seconds: float) -> RunResult:
        """The result of a run that left none of its own: failed, for ``reason``."""
        result = RunResult(target=self.target, name=self.name, device=self.device or "auto", dtype=self.dtype,
                           status="failed", error=reason)
        result.seconds = round(seconds, 3)
        return result


@dataclass
class FleetResult:
    """A job's RunResult, where and how it was had. ``gpu`` ran the last attempt (None: the default
    device); ``seconds`` adds up the attempts' processes."""

    index: int
    job: FleetJob
    result: RunResult
    gpu: int | None
    attempts: int
    seconds: float
    after: Any = None  # what the ``after`` step returned for it


# Runs a command where a job runs (its GPU, environment and CPUs): argv, log file, deadline.
OnSlot = Callable[[Sequence[str], Path, float], Exit]


# --- reading a run back ------------------------------------------------------------------------------


def _lines(path: Path) -> list[str]:
    try:
        return [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def last_error_line(path: Path) -> str | None:
    """The CLI's own error line (``error: ...``), the last one."""
    errors = [line for line in _lines(path) if line.lower().startswith("error")]
    return errors[-1] if errors else None


# A pipeline step as optimize logs it: ``12:03:41 loading the target (107 s left)``, or in the
# older form ``[  42 s] searching ...``.
_STEP_LINE = re.compile(r"^(\d\d:\d\d:\d\d |\[\s*\d+ s\] )")


def last_step(path: Path) -> str | None:
    """The last pipeline step a run logged before it stopped."""
    steps = [line for line in _lines(path) if _STEP_LINE.match(line)]
    return steps[-1][:120] if steps else None


def _read_result(path: Path) -> RunResult | None:
    """The run's result.json, or None when it is missing or not one (the engine, which runs the
    target's code, can write there: whatever it holds is this job's failure, never the batch's)."""
    try:
        return RunResult.load(path)
    except Exception:  # noqa: BLE001 - any content at all is possible
        return None


def _why(code: int, log: Path) -> str:
    """Why a run that exited by itself left no verdict: the CLI's own error line, else how it ended."""
    line = last_error_line(log)
    if line:
        return line[:MAX_REASON]
    if code in (0, 1):
        return f"{describe_exit(code)} without a readable result.json"
    last = (_lines(log) or [""])[-1][:MAX_REASON]
    return describe_exit(code) + (f": {last}" if last else "")


def read_outcome(job: FleetJob, ended: Exit) -> tuple[RunResult, bool]:
    """The attempt's RunResult, and whether it failed the way a GPU or the machine fails (a
    deadline, a crash, a CUDA error): worth another GPU. A result this side had to make or amend
    is written to the job's result.json, so the folder always holds the answer."""
    log = job.out / LOG_NAME
    own = _read_result(job.out / "result.json")
    if ended.timed_out or ended.stopped:
        step = last_step(log)
        reason = f"{TIMED_OUT} {job.timeout_s:.0f} s" if ended.timed_out else "stopped: the fleet was interrupted"
        result = job.failed(reason + (f" (last step: {step})" if step else ""), ended.seconds)
    elif own is not None and ended.code in (0, 1):
        return own, own.status != "ok" and looks_like_gpu_failure(own.error)
    else:
        reason = _why(ended.code, log)
        result = own or job.failed(reason, ended.seconds)
        result.status, result.error = "failed", reason
    result.save(job.out / "result.json")
    crashed = not ended.stopped and ended.code not in CLI_EXITS
    return result, ended.timed_out or crashed or looks_like_gpu_failure(result.error)


# --- the fleet ---------------------------------------------------------------------------------------


@dataclass
class _Slot:
    """One GPU (or the default device): runs one job at a time."""

    index: int
    gpu: int | None
    env: dict[str, str]  # on top of the scrubbed environment: the GPU and its compile threads
    cpus: list[int] | None
    busy: bool = False
    failures: int = 0  # retry-worthy failures in a row
    retired: bool = False

    @property
    def label(self) -> str:
        return "default device" if self.gpu is None else f"gpu {self.gpu}"


@dataclass
class _Attempt:
    """What a slot's thread hands back to the dispatcher."""

    slot: _Slot
    index: int
    result: RunResult | None = None
    retry: bool = False
    seconds: float = 0.0
    after: Any = None
    error: BaseException | None = None  # a bug in the ``after`` step, raised by ``run``


class _Book:
    """The bookkeeping of one :meth:`Fleet.run`."""

    def __init__(self, jobs: list[FleetJob]) -> None:
        self.jobs = jobs
        self.pending: deque[int] = deque(range(len(jobs)))
        self.attempts = [0] * len(jobs)
        self.seconds = [0.0] * len(jobs)
        self.tried: list[set[int]] = [set() for _ in jobs]
        self.reasons: list[list[str]] = [[] for _ in jobs]
        self.results: list[FleetResult | None] = [None] * len(jobs)

    def next_for(self, slot: _Slot, live: list[_Slot]) -> int | None:
        """The first pending job this slot may take: not one that already failed on it, unless
        every live slot has tried that job."""
        slots = {s.index for s in live}
        for index in self.pending:
            if slot.index not in self.tried[index] or slots <= self.tried[index]:
                return index
        return None


class Fleet:
    """Runs :class:`FleetJob` batches: one job at a time per GPU of ``gpus`` (indices of the GPUs
    this process sees), or one after another on the default device (``gpus=None``: the
    environment's own ``CUDA_VISIBLE_DEVICES``, the whole CPU). ``command`` is the optimize
    command line (tests put a stand-in there)."""

    def __init__(self, gpus: Sequence[int] | None = None, *, cores: int | None = None,
                 command: Sequence[str] | None = None, log: Callable[[str], Any] | None = None) -> None:
        if gpus is None:
            self._slots = [_Slot(0, None, {}, None)]
        else:
            if not gpus:
                raise ValueError("a fleet needs at least one GPU (None: the default device)")
            if len(set(gpus)) != len(gpus):
                raise ValueError(f"duplicate GPUs in {list(gpus)}")
            threads = compile_threads(cores if cores is not None else available_cores(), len(gpus))
            slices = cpu_slices(len(gpus), cores)
            self._slots = [_Slot(k, gpu, gpu_environment(gpu, threads), slices[k]) for k, gpu in enumerate(gpus)]
        self.command = tuple(command or OPTIMIZE)
        self._log = log or (lambda _msg: None)

    def run(self, jobs: Iterable[FleetJob], *, on_result: Callable[[FleetResult], Any] | None = None,
            after: Callable[[FleetJob, RunResult, OnSlot], Any] | None = None) -> list[FleetResult]:
        """Run every job; results in job order.

        ``on_result`` is called here as each job is done (to write a partial report, say).
        ``after(job, result, on_slot)`` runs once a job's run is over and not to be retried, before
        its GPU takes another job: work that needs that GPU to itself (the suite's reference
        measurement, through ``on_slot``); what it returns is the result's ``after``.
        """
        book = _Book(list(jobs))
        for slot in self._slots:
            slot.busy, slot.failures, slot.retired = False, 0, False
        done: queue.SimpleQueue[_Attempt] = queue.SimpleQueue()
        stop = threading.Event()
        threads: list[threading.Thread] = []
        remaining = len(book.jobs)
        try:
            while remaining:
                live = [s for s in self._slots if not s.retired]
                for slot in live:
                    index = None if slot.busy else book.next_for(slot, live)
                    if index is None:
                        continue
                    book.pending.remove(index)
                    book.attempts[index] += 1
                    slot.busy = True
                    self._log(f"{book.jobs[index].label}: started on {slot.label}")
                    thread = threading.Thread(target=self._attempt, args=(slot, index, book.jobs[index], after, stop,
                                                                          done), name=f"kernelopt-fleet-{slot.index}")
                    thread.start()
                    threads.append(thread)
                if not any(s.busy for s in self._slots):
                    raise RuntimeError("fleet: jobs are left but no GPU may take them")
                attempt = done.get()
                if attempt.error is not None:
                    raise attempt.error
                remaining -= self._settle(book, attempt, on_result)
        finally:
            stop.set()  # a job still running (the caller failed) is ended with its group
            for thread in threads:
                thread.join()
        return [r for r in book.results if r is not None]

    def _attempt(self, slot: _Slot, index: int, job: FleetJob,
                 after: Callable[[FleetJob, RunResult, OnSlot], Any] | None, stop: threading.Event,
                 done: queue.SimpleQueue[_Attempt]) -> None:
        """One attempt of ``job`` on ``slot`` (in a thread of its own); always reports to ``done``."""
        attempt = _Attempt(slot, index)
        try:
            with tempfile.TemporaryDirectory(prefix="kernelopt-job-", ignore_cleanup_errors=True) as home:
                # The secrets a job names reach its optimize process only (which keeps them from the
                # engine); an ``after`` step (it may load the target, as `kernelopt modes` does) gets none.
                trusted = job_environment(home, slot.env, secrets=job.secrets)
                plain = job_environment(home, slot.env)

                def run(argv: Sequence[str], log_path: Path, timeout_s: float, env: dict[str, str]) -> Exit:
                    return run_command(argv, env=env, log_path=log_path, timeout_s=timeout_s, cpus=slot.cpus,
                                       stop=stop, cwd=job.cwd)

                def on_slot(argv: Sequence[str], log_path: Path, timeout_s: float) -> Exit:
                    return run(argv, log_path, timeout_s, plain)

                job.out.mkdir(parents=True, exist_ok=True)
                (job.out / "result.json").unlink(missing_ok=True)  # the verdict read back is this attempt's
                try:
                    ended = run(job.argv(self.command), job.out / LOG_NAME, job.timeout_s, trusted)
                except OSError as exc:  # the command itself could not start: the same everywhere
                    attempt.result = job.failed(f"could not start {self.command[0]}: {exc}", 0.0)
                    attempt.result.save(job.out / "result.json")
                else:
                    attempt.result, attempt.retry = read_outcome(job, ended)
                    attempt.seconds = ended.seconds
                if after is not None and not attempt.retry and not stop.is_set():
                    attempt.after = after(job, attempt.result, on_slot)
        except BaseException as exc:  # noqa: BLE001 - handed to the dispatcher, which raises it
            attempt.error = exc
        done.put(attempt)

    def _settle(self, book: _Book, attempt: _Attempt, on_result: Callable[[FleetResult], Any] | None) -> int:
        """Book an attempt: the job is done (returns 1), or queued again for another GPU (0)."""
        slot, index, result = attempt.slot, attempt.index, attempt.result
        assert result is not None
        slot.busy = False
        book.seconds[index] += attempt.seconds
        book.tried[index].add(slot.index)
        if not attempt.retry:
            slot.failures = 0
        else:
            book.reasons[index].append(f"{slot.label}: {result.error}")
            untried = [s for s in self._slots if not s.retired and s.index not in book.tried[index]]
            if book.attempts[index] <= RETRIES and untried:
                self._failed_on(slot, result.error)
                self._log(f"{book.jobs[index].label} on {slot.label}: {result.error}; retrying it on another GPU")
                book.pending.appendleft(index)
                return 0
            if len(book.tried[index]) > 1:
                # It failed on every GPU it tried: the job is to blame, not those GPUs.
                for other in self._slots:
                    if other.index in book.tried[index] and other is not slot:
                        other.failures = max(0, other.failures - 1)
                result.error = "; ".join(book.reasons[index])
                result.save(book.jobs[index].out / "result.json")
            else:
                self._failed_on(slot, result.error)
        book.results[index] = finished = FleetResult(index, book.jobs[index], result, slot.gpu, book.attempts[index],
                                                     round(book.seconds[index], 3), attempt.after)
        if on_result is not None:
            on_result(finished)
        return 1

    def _failed_on(self, slot: _Slot, reason: str | None) -> None:
        slot.failures += 1
        if slot.failures >= RETIRE_AFTER and any(not s.retired and s is not slot for s in self._slots):
            slot.retired = True
            self._log(f"{slot.label}: given up after {slot.failures} failures in a row ({reason})")
