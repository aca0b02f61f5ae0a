"""The compile process (issue 12): variants compile into the Triton cache in a process that is
killed at its deadline and replaced after a crash, so neither a hung nor a crashing compile
reaches the engine. Compiling for a real GPU target needs one (tests/gpu/test_engine_restart.py
checks the cache it fills there); here the jobs are module texts that hang, crash or fail."""

from __future__ import annotations

import time

from kernelopt_bot.harness.compile_pool import LATE, CompilePool, start_pool

HANGS = "import time\ntime.sleep(600)\n"
CRASHES = "import ctypes\nctypes.string_at(0)\n"
FAILS = "raise RuntimeError('this kernel does not compile')\n"
NO_KERNEL = "x = 1\n"


def test_a_failing_compile_is_its_error_and_the_process_stays() -> None:
    pool = CompilePool(2)
    try:
        results = pool.warm([(FAILS, "k"), (NO_KERNEL, "k")], 120)
        assert results[0] is not None and "does not compile" in results[0]
        assert results[1] is not None and "has no attribute 'k'" in results[1]
        assert pool.warm([(FAILS, "k")], 120)[0] is not None
        assert pool.started == 1 and pool.killed == 0
    finally:
        pool.close()


def test_a_hung_compile_is_killed_at_its_deadline_with_its_process() -> None:
    pool = CompilePool(2)
    try:
        pool.warm([(FAILS, "k")], 120)  # started and ready: the deadline below is the compile's alone
        start = time.monotonic()
        results = pool.warm([(HANGS, "k"), (FAILS, "k")], 3.0)
        assert time.monotonic() - start < 15
        assert results[0] == LATE and "does not compile" in str(results[1])
        assert pool.killed == 1
        assert "does not compile" in str(pool.warm([(FAILS, "k")], 120)[0])  # a new process serves on
        assert pool.started == 2
    finally:
        pool.close()


def test_a_crashing_compile_takes_only_its_child() -> None:
    """Each part of a batch compiles in a forked child: a crash loses the variant that caused it,
    the jobs after it in the same child go to a new child, and the compile process stays."""
    pool = CompilePool(1)
    try:
        results = pool.warm([(FAILS, "k"), (CRASHES, "k"), (NO_KERNEL, "k")], 120)
        assert "does not compile" in str(results[0])
        assert results[1] is not None and "crashed" in results[1] and "signal 11" in results[1]
        assert "has no attribute 'k'" in str(results[2])  # compiled after the crash, in a new child
        assert pool.started == 1 and pool.killed == 0
    finally:
        pool.close()


def test_a_batch_compiles_in_parallel_processes() -> None:
    """Two jobs that each take 1.5 s of Python (at import, like the front end's, which threads in
    one process would run one at a time under the GIL) finish together in two children."""
    busy = "t = __import__('time').perf_counter()\nwhile __import__('time').perf_counter() - t < 1.5:\n    pass\n"
    pool = CompilePool(2)
    try:
        pool.warm([(FAILS, "k")], 120)  # up: the timing below is the batch's alone
        start = time.monotonic()
        results = pool.warm([(busy, "k")] * 2, 120)
        took = time.monotonic() - start
        assert all("has no attribute 'k'" in str(r) for r in results), results
        assert took < 2.6, f"two 1.5-second jobs took {took:.1f} s"
    finally:
        pool.close()


def test_no_pool_for_the_interpreter() -> None:
    assert start_pool("cpu", 4) is None


def test_a_batch_before_the_process_is_up_does_not_wait_for_it() -> None:
    pool = CompilePool(1)
    try:
        pool.prestart()
        assert pool.ready_now() is False  # it is importing torch: the caller compiles this batch itself
        _wait_until_up(pool)
        assert "does not compile" in str(pool.warm([(FAILS, "k")], 60)[0]) and pool.started == 1
    finally:
        pool.close()


def test_a_killed_process_is_started_again_for_the_next_batch() -> None:
    pool = CompilePool(1)
    try:
        pool.warm([(FAILS, "k")], 120)
        pool.warm([(HANGS, "k")], 2.0)  # killed at its deadline
        assert pool.killed == 1 and pool.ready_now() is False  # a new one is starting
        assert pool.started == 2
        _wait_until_up(pool)
        assert "does not compile" in str(pool.warm([(FAILS, "k")], 60)[0]) and pool.started == 2
    finally:
        pool.close()


def _wait_until_up(pool: CompilePool, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not pool.ready_now():
        assert time.monotonic() < deadline, "the compile process did not come up"
        time.sleep(0.2)
