"""GPU memory is planned: comparisons run in bounded pieces with the answers of one pass, and
running out of memory in gates 3 and 4 is our failure (retried once), never a verdict."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.errors import one_line
from kernelopt_bot.harness import memory
from kernelopt_bot.harness.arm_process import ArmRaised
from kernelopt_bot.harness.bench import _max_abs_diff
from kernelopt_bot.harness.failures import InfrastructureFailure
from kernelopt_bot.harness.swap_arm import EngineArm
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.targets import load_target
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.model import check_model
from kernelopt_bot.verify.tolerance import compare, relative_error, systematic_bias
from tests.helpers import ROOT, captured

OOM_TEXT = ("CUDA out of memory. Tried to allocate 7.50 GiB. GPU 0 has a total capacity of 139.81 GiB of "
            "which 1.20 GiB is free.")


def _cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, candidate, reference) pairs that reach every outcome of :func:`compare`."""
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(37, 29, generator=gen)
    cases = [("equal", ref.clone(), ref), ("scaled 1%", ref * 1.01, ref)]
    cases.append(("honest rounding", ref + 1e-7 * torch.randn(37, 29, generator=gen), ref))
    cases.append(("biased", (ref.double() * (1 + 3e-4)).float(), ref))
    stray = ref.clone()
    stray[3, 4] = stray[30, 1] = float("nan")
    cases.append(("stray NaN", stray, ref))
    special = ref.clone()
    special[1, 1], special[2, 2], special[36, 28] = float("inf"), float("nan"), float("-inf")
    cases.append(("same specials", special.clone(), special))
    flipped = special.clone()
    flipped[1, 1] = float("-inf")
    cases.append(("infinity flipped", flipped, special))
    missing = special.clone()
    missing[2, 2] = 0.0
    cases.append(("missing NaN", missing, special))
    small = ref.clone()
    small.view(-1)[::50] *= 1e-8  # 22 small normal values, 2% of the elements
    flushed = small.clone()
    flushed.view(-1)[::50] = 0.0
    cases.append(("flushed", flushed, small))
    spikes = ref.clone()
    spikes[0, :5] += 10.0
    cases.append(("few large errors", spikes, ref))
    cases.append(("strided", ref.t().contiguous().t(), ref))
    half = ref.to(torch.bfloat16)
    cases.append(("bf16 rounding", (half.double() * (1 + 1e-3)).to(torch.bfloat16), half))
    return cases


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300)
    return a == b


@pytest.mark.parametrize(("name", "candidate", "reference"), _cases(), ids=[c[0] for c in _cases()])
def test_comparison_in_small_pieces_gives_the_one_pass_answer(
        name: str, candidate: torch.Tensor, reference: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = compare(candidate, reference)
    whole_error = relative_error(candidate, reference)
    whole_bias = systematic_bias(candidate, reference, reference.dtype)
    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 7)  # 37 x 29 elements in 154 pieces, the last one short
    pieces = compare(candidate, reference)
    assert (pieces.ok, pieces.reason) == (whole.ok, whole.reason)
    assert pieces.numbers.keys() == whole.numbers.keys()
    assert all(_close(pieces.numbers[k], whole.numbers[k]) for k in whole.numbers), (pieces.numbers, whole.numbers)
    assert _close(relative_error(candidate, reference), whole_error)
    bias = systematic_bias(candidate, reference, reference.dtype)
    assert _close(bias.signed, whole_bias.signed) and _close(bias.bound, whole_bias.bound)


def test_the_cases_reach_every_verdict() -> None:
    """The pieces test above means something only if its cases fail in every way compare can."""
    reasons = {name: compare(c, r).reason for name, c, r in _cases()}
    assert reasons["equal"] == "within tolerance"
    assert "NaN pattern differs (2 NaN" in reasons["stray NaN"]
    assert "1 missing" in reasons["missing NaN"]
    assert "infinities differ" in reasons["infinity flipped"]
    assert "systematic error" in reasons["biased"]
    assert "flushed to zero" in reasons["flushed"]
    assert "elements outside" in reasons["few large errors"]


def test_max_abs_diff_in_small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(1)
    a = [torch.randn(33, 5, generator=gen), torch.arange(12)]
    b = [a[0] + 0.25 * (torch.arange(165).reshape(33, 5) == 100), a[1].clone()]
    whole = _max_abs_diff(a, b)
    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 4)
    assert _max_abs_diff(a, b) == whole == pytest.approx(0.25)
    b[0][32, 4] = float("nan")  # in the last, short piece
    assert _max_abs_diff(a, b) == math.inf


