"""Compare two runs of the same suite problems (one GPU against several): verdicts and speedups.

Usage: python scripts/compare_suites.py DIR_A DIR_B   (each holding a suite.json)
Exit 0 when every problem has the same verdict and speedups agree within the noise floor, else 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelopt_bot.suite import agreement, merge


def main() -> int:
    first, second = (merge([Path(d)]) for d in sys.argv[1:3])
    rows = agreement(first, second)
    print(f"{'problem':40} {'A':>7} {'B':>7}")
    for row in rows:
        print(row.line())
    ok = all(r.same_verdict and r.within_noise for r in rows)
    print(f"{sum(r.same_verdict for r in rows)}/{len(rows)} same verdicts, "
          f"{sum(r.within_noise for r in rows)}/{len(rows)} speedups within noise")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
