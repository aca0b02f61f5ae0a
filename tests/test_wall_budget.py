"""The wall budget is a deadline: no GPU candidate or compiler option starts that cannot finish."""

from __future__ import annotations

from typing import Any

import pytest

from kernelopt_bot.search.base import Proposal
from kernelopt_bot.search.budget import Budget, BudgetExceeded
from kernelopt_bot.search.compile_options import COMPILE_OPTIONS, recommend
from kernelopt_bot.search.orchestrator import Orchestrator, SearchLimits
from kernelopt_bot.verify.cascade import Candidate
from tests.helpers import captured


class _GpuOrchestrator(Orchestrator):
    @property
    def device(self) -> str:  # the checks under test only apply on a GPU
        return "cuda"


def _orchestrator(budget: Budget) -> Orchestrator:
    cap = captured("gelu.py")
    return _GpuOrchestrator(cap, None, None, budget, strategies=[],  # type: ignore[arg-type]
                            limits=SearchLimits(first_candidate_s=30.0))


def test_a_candidate_is_not_started_without_the_time_to_finish() -> None:
    proposal = Proposal(Candidate("config X", config=None), "tuner")
    roomy = _orchestrator(Budget(max_wall_s=100.0))
    roomy._fits_in_wall_budget(proposal)  # 100 s left, a candidate takes about 30
    tight = _orchestrator(Budget(max_wall_s=20.0))
    with pytest.raises(BudgetExceeded, match="20 s of wall time left, a candidate takes about 30 s"):
        tight._fits_in_wall_budget(proposal)
    # the estimate follows what candidates really took in this run
    tight._candidate_seconds += [4.0, 6.0]
    assert tight.candidate_estimate_s() == 6.0
    tight._fits_in_wall_budget(proposal)
    _orchestrator(Budget())._fits_in_wall_budget(proposal)  # no wall limit: never refused


class _Arena:
    device, dtype = "cuda", "fp32"

    def baselines(self) -> tuple[Any, Any]:
        return None, None

    def candidate(self, *_a: Any, **_k: Any) -> Any:
        raise AssertionError("no option may start after the deadline")


def test_compiler_options_past_the_deadline_are_reported_not_measured() -> None:
    recs = recommend(_Arena(), None, gamma=1.03, time_left=lambda: 20.0)  # type: ignore[arg-type]
    assert [r.option for r in recs] == [o.label for o in COMPILE_OPTIONS]
    assert recs[0].option == "mode=max-autotune-no-cudagraphs"  # the suite's reference goes first
    assert all(r.speedup is None and not r.verified and "wall-time budget" in r.detail for r in recs)
