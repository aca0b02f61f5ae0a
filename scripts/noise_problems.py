"""The problems the GPU check's noise part measures when asked for ``all``: every problem-dtype
pair of ``benchmarks/suite.json`` (training steps aside), the launch-bound networks of level 3
first, then level 2, then level 1, less those named in ``--skip`` and those a committed results
folder already holds a ``kernelopt bench --json`` noise result for (``--measured DIR``, searched
recursively for ``noise_*.json``), so a session's device time goes to the pairs not yet measured.

Usage: python scripts/noise_problems.py [--skip level1/x.py:bf16 ...] [--measured benchmarks/results/DIR ...]
Prints the pairs on one line, space-separated (``level1/x.py:bf16``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from warm_cache import spec_of  # this folder: the problems' spelling

ROOT = Path(__file__).resolve().parents[1]


def suite_pairs(suite: Path) -> list[str]:
    """Every (file, dtype) of the suite that is not a training step, level 3 first."""
    problems = json.loads(suite.read_text())["problems"]
    pairs = [(-int(p["level"]), f"{p['path']}:{dtype}") for p in problems if not p.get("train") for dtype in p["dtypes"]]
    ordered = [spec for _, spec in sorted(pairs, key=lambda pair: pair[0])]
    return list(dict.fromkeys(ordered))


def measured_pairs(folders: list[Path]) -> set[str]:
    """The pairs a noise result under ``folders`` measured (its JSON reads, and says what it timed)."""
    found = set()
    for folder in folders:
        for path in folder.rglob("noise_*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a bench cut midway wrote nothing readable: not measured
            if isinstance(data, dict) and data.get("measured") and data.get("target") and data.get("dtype"):
                found.add(spec_of(str(data["target"]), str(data["dtype"])))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip", nargs="*", default=[], help="pairs to leave out (level/file.py:dtype)")
    parser.add_argument("--measured", nargs="*", type=Path, default=[], help="results folders whose noise results count")
    parser.add_argument("--suite", type=Path, default=ROOT / "benchmarks" / "suite.json")
    args = parser.parse_args(argv)
    skip = set(args.skip) | measured_pairs(args.measured)
    print(" ".join(spec for spec in suite_pairs(args.suite) if spec not in skip))
    return 0


if __name__ == "__main__":
    sys.exit(main())
