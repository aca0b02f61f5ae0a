"""Gate 2's dynamic half on its own (no gate 1 in front): per-program write and read sets recorded
in the interpreter, the prefill patterns, the structured inputs and the bias and flush rules."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from kernelopt_bot.harness.kernel import KernelHarness
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.verify.correctness import (
    DISTRIBUTIONS,
    PREFILLS,
    STRUCTURED_DISTRIBUTIONS,
    check_correctness,
    draw,
    trial_plan,
)
from kernelopt_bot.verify.tolerance import compare, flushed_to_zero, systematic_bias
from kernelopt_bot.verify.verdict import GateResult
from tests.helpers import captured
from tests.redteam import cheats

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the write-set record is the CPU interpreter's")


def _gate2(example: str, edit: Callable[[str], str], **kw: object) -> GateResult:
    cap = captured(example)
    kernel = cap.artifact.kernels[0]
    rec = cap.recording(kernel.graph, kernel.name)
    harness = KernelHarness(kernel, rec, "cpu")
    candidate = harness.load(source=edit(kernel.source))
    reference = harness.load(source=kernel.source,
                             config=LaunchConfig.from_json(rec.chosen_config) if rec.chosen_config else None)
    return check_correctness(kernel, rec.args, rec.kwargs, lambda a: harness.launch(candidate, a),
                             lambda a: harness.launch(reference, a), device="cpu", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("edit", "expected"), [
    (cheats.scratch_input, "stores to in_ptr0, which the compiler's kernel never writes"),
    (cheats.store_into_next_block, r"programs \(0, 0, 0\) and \(1, 0, 0\) both write element"),
    (cheats.atomic_into_next_block, "both write element"),
    (cheats.reads_output_prefill, "loads 512 element"),
], ids=["input_as_scratch", "next_block", "atomic_next_block", "reads_output"])
def test_gate2_rejects_what_only_the_memory_record_shows(edit: Callable[[str], str], expected: str) -> None:
    gate = _gate2("gelu.py", edit, seeds=(0,), distributions=("normal",))
    assert gate.passed is False
    assert gate.reason.startswith("write discipline:")
    assert re.search(expected, gate.reason), gate.reason


def test_gate2_accepts_reads_outside_the_programs_block() -> None:
    gate = _gate2("gelu.py", cheats.load_neighbor_block, seeds=(0,), distributions=("normal", "zero_rows"))
    assert gate.passed is True, gate.reason
    assert "write sets recorded" in gate.reason


def test_trials_cover_every_prefill_and_structured_distribution() -> None:
    plan = trial_plan((0, 1, 2), DISTRIBUTIONS)
    assert len(plan) == 3 * 5 + len(STRUCTURED_DISTRIBUTIONS)
    assert {d for _, d in plan} == set(DISTRIBUTIONS)
    assert len(plan) >= len(PREFILLS)


def test_structured_distributions_have_their_structure() -> None:
    gen = torch.Generator().manual_seed(0)
    rows = draw("negative_rows", 64, gen, row=16).view(4, 16)
    assert bool((rows[0] < 0).all()) and bool((rows[2] < 0).all())
    rows = draw("equal_rows", 64, gen, row=16).view(4, 16)
    assert bool((rows[0] == rows[0, 0]).all())
    assert bool((draw("zero_rows", 64, gen, row=16).view(4, 16)[0] == 0).all())
    assert float(draw("offset", 64, gen).mean()) > 900
    scales = draw("row_scales", 640, gen, row=64).view(10, 64).abs().amax(1)
    assert float(scales.max() / scales.min()) > 100
    tiny = draw("denormal", 1000, gen)
    small = (tiny != 0) & (tiny.abs() < torch.finfo(torch.float32).tiny)
    assert int(small.sum()) > 300


def test_systematic_bias_is_caught_and_honest_rounding_is_not() -> None:
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(4096, generator=gen).to(torch.bfloat16)
    biased = (ref.float() * 1.006).to(torch.bfloat16)
    assert not systematic_bias(biased, ref, torch.bfloat16).ok
    assert not compare(biased, ref).ok and "systematic" in compare(biased, ref).reason
    # honest: the same values computed in another order, rounded to bf16 (errors of either sign)
    exact = torch.randn(4096, generator=gen, dtype=torch.float64)
    noisy = exact * (1 + 1e-3 * torch.randn(4096, generator=gen, dtype=torch.float64))
    honest, ref = noisy.to(torch.bfloat16), exact.to(torch.bfloat16)
    assert systematic_bias(honest, ref, torch.bfloat16).ok
    assert compare(honest, ref).ok, compare(honest, ref).reason


def test_a_float32_kernel_a_rounding_unit_off_on_average_is_honest_and_fp16_rounding_is_not() -> None:
    """Measured on an H200: softmax with exp via exp2, 512 outputs, mean signed relative error
    +6e-8 (one float32 rounding unit) against the compiler's kernel: honest. The fp16-rounding
    cheat measured +4.9e-5 there (full size): a bias that large is not."""
    gen = torch.Generator().manual_seed(5)
    ref = torch.rand(512, generator=gen) + 0.01
    one_unit_high = ref * (1 + 6e-8) + ref * 1e-8 * torch.randn(512, generator=gen)
    assert systematic_bias(one_unit_high, ref, torch.float32).ok
    assert compare(one_unit_high, ref).ok, compare(one_unit_high, ref).reason
    biased_like_fp16 = ref * (1 + 4.9e-5) + ref * 1e-8 * torch.randn(512, generator=gen)
    assert not systematic_bias(biased_like_fp16, ref, torch.float32).ok


def test_values_flushed_to_zero_are_caught() -> None:
    ref = torch.cat([torch.rand(900) + 0.5, torch.full((100,), 1e-9)])
    flushed = torch.where(ref < 1e-6, torch.zeros_like(ref), ref)
    assert flushed_to_zero(flushed, ref, torch.float32) == (100, 1000)
    result = compare(flushed, ref)
    assert not result.ok and "flushed to zero" in result.reason
    one = ref.clone()
    one[-1] = 0.0  # a single exact zero (cancellation can do that honestly)
    assert compare(one, ref).ok
