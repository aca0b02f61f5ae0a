"""How far identical model processes sit from each other: N arm processes of one target (half of
them with an empty pack installed, which changes no kernel), timed in interleaved rounds exactly
as ``compare_arms`` times its three arms (the asking thread on the arms' timing core, mirrored
pass orders, the same pass length). They start in waves, each compiling once the last is ready, as
a run's baselines compile together and its candidate arms after them (from the compiler's cache
the first wave filled): an offset that follows the wave is the compile path's, one that follows
the empty pack is the pack hook's. Each arm's median over rounds against the median of all
arms says whether a launch-bound network's noise is within a process (rounds scatter) or between
processes (each process keeps its own offset, round after round): gate 4's noise floor compares
two baseline processes, so an offset between processes that exceeds it passes a candidate that
changes nothing.

``--warm-load``: every arm that compiled cold is replaced by one that loads from the cache
(``ArmProcess``'s ``warm_load``, as the run's model arms on a launch-bound model, and ``kernelopt
bench``, do): with it, no offset should follow the wave.

Usage: python scripts/process_offsets.py TARGET --dtype bf16 [--arms 6] [--rounds 10] [--warm-load] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec, configs_unlike, how_started
from kernelopt_bot.harness.bench import SEED_BASE, _pass_reps, _warm_up, pass_orders
from kernelopt_bot.harness.cpu_pin import this_thread_on, timing_core

EMPTY_PACK = {"format": "kernelopt-pack", "version": 1, "entries": []}


STARTS = {"replaced": "replaced (compiled cold, then loaded from the cache)", "compiled": "compiled",
          "loaded": "loaded from the cache", None: "not said"}


def started(info: dict) -> str:
    """How an arm started (:func:`how_started`), and why a cold one was not replaced."""
    why = info.get("warm_load")
    return STARTS[how_started(info)] + (f" ({why})" if isinstance(why, str) else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--arms", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--waves", type=int, default=2)
    parser.add_argument("--warm-load", action="store_true",
                        help="replace each arm that compiled cold by one that loads from the cache")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="the compiler's cache the arms share (default: a new, empty one, so the first wave compiles)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    # The first wave must compile, as a mode's first arms in a run do: a cache that earlier work
    # filled would make every wave a cache load.
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="kernelopt-offsets-cache-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    per_wave = -(-args.arms // max(1, args.waves))
    specs = [ArmSpec(f"{'empty-pack' if i % 2 else 'baseline'}-w{i // per_wave + 1}-{i}", args.target, args.device,
                     args.dtype, pack=EMPTY_PACK if i % 2 else None) for i in range(args.arms)]
    arms: list[ArmProcess] = []
    try:
        for first in range(0, len(specs), per_wave):
            wave = [ArmProcess(spec, warm_load=args.warm_load) for spec in specs[first:first + per_wave]]
            arms += wave
            for step in ("wait_compiled", "start_replacement", "wait_ready"):  # as ModelArms.settle
                for arm in wave:
                    getattr(arm, step)()
        # and which kernels each arm's autotuning settled otherwise than the first arm's
        unlike_first = [configs_unlike(arm.info, arms[0].info) for arm in arms]
        for spec, arm, unlike in zip(specs, arms, unlike_first):
            said = "not said" if unlike is None else f"{len(unlike)}{' (' + ', '.join(unlike) + ')' if unlike else ''}"
            print(f"{spec.label:18} started: {started(arm.info)}; configs unlike {specs[0].label}'s: {said}",
                  flush=True)
        with this_thread_on(timing_core()):
            _, call_ms = _warm_up(list(arms), _pass_reps(20), 600.0)
            reps = _pass_reps(20, call_ms)
            per_arm: list[list[float]] = [[] for _ in arms]
            turns = list(range(len(arms)))
            for r in range(args.rounds):
                got: list[list[float]] = [[] for _ in arms]
                for order in pass_orders(turns, r):
                    for i in order:
                        reply = arms[i].request("time", SEED_BASE + r, reps, timeout_s=600.0)
                        if not reply:
                            print("nothing timed: no CUDA device", file=sys.stderr)
                            return 2
                        got[i].append(float(reply[0]))
                for i, passes in enumerate(got):
                    per_arm[i].append(statistics.median(passes))
    finally:
        for arm in arms:
            arm.close()
    medians = [statistics.median(times) for times in per_arm]
    middle = statistics.median(medians)
    rows = []
    for spec, arm, times, med, unlike in zip(specs, arms, per_arm, medians, unlike_first):
        # rounds in which this arm is on the same side of the middle as its median: a process offset
        same_side = sum(1 for t in times if (t - middle) * (med - middle) > 0)
        rows.append({"arm": spec.label, "median_ms": med, "offset": med / middle - 1.0,
                     "rounds_on_its_side": same_side, "rounds_ms": times,
                     "cache": arm.info.get("cache"), "warm_load": arm.info.get("warm_load"),
                     "configs": arm.info.get("configs"), "configs_unlike_first": unlike})
        print(f"{spec.label:18} {med:.4f} ms  offset {med / middle - 1.0:+.2%}  "
              f"same side in {same_side}/{len(times)} rounds", flush=True)
    spread = max(medians) / min(medians) - 1.0
    print(f"{args.target} {args.dtype}: {len(arms)} processes, {reps} calls a pass, spread of the "
          f"process medians {spread:.2%}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"target": args.target, "dtype": args.dtype, "pass_reps": reps,
                                         "warm_load": args.warm_load,
                                         "spread": spread, "arms": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
