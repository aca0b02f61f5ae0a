"""The harness's noise on an unchanged model: one row per ``kernelopt bench --json`` result given
(an empty pack, so every arm is the compiled model). Prints a Markdown table.

Beside the floor the result was written with, it recomputes the floor of the stored rounds with
the harness's estimator of now (:func:`kernelopt_bot.stats.noise_floor` over the passes' paired
ratios), and the one the harness used before 2026-12-05 (the rounds' medians, baseline against
baseline: the gap 80% of the rounds stay within), so results of either era compare in one table."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelopt_bot.harness.arm_process import how_started
from kernelopt_bot.harness.bench import RoundResult
from kernelopt_bot.stats import NOISE_QUANTILE, noise_floor, ratio_median


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def paired(rounds: list[RoundResult]) -> bool:
    """Whether the result kept each round's passes (written since 2026-12-02): without them the
    paired estimator has nothing to pair, and its columns show "-"."""
    return bool(rounds) and all(r.baseline_passes_ms for r in rounds)


def paired_floor(rounds: list[RoundResult]) -> float | None:
    """The harness's floor of now, recomputed from the stored passes."""
    return noise_floor([r.repeat_ratios() for r in rounds]) if paired(rounds) else None


def medians_floor(rounds: list[RoundResult]) -> float | None:
    """The floor of the rounds' medians the harness used before 2026-12-05: of the rounds' gaps
    |baseline / repeat - 1|, the one NOISE_QUANTILE of them stay within (of 3 to 5 rounds, the
    second-largest)."""
    gaps = sorted(abs(r.baseline_ms / r.baseline_repeat_ms - 1.0) for r in rounds
                  if r.baseline_ms and r.baseline_repeat_ms)
    if not gaps:
        return None
    rank = min(math.ceil(NOISE_QUANTILE * len(gaps)), len(gaps) - 1 if len(gaps) >= 3 else len(gaps))
    return gaps[max(0, rank - 1)]


def paired_gap(ratios: list[float]) -> float | None:
    """One measurement through the speedup's own estimator: |median of the paired ratios - 1|
    (of baseline / repeat: the A/A gap; of baseline / packed: the empty pack against the baseline)."""
    median = ratio_median(ratios)
    return None if median is None else abs(median - 1.0)


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
        return f"| {name} | unreadable: {exc} | | | | | | | | | | | |"
    if not data.get("measured"):
        return f"| {name} | {data.get('reason') or data.get('error') or 'not measured'} | | | | | | | | | | | |"
    rounds = [RoundResult.from_json(r) for r in data.get("rounds") or []]
    aa_gap = paired_gap([x for r in rounds for x in r.repeat_ratios()]) if paired(rounds) else None
    empty_vs_base = paired_gap([x for r in rounds for x in r.speedups()]) if paired(rounds) else None
    return (f"| {name} | {ms(data.get('baseline_ms'))} | {ms(data.get('baseline_host_ms'))} | "
            f"{pct(data.get('noise_floor'))} | {pct(paired_floor(rounds))} | {pct(medians_floor(rounds))} | "
            f"{pct(aa_gap)} | "
            f"{pct(data.get('host_noise_floor'))} | {pct(empty_vs_base)} | "
            f"{len(rounds)} | {data.get('pass_reps') or '-'} | "
            f"{arm_starts(data.get('arm_starts') or {})} | {configs_unlike(data.get('arm_starts') or {})} |")


def phases(value: Any) -> str:
    """An arm start's seconds as ``import + target + setup + first call``, or "-" where it did not say."""
    if not isinstance(value, dict) or not value:
        return "-"
    parts = [value.get(k) for k in ("import", "target", "setup", "first_call")]
    return " + ".join("?" if not isinstance(v, (int, float)) else f"{v:.1f}" for v in parts)


def setup_parts(value: Any) -> str:
    """An arm setup's seconds as ``compiler + driver + settings + pack + inputs + hooks`` (written
    since 2026-12-06: ``setup_parts_s``; "-" for a part a run did not write: the first two came
    later that day), or "-" where it did not say."""
    if not isinstance(value, dict) or not value:
        return "-"
    parts = [value.get(k, "-") for k in ("compiler", "driver", "settings", "pack", "inputs", "hooks")]
    return " + ".join(v if v == "-" else "?" if not isinstance(v, (int, float)) else f"{v:.1f}" for v in parts)


def start_rows(path: Path) -> list[str]:
    """Where each arm's start went (written since 2026-12-05: ``start_phases_s``), and for an arm
    that compiled cold and was replaced, its cold start's too: which part of a 10-19 s cache load
    is torch's import, the target's load, the setup (settings, pack, inputs) and the first call
    (Dynamo, the cache's load, the kernels)."""
    try:
        starts = json.loads(path.read_text()).get("arm_starts") or {}
    except (OSError, ValueError, AttributeError):
        return []
    rows = []
    for label, start in starts.items():
        if not isinstance(start, dict) or "start_phases_s" not in start:
            continue
        warm = start.get("warm_load") if isinstance(start.get("warm_load"), dict) else {}
        rows.append(f"| {path.stem.removeprefix('noise_')} | {label} | {how_started(start) or '-'} | "
                    f"{phases(start.get('start_phases_s'))} | {setup_parts(start.get('setup_parts_s'))} | "
                    f"{phases(warm.get('cold_start_phases_s'))} |")
    return rows


def main(paths: list[str]) -> int:
    print("| problem | GPU ms | host ms | noise floor as written (GPU) | paired floor, recomputed (GPU) | "
          "medians floor, recomputed (GPU) | A/A, paired median (GPU) | "
          "noise floor (host) | empty pack vs baseline (paired, recomputed) | rounds | calls a pass | arms started (base / packed / repeat) | "
          "configs unlike the baseline (packed / repeat) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for path in paths:
        print(row(Path(path)))
    starts = [line for path in paths for line in start_rows(Path(path))]
    if starts:
        print("\n| problem | arm | started | its start, s (import + target + setup + first call) | "
              "its setup, s (compiler + driver + settings + pack + inputs + hooks) | the cold start it replaced, s |")
        print("|---|---|---|---:|---:|---:|")
        print("\n".join(starts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