def test_bitwise_comparison_in_small_pieces_finds_a_difference_in_any_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gate 2's bit-for-bit checks (inputs left untouched, repeat runs identical) go in pieces of
    4 x ``CHUNK_ELEMENTS`` bytes: a flipped bit in the last, short piece, or a sign of zero, counts."""
    from kernelopt_bot.verify.correctness import _same

    monkeypatch.setattr(memory, "CHUNK_ELEMENTS", 3)  # 12-byte pieces of a 37 x 29 float32 tensor
    a = torch.randn(37, 29, generator=torch.Generator().manual_seed(2))
    b = a.clone()
    assert _same(a, b) and _same(a.t(), b.t()) and _same(torch.tensor(1.0), torch.tensor(1.0))
    b.view(-1)[-1] = torch.nextafter(b.view(-1)[-1], torch.tensor(math.inf))  # one ulp, last piece
    assert not _same(a, b)
    assert not _same(torch.zeros(5), -torch.zeros(5))
    assert not _same(torch.zeros(6), torch.zeros(2, 3))  # same bytes, another shape


def test_max_abs_diff_out_of_memory_twice_is_infrastructure(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        raise torch.OutOfMemoryError(OOM_TEXT)

    monkeypatch.setattr(memory, "float64_chunks", out_of_memory)
    with pytest.raises(InfrastructureFailure, match="retried once after freeing"):
        _max_abs_diff([torch.ones(3)], [torch.ones(3)])
    assert len(calls) == 2


def test_free_memory_is_safe_without_cuda() -> None:
    memory.free_memory("cpu")
    memory.free_memory("cuda")  # no CUDA here: only garbage collection
    assert memory.retry_note("cpu") == "retried once after freeing"


class _FakeArm:
    """A model arm whose every request raises ``error`` (a process arm's report of it)."""

    where = "process"

    def __init__(self, error: BaseException, applied: str = "k") -> None:
        self.error = error
        self.info = {"applied": [applied], "skipped": []}
        self.requests = 0

    def request(self, *message: Any, timeout_s: float = 600.0) -> Any:
        self.requests += 1
        raise self.error


@pytest.fixture(scope="module")
def rms_target() -> Any:
    return load_target(str(ROOT / "benchmarks" / "level1" / "rms_norm_large.py"), "cpu", "fp32")


def test_an_arm_out_of_memory_in_gate3_is_infrastructure_not_a_verdict(rms_target: Any) -> None:
    arm = _FakeArm(ArmRaised("candidate", one_line(torch.OutOfMemoryError(OOM_TEXT))))
    with pytest.raises(InfrastructureFailure, match="CUDA out of memory"):
        check_model(rms_target, _FakeArm(RuntimeError("unused")), arm, "k", seeds=(101,))


def test_out_of_memory_in_this_process_during_gate3_is_infrastructure(rms_target: Any) -> None:
    with pytest.raises(InfrastructureFailure, match="out of memory checking the model"):
        check_model(rms_target, _FakeArm(RuntimeError("unused")), _FakeArm(torch.OutOfMemoryError(OOM_TEXT)),
                    "k", seeds=(101,))


def test_a_candidate_that_raises_otherwise_is_rejected_by_gate3(rms_target: Any) -> None:
    arm = _FakeArm(ArmRaised("candidate", "IndexError: index 7 is out of bounds"))
    result = check_model(rms_target, _FakeArm(RuntimeError("unused")), arm, "k", seeds=(101,))
    assert result.passed is False and "IndexError" in result.reason


def test_a_candidate_that_raises_words_of_our_deadline_is_still_rejected_by_gate3(rms_target: Any) -> None:
    """Only an arm we killed (ArmTimeout) is our deadline: a candidate's own exception that reads
    like one is the candidate's failure, not an infrastructure failure that would spare it a verdict."""
    arm = _FakeArm(ArmRaised("candidate", "RuntimeError: candidate: no answer to start within 5 s (killed)"))
    result = check_model(rms_target, _FakeArm(RuntimeError("unused")), arm, "k", seeds=(101,))
    assert result.passed is False and "no answer to start" in result.reason


def test_cascade_retries_gates_3_and_4_once_then_reports_out_of_memory_as_infrastructure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    block = next(iter(kernel.constexprs))
    candidate = Candidate("config", config=LaunchConfig({block: 16}, num_warps=4, num_stages=1), origin="tuner")
    asked: list[str] = []

    def request(self: EngineArm, *message: Any, timeout_s: float = 600.0) -> Any:
        asked.append(self.label)
        if self.label == "candidate":
            raise ArmRaised(self.label, one_line(torch.OutOfMemoryError(OOM_TEXT)))
        return original(self, *message, timeout_s=timeout_s)

    original = EngineArm.request
    monkeypatch.setattr(EngineArm, "request", request)
    with Cascade(cap, VerifyOptions(seeds=(0,), distributions=("normal",), model_seeds=(101,))) as cascade:
        verdict = cascade.verify(kernel, candidate)
    assert verdict.gate("correctness").passed is True
    assert asked.count("candidate") == 2  # once, and once more after freeing
    assert verdict.rejected_by is None and not verdict.accepted
    assert verdict.infrastructure is not None and "CUDA out of memory" in verdict.infrastructure
    assert "retried once after freeing" in verdict.infrastructure
    assert verdict.gate("model").passed is None and verdict.gate("performance").passed is None
