"""The harness's noise on an unchanged model: one row per ``kernelopt bench --json`` result given
(an empty pack, so every arm is the compiled model). Prints a Markdown table.

Beside the harness's own floor (each arm's median over a round's passes, baseline against
baseline), it computes the floor of the same rounds with the arms paired within each pass (the
median of a round's per-pass ratios), where the result kept its passes: which of the two
estimators holds still on a given machine is a question for its data, not for a guess."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelopt_bot.harness.arm_process import how_started
from kernelopt_bot.stats import noise_floor


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def paired_floor(rounds: list[dict[str, Any]]) -> float | None:
    """The noise floor with baseline and repeat paired within each pass (None: no passes kept)."""
    ratios = []
    for r in rounds:
        pairs = [a / b for a, b in zip(r.get("baseline_passes_ms") or [], r.get("baseline_repeat_passes_ms") or [])
                 if a and b]
        if pairs:
            ratios.append(statistics.median(pairs))
    return noise_floor(ratios) if ratios else None


def estimator_gap(rounds: list[dict[str, Any]]) -> float | None:
    """Baseline against repeat through the speedup's own estimator (the median over rounds of each
    arm's time): how far one A/A measurement puts the baseline from itself. The floor above is the
    spread of single rounds, which the median over ten rounds does not have."""
    pairs = [(r["baseline_ms"], r["baseline_repeat_ms"]) for r in rounds
             if r.get("baseline_ms") and r.get("baseline_repeat_ms")]
    if not pairs:
        return None
    return abs(statistics.median(a for a, _ in pairs) / statistics.median(b for _, b in pairs) - 1.0)


def arm_starts(starts: dict[str, Any]) -> str:
    """How the baseline, packed and repeat arms started: loaded from the compiler's cache,
    "replaced" (compiled cold, then replaced by a cache load), or "compiled" (cold, not replaced)."""
    return " / ".join(how_started(starts.get(label)) or "-" for label in ("baseline", "packed", "baseline-repeat"))


def configs_unlike(starts: dict[str, Any]) -> str:
    """How many kernels the packed and repeat arms autotuned to other launch configs than the
    baseline's (the pack's own kernels aside), "-" where an arm does not say."""
    counts = []
    for label in ("packed", "baseline-repeat"):
        start = starts.get(label) or {}
        unlike, count = start.get("configs_unlike_baseline"), start.get("configs_unlike_count")
        counts.append("-" if unlike is None else str(count if isinstance(count, int) else len(unlike)))
    return " / ".join(counts)


def row(path: Path) -> str:
    name = path.stem.removeprefix("noise_")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"| {name} | unreadable: {exc} | | | | | | | | | | |"
    if not data.get("measured"):
        return f"| {name} | {data.get('reason') or data.get('error') or 'not measured'} | | | | | | | | | | |"
    empty_vs_base = None if not data.get("speedup") else abs(data["speedup"] - 1.0)
    return (f"| {name} | {ms(data.get('baseline_ms'))} | {ms(data.get('baseline_host_ms'))} | "
            f"{pct(data.get('noise_floor'))} | {pct(paired_floor(data.get('rounds') or []))} | "
            f"{pct(estimator_gap(data.get('rounds') or []))} | "
            f"{pct(data.get('host_noise_floor'))} | {pct(empty_vs_base)} | "
            f"{len(data.get('rounds') or [])} | {data.get('pass_reps') or '-'} | "
            f"{arm_starts(data.get('arm_starts') or {})} | {configs_unlike(data.get('arm_starts') or {})} |")


def main(paths: list[str]) -> int:
    print("| problem | GPU ms | host ms | noise floor (GPU) | paired by pass (GPU) | A/A of the medians (GPU) | "
          "noise floor (host) | empty pack vs baseline | rounds | calls a pass | arms started (base / packed / repeat) | "
          "configs unlike the baseline (packed / repeat) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for path in paths:
        print(row(Path(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
