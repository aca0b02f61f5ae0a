"""Whole-model candidates: the compiler's own options, measured end to end.

Coordinate-descent tuning, max-autotune without CUDA graphs, and CUDA graphs can each win big or
lose big depending on the model (FINDINGS.md section 6); only an end-to-end measurement tells. Each
option gets its own arm in the arena, goes through gate 3 (same outputs) and gate 4's rules, and
comes back as a recommendation, verified or not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelopt_bot.bench import compare_arms
from kernelopt_bot.harness.arena import Arena
from kernelopt_bot.harness.model_worker import WorkerError
from kernelopt_bot.result import Recommendation
from kernelopt_bot.targets import Target
from kernelopt_bot.verify.model import check_model
from kernelopt_bot.verify.perf import judge


@dataclass(frozen=True)
class CompileOption:
    label: str
    mode: str | None = None
    config: dict[str, Any] | None = None


# max-autotune first: it is also the reference the suite compares against.
COMPILE_OPTIONS = (
    CompileOption("mode=max-autotune-no-cudagraphs", mode="max-autotune-no-cudagraphs"),
    CompileOption("coordinate_descent_tuning=True", config={"coordinate_descent_tuning": True}),
    CompileOption("mode=reduce-overhead (CUDA graphs)", mode="reduce-overhead"),
)
MIN_OPTION_S = 30.0  # an option needs a whole compile and a benchmark: do not start one with less left


def recommend(arena: Arena, target: Target, *, gamma: float, rounds: int = 10, reps: int = 20,
              options: tuple[CompileOption, ...] = COMPILE_OPTIONS,
              time_left: Callable[[], float | None] | None = None) -> list[Recommendation]:
    """Measure each option against the default compile; never raises for an option that fails.

    ``time_left`` (seconds of wall budget left, None = no limit; the search budget's
    ``wall_s_left``): options that would start too close to the end are reported as not measured,
    so the run keeps its wall budget.
    """
    if arena.device != "cuda":
        return [Recommendation(o.label, None, False, "not measured: no CUDA device") for o in options]
    out: list[Recommendation] = []
    baseline, repeat = arena.baselines()
    for option in options:
        left = time_left() if time_left is not None else None
        if left is not None and left < MIN_OPTION_S:
            out.append(Recommendation(option.label, None, False, "not measured: the wall-time budget ran out"))
            continue
        try:
            with arena.candidate(None, label=option.label, mode=option.mode, config=option.config) as arm:
                model = check_model(target, baseline, arm, None)
                if not model.passed:
                    out.append(Recommendation(option.label, None, False, f"outputs differ: {model.reason}"))
                    continue
                result = compare_arms(baseline, arm, repeat, target=target.spec, device=arena.device,
                                      dtype=arena.dtype, rounds=rounds, reps=reps)
                verdict = judge(result, None, gamma, {})
                out.append(Recommendation(option.label, result.speedup, bool(verdict.passed), verdict.reason))
        except WorkerError as exc:
            out.append(Recommendation(option.label, None, False, f"failed: {exc}"))
    return out
