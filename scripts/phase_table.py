"""Where each run's time went, as one markdown table: the per-phase seconds, variants timed,
candidates gated, compiler options measured and the speedup of every optimize run found under
the given folders (a suite's ``problems/`` or copies of run folders, each holding result.json and
run.log). This is the table issue 12 asks for, built from the runs themselves.

Usage: python scripts/phase_table.py DIR [DIR ...] [--label NAME ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

VARIANTS = re.compile(r"timing: variants (\d+)")
COLUMNS = ("run", "problem", "capture s", "search s", "options s", "final bench s", "total s",
           "variants timed", "candidates gated", "options measured", "speedup")


def row(run_dir: Path, label: str) -> list[str]:
    """One run's row; phases it did not reach are ``-``."""
    result = json.loads((run_dir / "result.json").read_text())
    phases: dict[str, float] = result.get("phases") or {}
    search = sum(v for k, v in phases.items() if k.startswith("searching"))
    log = (run_dir / "run.log").read_text() if (run_dir / "run.log").is_file() else ""
    variants = sum(int(n) for n in VARIANTS.findall(log))
    recs = result.get("recommendations") or []
    measured = sum(1 for r in recs if r.get("speedup") is not None)
    speedup = result.get("speedup")

    def secs(key: str) -> str:
        return f"{phases[key]:.1f}" if key in phases else "-"

    return [label, f"{result.get('name')} {result.get('dtype')}", secs("compiling and capturing"),
            f"{search:.1f}", secs("measuring the compiler's own options"), secs("end-to-end benchmark"),
            f"{result['seconds']:.0f}" if result.get("seconds") is not None else "-", str(variants),
            str(sum(k.get("candidates") or 0 for k in result.get("kernels") or [])),
            f"{measured} of {len(recs)}" if recs else "-",
            f"{speedup:.3f}" if isinstance(speedup, (int, float)) else f"- ({result.get('status')})"]


def table(dirs: list[Path], labels: list[str]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for folder, label in zip(dirs, labels):
        runs = sorted({p.parent for p in folder.rglob("result.json")})
        lines += ["| " + " | ".join(row(run, label)) + " |" for run in runs]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--label", action="append", default=[], help="A name per DIR (default: the folder's name).")
    args = parser.parse_args(argv)
    labels = args.label + [d.name for d in args.dirs[len(args.label):]]
    missing = [str(d) for d in args.dirs if not any(d.rglob("result.json"))]
    if missing:
        print(f"no result.json under {', '.join(missing)}", file=sys.stderr)
        return 2
    print(table(args.dirs, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
