"""The harness's noise on an unchanged model: one row per ``kernelopt bench --json`` result given
(an empty pack, so every arm is the compiled model). Prints a Markdown table."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def row(path: Path) -> str:
    name = path.stem.removeprefix("noise_")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"| {name} | unreadable: {exc} | | | | | |"
    if not data.get("measured"):
        return f"| {name} | {data.get('reason') or data.get('error') or 'not measured'} | | | | | |"
    empty_vs_base = None if not data.get("speedup") else abs(data["speedup"] - 1.0)
    return (f"| {name} | {ms(data.get('baseline_ms'))} | {ms(data.get('baseline_host_ms'))} | "
            f"{pct(data.get('noise_floor'))} | {pct(data.get('host_noise_floor'))} | {pct(empty_vs_base)} | "
            f"{len(data.get('rounds') or [])} |")


def main(paths: list[str]) -> int:
    print("| problem | GPU ms | host ms | noise floor (GPU) | noise floor (host) | empty pack vs baseline | rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for path in paths:
        print(row(Path(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
