"""Gate 2 on inputs seeded with infinities and NaN: honest launch configs are not rejected for the
order in which IEEE arithmetic meets an infinity, and a kernel that is wrong there still is.

Found off the suite (benchmarks/unseen/var_mean_columns.py, bf16, on an H100, 12-07): every config
of Inductor's split ``var_mean``, max-autotune's own included, was "rejected by correctness" with
NaN where the compiler's kernel gave inf on a few elements of its partial sums.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.recorder import capture
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.search.tuner import ORIGIN
from kernelopt_bot.targets import load_target
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.tolerance import compare
from tests.helpers import DEVICE

INF, NAN = float("inf"), float("nan")


def _pair(candidate: list[float], reference: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    base = torch.linspace(-1.0, 1.0, 16)
    c, r = base.clone(), base.clone()
    c[: len(candidate)] = torch.tensor(candidate)
    r[: len(reference)] = torch.tensor(reference)
    return c, r


@pytest.mark.parametrize(("candidate", "reference"), [([NAN], [INF]), ([INF, -INF], [NAN, NAN]), ([NAN], [-INF])])
def test_on_special_inputs_nan_and_an_infinity_are_both_not_finite(candidate: list[float],
                                                                  reference: list[float]) -> None:
    c, r = _pair(candidate, reference)
    assert compare(c, r, specials=True).ok
    assert not compare(c, r).ok  # elsewhere NaN and inf must sit exactly where the reference has them


@pytest.mark.parametrize(("candidate", "reference", "reason"), [
    ([NAN], [0.5], "NaN pattern differs (1 NaN where the reference has values"),  # unwritten, on NaN prefill
    ([0.5], [NAN], "1 missing"),  # a NaN swallowed
    ([INF], [0.5], "infinities differ"),
    ([0.5], [-INF], "infinities differ"),
    ([-INF], [INF], "infinities differ"),  # an infinity of the wrong sign
])
def test_on_special_inputs_finite_against_not_finite_still_fails(candidate: list[float], reference: list[float],
                                                                 reason: str) -> None:
    c, r = _pair(candidate, reference)
    result = compare(c, r, specials=True)
    assert not result.ok and reason in result.reason, result.reason


@pytest.mark.parametrize("distribution", ["special", "mixed", "large", "row_scales", "normal", "zero_rows"])
def test_gate_two_takes_nan_for_an_infinity_only_on_inputs_that_overflow(distribution: str) -> None:
    """Attention pooling bf16 on an H100 (12-07c): gate 2 drew the second kernel's max and sum like
    any input, exp(x - max) overflowed on the wide "mixed" inputs, and the compiler's own source at
    another launch config gave inf where its config gave NaN on 36 elements (partial sums that
    overflowed to both signs meet as NaN in one order and stay inf in another). On inputs that
    cannot overflow, NaN and inf must still sit where the reference has them."""
    from kernelopt_bot.verify.correctness import OVERFLOWING_DISTRIBUTIONS

    overflowing = distribution in OVERFLOWING_DISTRIBUTIONS
    assert overflowing == (distribution in ("special", "mixed", "large", "row_scales"))
    c, r = _pair([INF, NAN, 0.5], [NAN, -INF, 0.5])
    assert compare(c, r, specials=overflowing).ok == overflowing
    c, r = _pair([INF], [0.5])  # finite against not finite fails everywhere
    assert not compare(c, r, specials=overflowing).ok


VAR_MEAN_COLUMNS = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.var_mean(x, dim=0)


def get_inputs():
    return [torch.randn(8192, 6)]


def get_init_inputs():
    return []
'''


def test_honest_configs_of_a_split_welford_pass_gate_two_on_special_inputs(tmp_path: Path) -> None:
    """Inductor splits this column reduction (a looped Welford kernel writing partial mean, m2 and
    weight, then a kernel combining them). With R0_BLOCK=8 or 128 the lanes meet the seeded
    infinities in another order than the compiler's config: before the special-values rule, both
    were rejected ("40-48 NaN where the reference has values", "66 missing")."""
    path = tmp_path / "var_mean_columns.py"
    path.write_text(VAR_MEAN_COLUMNS)
    captured = capture(load_target(str(path), DEVICE, "fp32"))
    kernel = next(k for k in captured.artifact.kernels if k.kind == "reduction")
    assert "welford" in kernel.source
    with Cascade(captured, VerifyOptions(seeds=(0, 1, 2), rounds=1)) as gates:
        for blocks in ({"XBLOCK": 64, "R0_BLOCK": 8}, {"XBLOCK": 4, "R0_BLOCK": 128}):
            config = LaunchConfig(blocks, num_warps=4, num_stages=1)
            verdict = gates.verify(kernel, Candidate(config.describe(), config=config, origin=ORIGIN))
            assert verdict.infrastructure is None
            assert [g.name for g in verdict.gates if g.passed] == ["static", "correctness", "model"], verdict.gates
