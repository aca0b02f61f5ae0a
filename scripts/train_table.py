"""Training-step runs (``kernelopt optimize --train``): one row per run folder given, from its
``result.json``: the step's end-to-end speedup, its split into forward and backward, and which
kernels were verified in each half. Prints a Markdown table.

Usage: python scripts/train_table.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from kernelopt_bot.result import RunResult


def _x(speedup: float | None) -> str:
    return "-" if speedup is None else f"{speedup:.3f}x"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def row(folder: Path) -> str:
    try:
        r = RunResult.load(folder / "result.json")
    except (OSError, ValueError) as exc:
        return f"| {folder.name} | no result ({exc}) |" + " |" * 8
    if r.status != "ok":
        return f"| {r.name} {r.dtype} | failed: {(r.error or '')[:120]} |" + " |" * 8
    split = {h["half"]: h for h in r.step_halves}
    halves = [f"{_ms(split[p]['baseline'])} -> {_ms(split[p]['optimized'])} ({_x(split[p]['speedup'])})"
              if p in split else "-" for p in ("forward", "backward")]
    verified = {p: sum(1 for k in r.kernels if k.status == "accepted" and k.phase == p) for p in ("forward", "backward")}
    kernels = {p: sum(1 for k in r.kernels if k.phase == p) for p in ("forward", "backward")}
    noise = "-" if r.noise_floor is None else f"{100 * r.noise_floor:.2f}%"
    speedup = "-" if r.speedup is None else f"{r.speedup:.3f}x"
    return (f"| {r.name} {r.dtype} | {_ms(r.baseline_ms)} | {_ms(r.optimized_ms)} | {speedup} | {noise} | "
            f"{halves[0]} | {halves[1]} | {verified['forward']}/{kernels['forward']} | "
            f"{verified['backward']}/{kernels['backward']} | {r.seconds or 0:.0f} |")


def main(folders: list[str]) -> None:
    print("| problem | step ms (torch.compile) | step ms (with pack) | step speedup | noise floor | forward ms (GPU) "
          "| backward ms (GPU) | verified fwd | verified bwd | optimize s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for folder in folders:
        print(row(Path(folder)))


if __name__ == "__main__":
    main(sys.argv[1:])
