"""How the compiler options' compile estimates compare with their compiles, as one markdown table:
a row per option per run found under the given folders (each run's result.json), with the
capture's own compile, the baseline arm's (the default compile in an arm of its own,
``processes.baseline_compile_s``), the estimate the run planned by (``compile_estimate_s``), what
the option's arm took (``compile_s``) and its check and rounds (``timed_s``); then, per option, the
median of compiled / estimate, compiled / capture and compiled / baseline arm over the runs that
have them. The evidence for
``schedule.OPTION_COMPILE_FACTOR`` and ``compile_options.TEMPLATE_TUNE_S``, from the runs themselves.

Usage: python scripts/option_compile_table.py DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

CAPTURE = "compiling and capturing"


def seconds(value: Any) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:.1f}"


def ratio(a: Any, b: Any) -> float | None:
    ok = all(isinstance(v, (int, float)) for v in (a, b)) and b
    return a / b if ok else None


def rows(folders: list[Path]) -> list[dict[str, Any]]:
    """One dict per option of every run: problem, option, capture, estimate, compiled, timed."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("result.json")):
            try:
                result = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(result, dict):
                continue
            capture = (result.get("phases") or {}).get(CAPTURE)
            baseline = (result.get("processes") or {}).get("baseline_compile_s")
            problem = f"{result.get('name')} {result.get('dtype')}" + (" (training step)" if result.get("train") else "")
            for rec in result.get("recommendations") or []:
                option = str(rec.get("option") or "") if isinstance(rec, dict) else ""
                if not option or option.endswith(" + pack"):
                    continue
                found.append({"problem": problem, "option": option,
                              "capture": capture, "baseline": baseline, "estimate": rec.get("compile_estimate_s"),
                              "compiled": rec.get("compile_s"), "timed": rec.get("timed_s")})
    return found


def table(found: list[dict[str, Any]]) -> str:
    lines = ["| problem | option | capture s | baseline arm s | estimate s | compiled s | compiled / estimate "
             "| check and rounds s |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        over = ratio(r["compiled"], r["estimate"])
        lines.append(f"| {r['problem']} | {r['option']} | {seconds(r['capture'])} | {seconds(r['baseline'])} | "
                     f"{seconds(r['estimate'])} | {seconds(r['compiled'])} | {'-' if over is None else f'{over:.2f}'} "
                     f"| {seconds(r['timed'])} |")
    lines += ["", "| option | runs compiled | median compiled / estimate | median compiled / capture "
              "| median compiled / baseline arm |", "|---|---:|---:|---:|---:|"]
    for option in dict.fromkeys(r["option"] for r in found):
        mine = [r for r in found if r["option"] == option and isinstance(r["compiled"], (int, float))]
        medians = []
        for base in ("estimate", "capture", "baseline"):
            values = [v for v in (ratio(r["compiled"], r[base]) for r in mine) if v is not None]
            medians.append(f"{statistics.median(values):.2f}" if values else "-")
        lines.append(f"| {option} | {len(mine)} | {' | '.join(medians)} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    found = rows(args.dirs)
    if not found:
        print(f"no compiler option in any result.json under {', '.join(map(str, args.dirs))}", file=sys.stderr)
        return 2
    print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
