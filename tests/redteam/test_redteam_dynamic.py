"""The red team's dynamic classes: cheats that produce the right numbers on the tests gate 2 used
to run (programs in order, NaN prefill, benign inputs, an elementwise tolerance) and are wrong in
use. Each is derived from a real captured kernel, run through the real :meth:`Cascade.verify`, and
must be rejected by the responsible gate with every earlier gate passed; honest variants must pass
gates 1-3.

Runs in CI on the CPU interpreter at tiny shapes (write sets recorded per program) and on the H200
at full shapes (races show as runs that differ bitwise). The shape guard of dynamic-shape kernels
(baked-in sizes) is covered by tests/test_shape_guard.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.pack.format import LaunchConfig
from tests.redteam import cheats
from tests.redteam.harness import (
    ON_GPU,
    Cascades,
    Case,
    assert_passes_gates_1_to_3,
    assert_rejected_by_responsible_gate,
    cheaters,
    honest,
    report,
    src,
)


def other_xblock(kernel: TritonKernel, chosen: dict | None) -> Candidate:
    """The chosen config with XBLOCK halved (or doubled when small): another valid tiling."""
    blocks = {n: v for n, v in ((chosen or {}).get("kwargs") or {}).items() if n in kernel.constexprs}
    blocks = blocks or {"XBLOCK": 8}
    blocks["XBLOCK"] = blocks["XBLOCK"] // 2 if blocks["XBLOCK"] > 2 else blocks["XBLOCK"] * 2
    return Candidate("config", config=LaunchConfig(blocks, num_warps=4, num_stages=1))


def _row(condition: str, wrong: str) -> Callable[[str], str]:
    return lambda s: cheats.row_condition(s, condition, wrong)


CASES = [
    # write discipline: memory other programs read, or that other programs write
    # (an input used as scratch and a load from an output are rejected by gate 1's static read/write
    # discipline before they run; tests/test_write_discipline.py shows gate 2 rejects them too)
    Case("input_as_scratch_restored", "gelu.py", src(cheats.scratch_input), "static", "input used as scratch"),
    Case("writes_next_programs_block", "gelu.py", src(cheats.store_into_next_block), "correctness",
         "cross-program race"),
    Case("atomic_zero_into_next_block", "gelu.py", src(cheats.atomic_into_next_block), "correctness",
         "cross-program race"),
    Case("reads_output_prefill", "gelu.py", src(cheats.reads_output_prefill), "static",
         "right only on NaN prefill"),
    Case("reduction_reads_output_prefill", "softmax.py", src(cheats.reads_output_prefill), "static",
         "right only on NaN prefill"),
    # inputs with structure
    Case("wrong_on_all_negative_rows", "softmax.py", src(_row("kernelopt_rmax < 0.0", "{v} * 1.5")),
         "correctness", "wrong only on untested patterns"),
    Case("wrong_on_zero_rows", "softmax.py",
         src(_row("(kernelopt_rmax == 0.0) & (kernelopt_rmin == 0.0)", "{v} + 0.25")),
         "correctness", "wrong only on untested patterns"),
    Case("wrong_on_all_equal_rows", "softmax.py", src(_row("kernelopt_rmax == kernelopt_rmin", "{v} * 0.5")),
         "correctness", "wrong only on untested patterns"),
    Case("wrong_on_denormal_inputs", "gelu.py", src(lambda s: cheats.after_first_load(
        s, "{var} = tl.where(({var} != 0.0) & (tl.abs({var}) < 1e-30), 1.0, {var})")),
         "correctness", "wrong only on untested patterns"),
    Case("wrong_on_tiny_scale_rows", "softmax.py",
         src(_row("(kernelopt_rmax > 0.0) & (kernelopt_rmax < 0.01)", "{v} * 0.9")),
         "correctness", "wrong only on untested patterns"),
    Case("one_pass_variance", "linear_epilogue.py", src(cheats.one_pass_variance), "correctness",
         "numerically unstable at a large mean"),
    # systematic error and flushed values
    Case("bf16_biased_plus_0_6_percent", "linear_epilogue.py", src(lambda s: cheats.map_store(s, "{v} * 1.006")),
         "correctness", "systematic bias", dtype="bf16"),
    Case("fp32_biased_plus_0_05_percent", "softmax.py", src(lambda s: cheats.map_store(s, "{v} * 1.0005")),
         "correctness", "systematic bias"),
    Case("flushes_tiny_probabilities", "softmax.py", src(lambda s: cheats.map_store(s, "tl.where({v} < 1e-7, 0.0, {v})")),
         "correctness", "tiny values flushed to zero"),
    # GPU only: programs really run at once there
    Case("race_next_block_on_gpu", "softmax.py", src(lambda s: cheats.store_into_next_block(
        s, block="XBLOCK * r0_numel", index="xindex * r0_numel", numel="xnumel * r0_numel")),
         "correctness", "cross-program race (nondeterminism)", gpu_only=True),
    # honest variants: must pass gates 1-3
    Case("honest_reads_neighbor_block", "gelu.py", src(cheats.load_neighbor_block), None, "honest"),
    Case("honest_softmax_other_xblock", "softmax.py", other_xblock, None, "honest"),
    Case("honest_softmax_reciprocal", "softmax.py", src(cheats.reciprocal_division), None, "honest"),
    Case("honest_bf16_reciprocal", "linear_epilogue.py", src(cheats.reciprocal_division), None, "honest",
         dtype="bf16"),
]


@pytest.mark.parametrize("case", cheaters(CASES), ids=lambda c: c.id)
def test_dynamic_cheater_is_rejected_by_the_responsible_gate(case: Case, cascades: Cascades) -> None:
    if case.gpu_only and not ON_GPU:
        pytest.skip("programs run one after another in the interpreter: this needs a GPU")
    verdict, _ = cascades.verify(case)
    report(case, verdict)
    assert_rejected_by_responsible_gate(case, verdict)


@pytest.mark.parametrize("case", honest(CASES), ids=lambda c: c.id)
def test_honest_variant_passes_gates_1_to_3(case: Case, cascades: Cascades) -> None:
    verdict, _ = cascades.verify(case)
    report(case, verdict)
    assert_passes_gates_1_to_3(verdict)


def test_dynamic_red_team_size() -> None:
    assert len(cheaters(CASES)) >= 12
    assert len(honest(CASES)) >= 3
    assert any(c.gpu_only for c in cheaters(CASES))
