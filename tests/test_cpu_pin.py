"""Arms time on one core (harness.cpu_pin): the H200 measured a launch-bound network's noise floor
at 57-80% with arms left to the scheduler and 3% with them on one core."""

from __future__ import annotations

import json
import os
import threading

import pytest

from kernelopt_bot.harness.cpu_pin import pin_process, timing_core

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc/self/task"),
                                    reason="needs Linux's CPU affinity")


@needs_affinity
def test_every_thread_of_the_process_moves_to_the_timing_core() -> None:
    """In a child process (the test's own process keeps its cores): threads already running move
    too, and the core is the last this process may use."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: start a thread, pin, report both threads' cores
        try:
            started, stop = threading.Event(), threading.Event()
            seen: dict[str, set[int]] = {}

            def other() -> None:
                started.set()
                stop.wait()
                seen["other"] = os.sched_getaffinity(0)

            thread = threading.Thread(target=other)
            thread.start()
            started.wait()
            core = timing_core()
            ok = pin_process(core)
            stop.set()
            thread.join()
            os.write(write, json.dumps([core, ok, sorted(os.sched_getaffinity(0)), sorted(seen["other"])]).encode())
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
