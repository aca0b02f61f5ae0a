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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


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
    """The target as the GPU check's benches name it (``benchmarks/level1/x.py`` from the
    repository's root): an arm gets the path it is given, so the warm gives the same one."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def warm_one(spec: str, device: str, deadline: float) -> tuple[str, list[dict[str, Any]]]:
    """Compile one problem in a model arm started as a bench's are, then close it: a line saying
    how, and the cache keys it stored under (``scripts/cache_keys.py`` compares them with the
    arms'). ``deadline``: ``time.monotonic()`` by which the compile must be done (killed after)."""
    from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec, ArmTimeout

    path, dtype = parse_spec(spec)
    start = time.monotonic()
    if deadline <= start:  # its turn came after the deadline: nothing is started
        raise ArmTimeout(f"{spec}: not started before the deadline")
    with ArmProcess(ArmSpec(label="warm", target=bench_target(path), device=device, dtype=dtype),
                    start_timeout_s=deadline - start) as arm:
        info = arm.wait_ready()
    counts = info.get("cache") or {}
    cache = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    return f"{spec}: compiled in {time.monotonic() - start:.1f} s (cache: {cache or 'not counted'})", \
        info.get("cache_keys") or []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", help="level/file.py:dtype under benchmarks/")
    parser.add_argument("--jobs", type=int, default=6, help="problems compiled at once")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the arms will run (cpu: the Triton interpreter, as kernelopt bench's)")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds the whole warm may take")
    parser.add_argument("--keys", type=Path, help="write each problem's cache keys here (JSON)")
    args = parser.parse_args(argv)
    try:
        for spec in args.problems:
            parse_spec(spec)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from kernelopt_bot.harness.arm_process import ArmRaised, ArmTimeout

    start, failed, keys = time.monotonic(), 0, {}
    deadline = start + args.deadline
    # Threads only wait: each problem compiles in its own arm process (its Dynamo and Inductor
    # state, and its GPU memory, go with it), at most --jobs at once.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        pending = [(spec, pool.submit(warm_one, spec, args.device, deadline)) for spec in args.problems]
        for spec, future in pending:
            try:
                line, keys[spec] = future.result()
                print(line, flush=True)
            except ArmTimeout as exc:
                failed += 1
                when = "its turn came after" if "not started" in str(exc) else "still compiling at"
                print(f"{spec}: not warmed ({when} the {args.deadline:.0f} s deadline)", flush=True)
            except ArmRaised as exc:  # the problem's own error, without the arm's traceback
                failed += 1
                print(f"{spec}: not warmed ({exc.payload.split(' | ')[0][:200]})", flush=True)
            except Exception as exc:  # noqa: BLE001 - one problem's failure leaves it to compile in its own bench
                failed += 1
                print(f"{spec}: not warmed ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
    if args.keys is not None:
        args.keys.write_text(json.dumps(keys, indent=1))
    print(f"warmed {len(args.problems) - failed} of {len(args.problems)} problems in {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
