"""Our source transformations apply to real kernels (H200 output code) and pass the static gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_bot.capture.artifact import parse_output_code
from kernelopt_bot.search.space import configs, sample
from kernelopt_bot.search.transforms import applicable, pipelined_reduction_loop
from kernelopt_bot.verify.static import check_config, check_source

H200 = Path(__file__).resolve().parent / "fixtures" / "output_code" / "torch-2.11.0"


@pytest.mark.parametrize("name", ["softmax.py", "rmsnorm.py", "softmax_bf16.py", "sum_middle_dim.py"])
def test_transformations_of_looped_reductions_pass_gate_1(name: str) -> None:
    kernel = parse_output_code((H200 / name).read_text()).kernels[0]
    assert kernel.kind == "reduction"
    variants = dict(applicable(kernel.source))
    assert "pipelined_loop_2" in variants and "num_stages=2)" in variants["pipelined_loop_2"]
    for label, source in variants.items():
        result = check_source(kernel, source)
        assert result.passed, f"{label}: {result.reason}"


def test_pipelining_does_not_apply_twice_or_to_pointwise() -> None:
    pointwise = parse_output_code((H200 / "gelu.py").read_text()).kernels[0]
    assert pipelined_reduction_loop(2)(pointwise.source) is None
    looped = parse_output_code((H200 / "softmax.py").read_text()).kernels[0]
    once = pipelined_reduction_loop(2)(looped.source)
    assert once is not None and pipelined_reduction_loop(3)(once) is None


def test_launch_space_is_valid_for_gate_1() -> None:
    kernel = parse_output_code((H200 / "softmax_bf16.py").read_text()).kernels[0]
    space = list(configs(kernel))
    assert len(space) > 50
    assert any(c.kwargs.get("R0_BLOCK") == 16384 for c in space)  # a whole row in one iteration
    for config in sample(kernel, 40, seed=1):
        assert check_config(kernel, config).passed, config.describe()
