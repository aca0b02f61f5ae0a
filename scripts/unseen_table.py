"""One markdown table of `kernelopt optimize` runs on problems the method was never tuned on
(``benchmarks/unseen/``): per run, the pack's end-to-end speedup over the compile the user runs,
its noise floor, the kernels verified, and each compiler option's measured speedup. These runs
answer whether the method holds off the suite, so a run that failed is a row too, with its error.

Usage: python scripts/unseen_table.py DIR  (a folder of run folders, each with result.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

COLUMNS = ("problem", "status", "baseline ms", "with the pack ms", "speedup", "noise floor",
           "kernels verified", "compiler options (speedup over the baseline)", "seconds")


def _short(option: str) -> str:
    return option.replace("mode=", "").replace(" (CUDA graphs)", "").replace("=True", "")


def row(run_dir: Path) -> list[str]:
    """One run's cells; a run without result.json says so."""
    path = run_dir / "result.json"
    if not path.is_file():
        return [run_dir.name, "no result.json (see its log)"] + ["-"] * (len(COLUMNS) - 2)
    result = json.loads(path.read_text())

    def num(key: str, fmt: str) -> str:
        value = result.get(key)
        return format(value, fmt) if isinstance(value, (int, float)) else "-"

    options = "; ".join(
        f"{_short(r['option'])} {r['speedup']:.3f}" + ("" if r.get("verified") else " (not verified)")
        if r.get("speedup") is not None else f"{_short(r['option'])}: {r.get('detail', '')[:60]}"
        for r in result.get("recommendations") or [])
    status = result.get("status") or "-"
    if result.get("error"):
        status += f": {str(result['error'])[:80]}"
    noise = result.get("noise_floor")
    return [f"{result.get('name')} {result.get('dtype')}", status, num("baseline_ms", ".4f"),
            num("optimized_ms", ".4f"), num("speedup", ".3f"),
            f"{noise * 100:.2f}%" if isinstance(noise, (int, float)) else "-",
            str(result.get("verified_kernels", "-")), options or "-", num("seconds", ".0f")]


def table(root: Path) -> str:
    rows = [row(d) for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))]
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"error: {args.root} is not a folder", file=sys.stderr)
        return 2
    print(table(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
