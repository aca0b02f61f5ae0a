"""Fill the compiler's caches for several suite problems at once, before they are timed one by one.

A ``kernelopt bench`` of a problem the caches have not seen spends most of its minute compiling:
its arms compile cold side by side, and each is then replaced by a process that loads the
compile from the cache (a cold start's offset would otherwise stay in the measurement:
``ArmProcess``'s warm load). Measuring the noise floor of every problem of ``benchmarks/`` one
after the other so costs about 50 s a problem on the GPU machine. Compiling them first, several at
once, is meant to leave the timed benches nothing to do but load: what they measure is unchanged
(every arm starts from the cache, as a run's final benchmark does), and nothing is timed while
this runs.

Each problem compiles in a model arm started exactly as a bench starts its arms (``ArmProcess``:
the same isolation wrapper, environment, private home and target path), not in a process of this
script's own. Why: on the H200 (12-05e) the first version compiled in a plain spawned process, and
35 of 51 arms then missed its compile and compiled cold, while every arm that replaced a cold
start loaded what that cold start (an arm) had stored. On the CPU both kinds of process load each
other's compiles, so whatever in Inductor's key differs, it differs between the two ways of
starting a process on the GPU machine. ``--keys`` records the keys the warm stored under, for
``scripts/cache_keys.py`` to compare with the arms'.

Usage: python scripts/warm_cache.py [--jobs 6] [--deadline 300] [--device cuda] [--keys keys.json] level1/x.py:bf16 level3/y.py:fp32 ...
(paths under benchmarks/; a failure is reported and leaves that problem to compile in its bench).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
sys.path.insert(0, str(ROOT))

BENCHMARKS = ROOT / "benchmarks"


def parse_spec(spec: str) -> tuple[str, str]:
    """``level1/x.py:bf16`` as (the file under benchmarks/, the dtype)."""
    path, sep, dtype = spec.rpartition(":")
    if not sep or not path or dtype not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"{spec!r}: expected level/file.py:dtype (dtype fp32, bf16 or fp16)")
    return str(BENCHMARKS / path), dtype


def spec_of(target: str, dtype: str) -> str:
    """A target's path (``benchmarks/level1/x.py``, relative or not) and dtype as the problem's
    spec, ``level1/x.py:bf16``: what :func:`parse_spec` reads, for the scripts that map results
    back to the problems they measured."""
    parts = Path(target).parts
    return f"{'/'.join(parts[-2:])}:{dtype}"


def bench_target(path: str) -> str:
    """The target as a bench run from the current folder names it (``benchmarks/level1/x.py``
    from the repository's root, where the GPU check runs both): an arm gets the path it is given,
    so the warm gives the same one (an absolute path from elsewhere)."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


MIN_START_S = 5.0  # a compile is not started with less of the deadline left: it could not finish


class NotStarted(Exception):
    """A problem's turn came too close to the deadline, or after an interrupt: nothing started."""


class Warm:
    """The problems' compiles, each in its own model arm, at most ``jobs`` at once; ``stop``
    (an interrupt) closes the arms still compiling and starts no more."""

    def __init__(self, device: str, deadline: float) -> None:
        self.device, self.deadline = device, deadline
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._arms: set[Any] = set()

    def one(self, spec: str) -> tuple[str, list[dict[str, Any]]]:
        """Compile one problem in a model arm started as a bench's are, then close it: a line
        saying how, and the cache keys it stored under (``scripts/cache_keys.py`` compares them
        with the arms')."""
        from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec

        path, dtype = parse_spec(spec)
        start = time.monotonic()
        if self.deadline - start < MIN_START_S:
            raise NotStarted(f"its turn came {MIN_START_S:.0f} s or less before the deadline")
        with self._lock:
            if self._stopped.is_set():
                raise NotStarted("interrupted")
            arm = ArmProcess(ArmSpec(label="warm", target=bench_target(path), device=self.device, dtype=dtype),
                             start_timeout_s=self.deadline - start)
            self._arms.add(arm)
        try:
            info = arm.wait_ready()
        finally:
            arm.close()
            with self._lock:
                self._arms.discard(arm)
        counts = info.get("cache") or {}
        cache = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        return f"{spec}: compiled in {time.monotonic() - start:.1f} s (cache: {cache or 'not counted'})", \
            info.get("cache_keys") or []

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()
            arms = list(self._arms)
        for arm in arms:  # kills one still compiling; its thread's wait then ends
            arm.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", help="level/file.py:dtype under benchmarks/")
    parser.add_argument("--jobs", type=int, default=6, help="problems compiled at once")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the arms will run (cpu: the Triton interpreter, as kernelopt bench's)")
    parser.add_argument("--deadline", type=float, default=300.0,
                        help="seconds the whole warm may take (a compile still running then is killed, "
                             "which takes a few seconds more)")
    parser.add_argument("--keys", type=Path, help="write each problem's cache keys here (JSON)")
    args = parser.parse_args(argv)
    try:
        for spec in args.problems:
            parse_spec(spec)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from kernelopt_bot.harness.arm_process import ArmRaised, ArmTimeout

    # The arms get this process's import path as their PYTHONPATH: without this script's folder,
    # and without the root put first for it where the root is on the path anyway (the GPU check
    # puts it on PYTHONPATH), it is a bench's.
    rest = [p for p in sys.path[1:] if p and Path(p).resolve() != SCRIPTS]
    sys.path[:] = rest if any(Path(p).resolve() == ROOT for p in rest) else [str(ROOT), *rest]
    start, failed, keys = time.monotonic(), 0, {}
    warm = Warm(args.device, start + args.deadline)
    # Threads only wait: each problem compiles in its own arm process (its Dynamo and Inductor
    # state, and its GPU memory, go with it), at most --jobs at once.
    pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    try:
        pending = [(spec, pool.submit(warm.one, spec)) for spec in args.problems]
        for spec, future in pending:
            try:
                line, keys[spec] = future.result()
                print(line, flush=True)
            except NotStarted as exc:
                failed += 1
                print(f"{spec}: not warmed ({exc})", flush=True)
            except ArmTimeout:
                failed += 1
                print(f"{spec}: not warmed (still compiling at the {args.deadline:.0f} s deadline)", flush=True)
            except ArmRaised as exc:  # the problem's own error, without the arm's traceback
                failed += 1
                print(f"{spec}: not warmed ({exc.payload.split(' | ')[0][:200]})", flush=True)
            except Exception as exc:  # noqa: BLE001 - one problem's failure leaves it to compile in its own bench
                failed += 1
                print(f"{spec}: not warmed ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
    except BaseException:  # an interrupt: nothing more starts, what compiles is killed
        warm.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    if args.keys is not None:
        args.keys.write_text(json.dumps(keys, indent=1))
    print(f"warmed {len(args.problems) - failed} of {len(args.problems)} problems in {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
