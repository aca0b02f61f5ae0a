"""Gate 2 on inputs seeded with infinities and NaN: honest launch configs are not rejected for the
order in which IEEE arithmetic meets an infinity, and a kernel that is wrong there still is.

Found off the suite (benchmarks/unseen/var_mean_columns.py, bf16, on an H100, 12-07): every config
of Inductor's split ``var_mean``, max-autotune's own included, was "rejected by correctness" with
NaN where the compiler's kernel gave inf on a few elements of its partial sums.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.recorder import capture
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.search.tuner import ORIGIN
from kernelopt_bot.targets import load_target
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.correctness import COMPILER_SPREAD_SHARE, check_correctness
from kernelopt_bot.verify.tolerance import compare, disagreeing
from kernelopt_bot.verify.verdict import GateResult
from tests.helpers import DEVICE, captured, gate2_gpu_path_on_cpu

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


@pytest.mark.parametrize("distribution", ["special", "mixed", "large", "row_scales", "denormal", "normal", "zero_rows"])
def test_gate_two_takes_nan_for_an_infinity_only_on_inputs_that_overflow(distribution: str) -> None:
    """Attention pooling bf16 on an H100 (12-07c): gate 2 drew the second kernel's max and sum like
    any input, exp(x - max) overflowed on the wide "mixed" inputs, and the compiler's own source at
    another launch config gave inf where its config gave NaN on 36 elements (partial sums that
    overflowed to both signs meet as NaN in one order and stay inf in another). On inputs that
    cannot overflow, NaN and inf must still sit where the reference has them."""
    from kernelopt_bot.verify.correctness import OVERFLOWING_DISTRIBUTIONS

    overflowing = distribution in OVERFLOWING_DISTRIBUTIONS
    assert overflowing == (distribution in ("special", "mixed", "large", "row_scales", "denormal"))
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


def test_disagreeing_marks_a_change_of_kind_and_a_finite_gap_beyond_tolerance() -> None:
    first, second = _pair([NAN, INF, 0.5, -INF, 0.9], [0.5, -INF, 0.5, -INF, 0.9004])
    assert disagreeing(first, second)[:5].tolist() == [True, True, False, False, False]
    first[4] = 0.95  # 5% off a float32 value: beyond rtol=1e-3
    assert disagreeing(first, second)[4]
    assert not disagreeing(second, second).any()
    # NaN against an infinity agrees, as gate 2 judges inputs that overflow
    assert not disagreeing(*_pair([NAN, -INF], [INF, NAN]))[:2].any()


def _doubled(nan_at: tuple[int, ...] = (), value: float = NAN) -> Callable[[tuple[object, ...]], None]:
    """A stand-in kernel for gelu's arguments (x, out, n): out = 2x, ``value`` at ``nan_at`` (NaN:
    where an overflow's order made one launch config give NaN)."""
    def launch(args: tuple[object, ...]) -> None:
        x, out = args[0], args[1]
        assert isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor)
        out.copy_(x * 2)
        out.view(-1)[list(nan_at)] = value
    return launch


def _gate2(distribution: str, candidate_nan_at: tuple[int, ...], compiler_at_config_nan_at: tuple[int, ...] | None,
           candidate_value: float = NAN) -> GateResult:
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    rec = cap.recording(kernel.graph, kernel.name)
    at_config = None if compiler_at_config_nan_at is None else (lambda: _doubled(compiler_at_config_nan_at))
    return check_correctness(kernel, rec.args, rec.kwargs, _doubled(candidate_nan_at, candidate_value), _doubled(),
                             seeds=(0,), distributions=(distribution,), device="cuda",
                             reference_at_candidate_config=at_config)


@pytest.fixture()
def _no_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's path through gate 2 (no interpreter trace; the repeat check), run on the CPU."""
    gate2_gpu_path_on_cpu(monkeypatch)


@pytest.mark.usefixtures("_no_sync")
def test_gate_two_does_not_judge_where_the_compilers_kernel_at_the_candidates_config_disagrees_with_itself() -> None:
    """Attention pooling bf16 on an H100 (12-07d): on denormal inputs the softmax's sum overflowed
    1/sum, and the compiler's own source at another launch config (its eviction hints dropped) gave
    NaN where its config gave finite values on 134 of 196608 elements, and the reverse on 112. Gate
    2 rejected it, and with it every tuner candidate at that config. The elements where the
    compiler's kernel at the candidate's config disagrees with itself are now not judged, on
    inputs that overflow, up to a share of the output; everywhere else the rules stand."""
    excused = _gate2("large", (0, 1), (0, 1))
    assert excused.passed, excused.reason
    assert "2 element(s) on inputs that overflow not judged" in excused.reason
    assert excused.numbers["compiler_spread_elements"] == 2
    # Without the compiler's kernel at that config (it does not compile), nothing is excused.
    assert _gate2("large", (0, 1), None).passed is False
    # NaN where the compiler's kernel agrees with itself is the candidate's own.
    elsewhere = _gate2("large", (0, 1, 2), (0, 1))
    assert elsewhere.passed is False and "1 NaN where the reference has values" in elsewhere.reason
    # Where the two configs disagree, the candidate must give what one of them gives: a finite value
    # of its own making where one config gives NaN and the other 2x is its own (review, stop 61).
    own = _gate2("large", (0, 1), (0, 1), candidate_value=12345.0)
    assert own.passed is False and "elements outside rtol" in own.reason, own.reason
    # On inputs that do not overflow, the rules stand whole.
    assert _gate2("normal", (0, 1), (0, 1)).passed is False


@pytest.mark.usefixtures("_no_sync")
def test_gate_two_judges_the_whole_output_where_the_compilers_kernel_disagrees_with_itself_widely() -> None:
    """A launch config at which the compiler's own kernel differs on more than a share of the
    output says something about that config: a candidate that picked it is judged everywhere (an
    LLM's config that breaks the original must not excuse the candidate's output)."""
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    n = cap.recording(kernel.graph, kernel.name).args[1].numel()
    wide = tuple(range(int(COMPILER_SPREAD_SHARE * n) + 1))
    gate = _gate2("large", wide, wide)
    assert gate.passed is False and "NaN pattern differs" in gate.reason
    assert f"disagrees with itself on {len(wide)} of {n} elements of out_ptr0, over 1%: judged whole" in gate.reason
