"""Fill the compiler's caches for several suite problems at once, before they are timed one by one.

A ``kernelopt bench`` of a problem the caches have not seen spends most of its minute compiling:
its arms compile cold side by side, and each is then replaced by a process that loads the
compile from the cache (a cold start's offset would otherwise stay in the measurement:
``ArmProcess``'s warm load). Measuring the noise floor of every problem of ``benchmarks/`` one
after the other so costs about 50 s a problem on the GPU machine. Compiling them first, several at
once (each in its own fresh process, through the arms' own :func:`compile_arm`), is meant to leave
the timed benches nothing to do but load: what they measure is unchanged (every arm starts from
the cache, as a run's final benchmark does), and nothing is timed while this runs. On the CPU the
arms do load it; on the H200 (12-05e) 35 of 51 arms still missed it and compiled cold, so
``--keys`` records the keys it stored under, for ``scripts/cache_keys.py`` to compare with the
arms' (the noise part runs it only with NOISE_WARM=1 until that is understood).

Usage: python scripts/warm_cache.py [--jobs 6] [--deadline 300] [--device cuda] [--keys keys.json] level1/x.py:bf16 level3/y.py:fp32 ...
(paths under benchmarks/; a failure is reported and leaves that problem to compile in its bench).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
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


def warm_one(spec: str, device: str) -> tuple[str, list[dict[str, Any]]]:
    """Compile one problem as a baseline arm would, in this (fresh) process: a line saying how, and
    the cache keys it stored under (``scripts/cache_keys.py`` compares them with the arms')."""
    from kernelopt_bot.harness.arm_process import ArmSpec, compile_arm

    path, dtype = parse_spec(spec)
    start = time.monotonic()
    arm = compile_arm(ArmSpec(label="warm", target=path, device=device, dtype=dtype))
    cache = ", ".join(f"{k} {v}" for k, v in arm.cache.items() if v)
    return f"{spec}: compiled in {time.monotonic() - start:.1f} s (cache: {cache or 'not counted'})", arm.cache_keys


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
    start, failed, keys = time.monotonic(), 0, {}
    # One fresh process per problem (maxtasksperchild=1): a compile's Dynamo and Inductor state,
    # and its GPU memory, go with its process.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes=max(1, args.jobs), maxtasksperchild=1) as pool:
        pending = [(spec, pool.apply_async(warm_one, (spec, args.device))) for spec in args.problems]
        for spec, result in pending:
            left = args.deadline - (time.monotonic() - start)
            try:
                if left <= 0 and not result.ready():  # past the deadline: no more waiting, one problem at a time
                    raise multiprocessing.TimeoutError
                line, keys[spec] = result.get(timeout=max(left, 0.01))
                print(line, flush=True)
            except multiprocessing.TimeoutError:
                failed += 1
                print(f"{spec}: not warmed (still compiling at the {args.deadline:.0f} s deadline)", flush=True)
            except Exception as exc:  # noqa: BLE001 - one problem's failure leaves it to compile in its own bench
                failed += 1
                print(f"{spec}: not warmed ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
        pool.terminate()
    if args.keys is not None:
        args.keys.write_text(json.dumps(keys, indent=1))
    print(f"warmed {len(args.problems) - failed} of {len(args.problems)} problems in {time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
