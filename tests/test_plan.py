"""The run plan: the budget and gamma parsed and checked once, result.json's "budget" unchanged."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.errors import BadInputError, KerneloptError
from kernelopt_bot.pipeline import run_pipeline
from kernelopt_bot.plan import DEFAULT_BUDGET, RunPlan
from tests.helpers import EXAMPLES


def test_one_field_per_budget_key_and_gamma() -> None:
    assert [f.name for f in dataclasses.fields(RunPlan)] == [*DEFAULT_BUDGET, "gamma"]
    plan = RunPlan.parse(None)
    assert plan.to_json() == DEFAULT_BUDGET and list(plan.to_json()) == list(DEFAULT_BUDGET)
    assert plan.gamma == DEFAULT_GAMMA == RunPlan().gamma
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.rounds = 3  # type: ignore[misc]


def test_overrides_reach_result_json_as_given() -> None:
    plan = RunPlan.parse({"wall_seconds": 30.5, "compile_options": False, "gpu_seconds": None, "candidates": 0}, 1.2)
    assert plan.to_json() == {**DEFAULT_BUDGET, "wall_seconds": 30.5, "compile_options": False,
                              "gpu_seconds": None, "candidates": 0}
    assert plan.gamma == 1.2
    # what the engine gets over the process boundary rebuilds the same plan
    assert RunPlan.parse(json.loads(json.dumps(plan.to_json())), plan.gamma) == plan


def test_a_whole_number_written_as_a_float_is_a_count() -> None:
    plan = RunPlan.parse({"rounds": 3.0, "kernels": 2})
    assert plan.rounds == 3 and isinstance(plan.rounds, int) and plan.kernels == 2


def test_an_unknown_key_is_the_error_it_always_was() -> None:
    with pytest.raises(KerneloptError) as raised:
        RunPlan.parse({"nope": 1})
    assert not isinstance(raised.value, BadInputError)
    assert str(raised.value) == f"unknown budget key 'nope' (known: {', '.join(DEFAULT_BUDGET)})"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"candidates": -1}, "at least 0"),
    ({"candidates": 2.5}, "whole number"),
    ({"candidates": True}, "whole number"),
    ({"tokens": "many"}, "whole number or null"),
    ({"wall_seconds": math.nan}, "a number or null"),
    ({"kernels": None}, "null is not allowed"),
    ({"rounds": 0}, "at least 1"),
    ({"compile_options": 1}, "true or false"),
])
def test_a_bad_value_is_bad_input(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        RunPlan.parse(overrides)


@pytest.mark.parametrize("gamma", [0.5, math.inf, "1.1"])
def test_a_bad_gamma_is_bad_input(gamma: Any) -> None:
    with pytest.raises(BadInputError, match="gamma"):
        RunPlan.parse(None, gamma)


def test_search_budget_keeps_the_reserve_and_counts_the_time_before() -> None:
    plan = RunPlan.parse({"wall_seconds": 100, "candidates": 4, "tokens": None, "cost": 2.5, "gpu_seconds": 30})
    budget = plan.budget(elapsed_before=5.0, reserve_s=20.0)
    limits = budget.snapshot()["limits"]
    assert limits == {"candidates": 4, "tokens": None, "gpu_s": 30, "wall_s": 80.0, "cost": 2.5}
    assert 74.0 < (budget.wall_s_left() or 0.0) <= 75.0
    assert RunPlan.parse({"wall_seconds": 10}).budget(reserve_s=20.0).max_wall_s == 0.0
    assert RunPlan.parse({"wall_seconds": None}).budget(reserve_s=20.0).max_wall_s is None


def test_verify_options_carry_gamma_and_rounds() -> None:
    options = RunPlan.parse({"rounds": 4}, 1.1).verify_options()
    assert (options.gamma, options.rounds) == (1.1, 4)


def test_run_pipeline_fails_a_bad_budget_value_as_bad_input_before_any_work(tmp_path: Path) -> None:
    result = run_pipeline(str(EXAMPLES / "gelu.py"), out_dir=tmp_path, budget={"rounds": 0})
    assert result.status == "failed" and result.error_kind == "bad input" and "at least 1" in (result.error or "")
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["status"] == "failed" and written["error_kind"] == "bad input"
    unknown = run_pipeline(str(EXAMPLES / "gelu.py"), out_dir=tmp_path / "unknown", budget={"nope": 1})
    assert unknown.status == "failed" and unknown.error_kind == ""
    assert (unknown.error or "").startswith("unknown budget key 'nope'")


def test_the_searchs_expected_hold_is_two_sets_of_its_largest_kernels_arguments_or_the_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the memory budget sets beside the baselines that would compile during the search:
    gate 2 on the largest searched kernel (two sets of its recorded arguments) or the model run
    in the engine, whichever is more, and the L2 flush buffer (twice the L2)."""
    from types import SimpleNamespace

    import torch

    from kernelopt_bot.pipeline import _search_hold_mb
    from tests.helpers import captured

    cap = captured("gelu.py")
    rows = [SimpleNamespace(graph=k.graph, name=k.name) for k in cap.artifact.kernels]
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: SimpleNamespace(L2_cache_size=50 << 20))
    args_mb = max(sum(a.untyped_storage().nbytes() for a in cap.recording(r.graph, r.name).args
                      if isinstance(a, torch.Tensor)) for r in rows) / 2**20
    assert args_mb > 0
    assert _search_hold_mb(cap, rows, 0.0) == pytest.approx(2 * args_mb + 100)
    assert _search_hold_mb(cap, rows, 10_000.0) == pytest.approx(10_100)
    assert _search_hold_mb(cap, [SimpleNamespace(graph=9, name="gone")], 0.0) == pytest.approx(100)


def test_a_config_files_null_budget_key_reaches_the_plan_as_no_limit() -> None:
    """``budget: {gpu_memory_factor: null}`` in .kernelopt.yml turns the memory budget off, as
    ``--budget gpu_memory_factor=null`` does; an unset key keeps the default; null where a key
    takes no null is a clear error, not the default."""
    from kernelopt_bot.config import BudgetConfig

    cfg = BudgetConfig.model_validate({"gpu_memory_factor": None, "tokens": None, "rounds": 4})
    assert cfg.as_dict() == {"gpu_memory_factor": None, "tokens": None, "rounds": 4}
    plan = RunPlan.parse(cfg.as_dict())
    assert plan.gpu_memory_factor is None and plan.tokens is None and plan.rounds == 4
    assert RunPlan.parse(BudgetConfig().as_dict()).gpu_memory_factor == 3.0
    with pytest.raises(BadInputError, match="null is not allowed"):
        RunPlan.parse(BudgetConfig.model_validate({"kernels": None}).as_dict())
