"""Where a model arm's host work runs while it is timed.

On the H200, a launch-bound network (1 ms a call, the host queueing its kernels) timed in three
arm processes left to the scheduler measured 0.8 ms in one round and 1.5 ms in the next, arm by
arm: a noise floor of 57-80%. The same bench with every process on one core measured 0.80 ms in
every arm and round, a noise floor of 3%. So each arm, once compiled (compiling wants every core),
moves all its threads to one timing core, the same for every arm of a run (they are asked in turn,
never at once): the last core this process may use (core 0 takes most of a machine's interrupts),
so jobs that a fleet gave disjoint CPU sets time on different cores.

The parent that asks the arms in turn (the engine, or ``kernelopt bench``) keeps the calling
thread on that core too while it compares them (:func:`this_thread_on`), as ``taskset`` had it:
each request then wakes its arm on the core the parent just ran on, kept busy by the hand-offs,
instead of waking an idle core from another one.

Pinned that way, the arms still measured 1.4 ms a call and a 19% noise floor where the whole bench
under ``taskset`` measured 0.8 ms and 3%: a process started on every core sized torch's CPU thread
pool for every core, and after a parallel region (the inputs drawn on the CPU each request) those
threads spin-wait, now on the one core the arm launches kernels from. :func:`time_on_one_core`
also shrinks the pool to one thread, as ``taskset`` at start-up did.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def timing_core() -> int | None:
    """The core arms time on: the last of this process's allowed cores (None: no affinity API)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    return allowed[-1] if allowed else None


def pin_process(core: int | None) -> bool:
    """Move every thread of this process to ``core`` (threads started later inherit it from the
    one that starts them). False where the platform cannot (the arm then times as it is)."""
    if core is None or not os.path.isdir("/proc/self/task"):
        return False
    moved = False
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError, ValueError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), {core})
            moved = True
    return moved


def time_on_one_core() -> int | None:
    """This process from now on does its host work on the timing core alone: every thread moved
    there and torch's CPU parallelism cut to one thread (its pool's idle workers would otherwise
    spin on that core after each parallel region). Returns the core, or None where nothing moved."""
    import torch

    core = timing_core()
    if not pin_process(core):
        return None
    torch.set_num_threads(1)
    return core


@contextlib.contextmanager
def this_thread_on(core: int | None) -> Iterator[bool]:
    """The calling thread alone runs on ``core`` inside the block, and where it may run before
    afterwards (the process's other threads, a search's compile pool among them, keep every core).
    Yields whether it moved (not where the platform cannot, or ``core`` is None)."""
    try:
        before = os.sched_getaffinity(0) if core is not None else None
        if before is not None:
            os.sched_setaffinity(0, {core})
    except (AttributeError, OSError, ValueError):
        before = None
    try:
        yield before is not None
    finally:
        if before is not None:
            with contextlib.suppress(OSError, ValueError):
                os.sched_setaffinity(0, before)
