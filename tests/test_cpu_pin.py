"""Arms time on one core (harness.cpu_pin): the H200 measured a launch-bound network's noise floor
at 57-80% with arms left to the scheduler and 3% with them on one core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from kernelopt_bot.harness.cpu_pin import pin_process, this_thread_on, timing_core

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc/self/task"),
                                    reason="needs Linux's CPU affinity")


class _WaitingThread:
    """A thread started now that waits until :meth:`cores` asks where it may run then."""

    def __init__(self) -> None:
        self._started, self._stop = threading.Event(), threading.Event()
        self._cores: set[int] = set()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        self._started.set()
        self._stop.wait()
        self._cores = os.sched_getaffinity(0)

    def cores(self) -> set[int]:
        """The cores the thread may run on as it ends (it ends here)."""
        self._stop.set()
        self._thread.join()
        return self._cores


@needs_affinity
def test_every_thread_of_the_process_moves_to_the_timing_core() -> None:
    """In a child process (the test's own process keeps its cores): threads already running move
    too, and the core is the last this process may use."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: start a thread, pin, report both threads' cores
        try:
            other = _WaitingThread()
            core = timing_core()
            ok = pin_process(core)
            os.write(write, json.dumps([core, ok, sorted(os.sched_getaffinity(0)), sorted(other.cores())]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    core, ok, main_cores, other_cores = json.loads(text)
    assert core == max(os.sched_getaffinity(0))
    assert ok and main_cores == [core] and other_cores == [core]


def test_no_core_means_nothing_is_pinned() -> None:
    assert pin_process(None) is False


@needs_affinity
def test_time_on_one_core_also_cuts_torchs_cpu_threads_to_one() -> None:
    """A process started on every core sizes torch's thread pool for all of them; pinned without
    shrinking it, the pool's idle workers spin on the one core the arm launches from (the H200:
    1.4 ms a call pinned, 0.8 ms under taskset). In a process of its own, started as an arm is
    (a fork of this one would inherit whatever thread pools the test session has made)."""
    script = textwrap.dedent("""
        import json, os, torch
        from kernelopt_bot.harness.cpu_pin import time_on_one_core
        torch.set_num_threads(max(2, len(os.sched_getaffinity(0))))
        torch.ones(1 << 16).sum()  # a parallel region: the pool's threads exist now
        core = time_on_one_core()
        print(json.dumps([core, torch.get_num_threads(), sorted(os.sched_getaffinity(0))]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    core, threads, cores = json.loads(proc.stdout.strip().splitlines()[-1])
    assert core == max(os.sched_getaffinity(0))
    assert threads == 1 and cores == [core]


@needs_affinity
def test_the_comparing_thread_times_on_the_arms_core_and_gets_its_cores_back() -> None:
    """The parent that asks the arms in turn runs on their timing core while it compares them
    (as under ``taskset``), and only its calling thread: a thread started before keeps its cores."""
    cores = os.sched_getaffinity(0)
    core = timing_core()
    other = _WaitingThread()
    with this_thread_on(core) as moved:
        inside = os.sched_getaffinity(0)
        other_cores = other.cores()
    assert moved and inside == {core}
    assert other_cores == cores and os.sched_getaffinity(0) == cores


def test_no_core_leaves_the_thread_where_it_was() -> None:
    with this_thread_on(None) as moved:
        assert moved is False
