"""The user's compile settings: every compile of a run uses them, and the baseline is that compile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_bot.capture.settings import CompileSettings, check_config, parse_config_items
from kernelopt_bot.compile_options import COMPILE_OPTIONS, recommend
from kernelopt_bot.config import KerneloptConfig
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.github.runner import make_jobs
from kernelopt_bot.pipeline import reproduce_command
from tests.helpers import EXAMPLES
from tests.test_report import model_repo, shell


def test_settings_name_themselves_and_round_trip() -> None:
    default = CompileSettings()
    assert default.is_default and default.label == "torch.compile (default)" and default.cli_args() == []
    assert CompileSettings("default") == default  # the mode named "default" is no mode
    tuned = CompileSettings("max-autotune-no-cudagraphs", {"coordinate_descent_tuning": True})
    assert tuned.label == "torch.compile (mode=max-autotune-no-cudagraphs, coordinate_descent_tuning=true)"
    assert tuned.cli_args() == ["--mode", "max-autotune-no-cudagraphs",
                                "--inductor-config", "coordinate_descent_tuning=true"]
    assert CompileSettings.from_json(json.loads(json.dumps(tuned.to_json()))) == tuned
    assert tuned.with_option(None, {"coordinate_descent_tuning": True}) == tuned
    assert tuned.with_option("reduce-overhead", None).mode == "reduce-overhead"
    with pytest.raises(BadInputError, match="expected one of"):
        CompileSettings("fastest")


def test_config_items_parse_as_json_and_keys_are_inductors() -> None:
    assert parse_config_items(["a=true", "b=3", "c=x", 'd="y"']) == {"a": True, "b": 3, "c": "x", "d": "y"}
    with pytest.raises(BadInputError, match="expected KEY=VALUE"):
        parse_config_items(["=1"])
    assert check_config({"coordinate_descent_tuning": True}) == {"coordinate_descent_tuning": True}
    with pytest.raises(BadInputError, match="unknown Inductor config key"):
        check_config({"coordinate_descent_tunning": True})
    # values of the default's type (null fits any: some keys are optional); a number for a flag does not
    assert check_config({"compile_threads": 4, "max_autotune_gemm_backends": "TRITON", "triton.max_tiles": None})
    with pytest.raises(BadInputError, match=r"coordinate_descent_tuning=1 \(expected true or false\)"):
        check_config({"coordinate_descent_tuning": 1})
    with pytest.raises(BadInputError, match=r"compile_threads=true \(expected an integer\)"):
        check_config({"compile_threads": True})


def test_the_reproduce_line_carries_the_settings() -> None:
    line = reproduce_command("m.py", None, "fp32", {}, 1.03, None,
                             CompileSettings("max-autotune", {"triton.persistent_reductions": False}))
    assert "--mode max-autotune --inductor-config triton.persistent_reductions=false" in line


def test_a_compiler_option_the_model_already_uses_is_not_measured_against_itself() -> None:
    class _Arena:
        device, dtype, mode, config = "cuda", "fp32", "max-autotune-no-cudagraphs", {}

        def prestart(self) -> bool:
            return True

        def baselines(self) -> tuple[None, None]:
            return None, None

        def room_for(self, wanted: int) -> int:
            return 0  # nothing may start: only the skipped option gets an answer

        def settle(self) -> None:
            pass

        def candidate(self, *_a: object, **_k: object) -> None:
            raise AssertionError("no arm may start")

    recs = recommend(_Arena(), None, gamma=1.03, time_left=lambda: 0.0)  # type: ignore[arg-type]
    by_option = {r.option: r for r in recs}
    same = by_option[COMPILE_OPTIONS[0].label]
    assert "the baseline already is torch.compile (mode=max-autotune-no-cudagraphs)" in same.detail
    assert all("wall-time budget" in r.detail for r in recs if r is not same)


def test_a_config_target_carries_its_settings_to_the_job() -> None:
    cfg = KerneloptConfig.model_validate({"targets": [{
        "name": "m", "entry": "m.py", "compile_mode": "max-autotune-no-cudagraphs",
        "inductor_config": {"coordinate_descent_tuning": True}}]})
    (job,) = make_jobs(cfg, cfg.targets)
    assert CompileSettings.from_json(job.compile) == CompileSettings("max-autotune-no-cudagraphs",
                                                                     {"coordinate_descent_tuning": True})


def test_optimize_compiles_as_the_user_does_and_its_reproduce_line_runs(tmp_path: Path) -> None:
    """Without persistent reductions Inductor writes softmax as a looped reduction (triton_red_):
    the run searched the kernels the user's settings produce, says which baseline it measured
    against, and the printed command repeats it."""
    repo = model_repo(tmp_path / "repo", {})
    (repo / "softmax.py").write_text((EXAMPLES / "softmax.py").read_text())
    first = shell("kernelopt optimize softmax.py --inductor-config triton.persistent_reductions=false "
                  "--budget candidates=0 --budget compile_options=false", repo)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    out = repo / "kernelopt-out" / "softmax"
    result = json.loads((out / "result.json").read_text())
    assert result["compile"] == {"mode": None, "config": {"triton.persistent_reductions": False}}
    names = [k["name"] for k in result["kernels"]]
    assert names and all(n.startswith("triton_red_") for n in names), names
    assert "--inductor-config triton.persistent_reductions=false" in result["reproduce"]
    again = shell(result["reproduce"], repo)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert json.loads((out / "result.json").read_text())["compile"] == result["compile"]


def test_a_target_file_says_how_it_is_compiled(tmp_path: Path) -> None:
    """``TORCH_COMPILE`` in the target's file: the run compiles, searches and names its baseline
    by it, with no flag; a flag still overrides it; a malformed one is bad input (exit 2)."""
    repo = model_repo(tmp_path / "repo", {})
    source = (EXAMPLES / "softmax.py").read_text()
    (repo / "softmax.py").write_text(source + '\nTORCH_COMPILE = {"options": {"triton.persistent_reductions": False}}\n')
    run = shell("kernelopt optimize softmax.py --budget candidates=0 --budget compile_options=false", repo)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads((repo / "kernelopt-out" / "softmax" / "result.json").read_text())
    assert result["compile"] == {"mode": None, "config": {"triton.persistent_reductions": False}}
    assert all(k["name"].startswith("triton_red_") for k in result["kernels"]), result["kernels"]
    assert "TORCH_COMPILE says: torch.compile (triton.persistent_reductions=false)" in (
        repo / "kernelopt-out" / "softmax" / "run.log").read_text()
    again = shell("kernelopt optimize softmax.py --inductor-config triton.persistent_reductions=true "
                  "--budget candidates=0 --budget compile_options=false", repo)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    result = json.loads((repo / "kernelopt-out" / "softmax" / "result.json").read_text())
    assert all(k["name"].startswith("triton_per_") for k in result["kernels"]), result["kernels"]
    (repo / "softmax.py").write_text(source + '\nTORCH_COMPILE = {"mode": "fastest"}\n')
    bad = shell("kernelopt optimize softmax.py --budget candidates=0", repo)
    assert bad.returncode == 2 and "TORCH_COMPILE mode 'fastest'" in bad.stdout + bad.stderr
