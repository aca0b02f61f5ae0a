"""Gates 1-3 for a launch config of a standalone Triton kernel, run in the interpreter on launcher
files of our own: an honest config passes, a malformed one fails gate 1, one the launcher's grid
does not agree with fails gate 2 (issue 14)."""

from __future__ import annotations

import pytest

from kernelopt_bot.launchers import capture_launches, load_launcher
from kernelopt_bot.verify.launcher import check_config_outputs, check_config_static
from tests.helpers import ROOT

LAUNCHERS = ROOT / "tests" / "launchers"


def _captured(name: str) -> tuple[object, object]:
    target = load_launcher(str(LAUNCHERS / name), None, "fp32")
    (launch,) = capture_launches(target)
    return target, launch


def test_an_honest_config_passes_gates_1_to_3() -> None:
    target, launch = _captured("row_softmax.py")
    config = {"ROWS": 4, "num_warps": 8, "num_stages": 3}
    assert check_config_static(launch, config).passed  # type: ignore[arg-type]
    gates = check_config_outputs(target, launch.name, config, launch.chosen)  # type: ignore[arg-type, attr-defined]
    assert [(g.name, g.passed) for g in gates] == [("correctness", True), ("model", True)], gates


@pytest.mark.parametrize(("config", "reason"), [
    ({"ROWS": 2, "num_warps": 3}, "num_warps=3 is not a power of two"),
    ({"ROWS": 2, "num_stages": True}, "num_stages=True must be an int"),
    ({"ROWS": 0}, "ROWS=0 must be a positive integer"),
    ({"ROWS": 2, "maxregs": 64}, "neither parameters of row_softmax_kernel nor launch options"),
])
def test_a_malformed_config_fails_gate_1(config: dict[str, object], reason: str) -> None:
    _, launch = _captured("row_softmax.py")
    gate = check_config_static(launch, config)  # type: ignore[arg-type]
    assert gate.passed is False and reason in gate.reason


def test_a_config_the_launchers_grid_does_not_agree_with_fails_gate_2() -> None:
    target, launch = _captured("fixed_grid.py")
    assert launch.chosen is not None and launch.chosen["ROWS"] == 2  # type: ignore[attr-defined]
    gates = check_config_outputs(target, launch.name, {"ROWS": 1, "num_warps": 4}, launch.chosen)  # type: ignore[arg-type, attr-defined]
    assert gates[0].name == "correctness" and gates[0].passed is False
    assert "outside rtol" in gates[0].reason and "seed 0" in gates[0].reason


def test_a_forced_config_keeps_the_autotune_lists_pre_hook() -> None:
    """A hook that zeroes an output before an accumulating kernel must run under a forced config
    too: the list's own entry is used when the values match, else the hook all entries share."""
    import triton

    from kernelopt_bot.launchers import _config_dict, _forced_config

    def zero_output(_args: dict[str, object]) -> None:
        pass

    configs = [triton.Config({"B": 16}, num_warps=4, pre_hook=zero_output),
               triton.Config({"B": 32}, num_warps=4, pre_hook=zero_output)]
    assert _forced_config(_config_dict(configs[1]), configs) is configs[1]
    made = _forced_config({**_config_dict(configs[0]), "B": 64}, configs)
    assert made.kwargs == {"B": 64} and made.pre_hook is zero_output
