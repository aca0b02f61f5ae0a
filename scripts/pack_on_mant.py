"""Measure issue 13's third figure on a suite that was already run: each problem's verified pack
installed on a max-autotune-no-cudagraphs compile, over that compile alone, for a suite report
whose runs predate the suite measuring it (a new ``kernelopt suite`` run measures it after each
problem). The packs come from the runs themselves: for each problem, the committed run folder
(``.../problems/<slug>/``) whose ``result.json`` has the report's speedup, beside its
``pack.json``. Each measurement is ``kernelopt bench --mode max-autotune-no-cudagraphs`` in its own
process (:func:`kernelopt_bot.suite.pack_on_mant_speedup`); the report is rewritten after each, so
a call's limit keeps what was measured, and a later call with the same ``--out`` goes on.

Usage: python scripts/pack_on_mant.py SUITE_DIR --runs RESULTS_DIR --out OUT [--only PATTERN ...]
       [--suite-root benchmarks] [--timeout S]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelopt_bot.suite import ProblemResult, merge, pack_on_mant_speedup, write_report


def find_pack(runs: Path, slug: str, speedup: float) -> Path | None:
    """The pack of the run the report took this problem's speedup from (the newest such folder)."""
    found = []
    for result in runs.glob(f"**/problems/{slug}/result.json"):
        pack = result.parent / "pack.json"
        data = json.loads(result.read_text())
        if pack.is_file() and isinstance(data.get("speedup"), (int, float)) and abs(data["speedup"] - speedup) < 1e-9:
            found.append(pack)
    return max(found, key=lambda p: str(p)) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite_dir", type=Path)
    parser.add_argument("--runs", type=Path, required=True, help="folder holding the runs' problems/ folders")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", action="append", default=[],
                        help="slug patterns (fnmatch), measured in the order given")
    parser.add_argument("--suite-root", type=Path, default=Path("benchmarks"))
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per measurement")
    args = parser.parse_args(argv)
    start = args.out if (args.out / "suite.json").is_file() else args.suite_dir  # a later call goes on
    suite = merge([start])

    def order(res: ProblemResult) -> int | None:  # the first --only pattern it matches (None: none)
        if not args.only:
            return 0
        return next((i for i, pattern in enumerate(args.only) if fnmatch.fnmatch(res.problem.slug, pattern)), None)

    waiting = [res for res in suite.problems
               if res.speedup_pack_on_mant is None and not res.problem.train and res.status == "ok"]
    for res in waiting:
        if not res.has_pack:
            res.speedup_pack_on_mant = 1.0  # no pack: nothing to put on top
    write_report(suite, args.out)
    chosen = [res for res in waiting if res.speedup_pack_on_mant is None and order(res) is not None]
    for res in sorted(chosen, key=lambda r: order(r) or 0):
        slug = res.problem.slug
        pack = find_pack(args.runs, slug, res.speedup or 0.0)
        if pack is None:
            print(f"{slug}: no committed pack with speedup {res.speedup}", flush=True)
            continue
        log_dir = args.out / "problems" / slug
        log_dir.mkdir(parents=True, exist_ok=True)
        res.speedup_pack_on_mant = pack_on_mant_speedup(args.suite_root / res.problem.path, res.problem.dtype,
                                                        suite.device or "cuda", pack, timeout_s=args.timeout,
                                                        log_dir=log_dir)
        print(f"{slug}: pack ({pack}) on max-autotune-nc: {res.speedup_pack_on_mant}", flush=True)
        write_report(suite, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
