"""The red team: cheating candidates against real Inductor kernels, each rejected by the gate
responsible for it (VERIFY.md's table), and honest candidates that must not be rejected.

Runs in CI on the CPU interpreter at tiny shapes and on the H200 at full shapes (same file).
"""

from __future__ import annotations

import pytest

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.pack.format import LaunchConfig
from tests.redteam import cheats
from tests.redteam.harness import (
    FULL_SIZE,
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


def other_config(kernel: TritonKernel, chosen: dict | None) -> Candidate:
    """A different valid launch config: the chosen block size halved (or doubled), other warps."""
    blocks = {n: v for n, v in ((chosen or {}).get("kwargs") or {}).items() if n in kernel.constexprs}
    if not blocks:
        blocks = {n: 8 for n in kernel.constexprs}
    name = next(iter(blocks))
    blocks[name] = blocks[name] // 2 if blocks[name] > 8 else blocks[name] * 2
    warps = 8 if (chosen or {}).get("num_warps", 4) != 8 else 4
    return Candidate("config", config=LaunchConfig(blocks, num_warps=warps, num_stages=1))


def spin(source: str) -> str:
    """A loop of 2**40 floating-point adds (not foldable without reassociation) feeding the output."""
    hung = cheats.after_first_load(source, "kernelopt_acc = {var} * 0.0\n"
                                   "    for kernelopt_i in range(0, 1099511627776):\n"
                                   "        kernelopt_acc += {var}")
    return cheats.map_store(hung, "{v} + kernelopt_acc * 0.0")


CASES = [
    # output left unwritten
    Case("unwritten_output", "gelu.py", src(cheats.drop_store), "correctness", "output left unwritten"),
    Case("half_written_output", "softmax.py", src(cheats.half_store), "correctness", "output left unwritten"),
    # result cached between calls
    Case("module_level_cache", "gelu.py", src(lambda s: cheats.module_level(s, "_KERNELOPT_CACHE = {}")),
         "static", "result cached between calls"),
    # inputs modified in place
    Case("mutates_input", "gelu.py", src(cheats.write_input), "static", "inputs modified in place (store discipline)"),
    # work moved to another stream or thread
    Case("side_stream", "gelu.py", src(lambda s: cheats.module_level(
        s, "import torch", "_SIDE = torch.cuda.Stream()", before_kernel=True)), "static", "work moved to another stream"),
    Case("background_thread", "gelu.py", src(lambda s: cheats.module_level(s, "import threading", before_kernel=True)),
         "static", "work moved to another thread"),
    # tolerance too loose (zeros or constants pass): the negative control first
    Case("zeros_negative_control", "gelu.py", src(lambda s: cheats.map_store(s, "tl.zeros_like({v})")),
         "correctness", "tolerance too loose"),
    Case("constant_output", "softmax.py", src(lambda s: cheats.map_store(s, "tl.zeros_like({v}) + 0.001")),
         "correctness", "tolerance too loose"),
    Case("one_percent_off", "linear_epilogue.py", src(lambda s: cheats.map_store(s, "{v} * 1.01")),
         "correctness", "tolerance too loose"),
    # lower precision slipped in
    # (gate 2 sees it first since its inputs include per-row scales down to 1e-4 and denormals:
    # fp16 flushes values float32 holds to exactly 0)
    Case("fp16_output_rounding", "linear_epilogue.py",
         src(lambda s: cheats.map_store(s, "{v}.to(tl.float16).to(tl.float32)")), "correctness", "lower precision"),
    # the same rounding only where fp16 has normal numbers: within gate 2's elementwise tolerance,
    # so at tiny size the float64 referee of gate 3 is what catches it; at full size (67M outputs)
    # gate 2's bias test already sees its mean signed error (+4.9e-5 against a 1.6e-6 bound on the H200)
    Case("fp16_rounding_normal_range", "linear_epilogue.py",
         src(lambda s: cheats.map_store(s, "tl.where(tl.abs({v}) < 1e-4, {v}, {v}.to(tl.float16).to(tl.float32))")),
         "correctness" if FULL_SIZE else "model", "lower precision"),
    # correct only for the inputs that were tested
    Case("narrow_input_range", "gelu.py",
         src(lambda s: cheats.after_first_load(s, "{var} = tl.minimum(tl.maximum({var}, -8.0), 8.0)")),
         "correctness", "correct only for tested inputs"),
    # timer or harness patched by the candidate
    Case("patches_do_bench", "gelu.py", src(lambda s: cheats.module_level(
        s, "import triton.testing", "triton.testing.do_bench = lambda *a, **k: 1e-06", before_kernel=True)),
         "static", "timer or harness patched"),
    Case("reads_environment", "gelu.py", src(lambda s: cheats.in_body(
        cheats.module_level(s, "import os", before_kernel=True), "kernelopt_flag = os.environ.get('X')")),
         "static", "host code"),
    # hung or crashing candidate
    Case("hangs", "gelu.py", src(spin), "static", "hung candidate (2**40 trips: the loop-bounds cap)"),
    Case("out_of_bounds_crash", "gelu.py", src(lambda s: cheats.offset_first_load(s, "1099511627776")),
         "correctness", "crashing candidate"),
    # static contract
    Case("inline_asm", "gelu.py", src(lambda s: cheats.after_first_load(
        s, 'tmp_asm = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [{var}], dtype=tl.float32, '
           'is_pure=True, pack=1)')), "static", "host code / inline asm"),
    Case("wrong_signature", "gelu.py", src(cheats.add_parameter), "static", "contract"),
    Case("non_power_of_two_block", "gelu.py", src(lambda s: cheats.in_body(s, "kernelopt_pad = tl.arange(0, 48)")),
         "static", "contract"),
    Case("does_not_compile", "gelu.py", src(lambda s: cheats.after_first_load(
        s, "{var} = tl.load(in_ptr0 + xindex, xmask, not_an_argument=1)")),
         "static" if ON_GPU else "correctness", "does not compile (the interpreter compiles at launch)"),
    # noise read as a win; faster kernel, slower model (GPU: gate 4)
    Case("unchanged_source_noise", "softmax.py", src(lambda s: s + "\n# same kernel\n"), "performance",
         "noise read as a win", gpu_only=True),
    Case("slower_launch_config", "gelu.py", other_config, "performance", "faster by less than gamma",
         gpu_only=True),
    # honest candidates: must pass gates 1-3
    Case("honest_launch_config", "gelu.py", other_config, None, "honest"),
    Case("honest_commuted_product", "gelu.py", src(cheats.commute_first_product), None, "honest"),
    Case("honest_exp_via_exp2", "softmax.py", src(cheats.exp_via_exp2), None, "honest"),
    Case("honest_reciprocal_division", "linear_epilogue.py", src(cheats.reciprocal_division), None, "honest"),
    Case("honest_softmax_config", "softmax.py", other_config, None, "honest"),
]


@pytest.mark.parametrize("case", cheaters(CASES), ids=lambda c: c.id)
def test_cheater_is_rejected_by_the_responsible_gate(case: Case, cascades: Cascades) -> None:
    if case.gpu_only and not ON_GPU:
        pytest.skip("gate 4 measures on a GPU only")
    verdict, _ = cascades.verify(case)
    report(case, verdict)
    assert_rejected_by_responsible_gate(case, verdict)


@pytest.mark.parametrize("case", honest(CASES), ids=lambda c: c.id)
def test_honest_candidate_passes_gates_1_to_3(case: Case, cascades: Cascades) -> None:
    verdict, _ = cascades.verify(case)
    report(case, verdict)
    assert_passes_gates_1_to_3(verdict)


def test_red_team_covers_every_pitfall_row() -> None:
    assert len(cheaters(CASES)) >= 14
    assert len(honest(CASES)) >= 4
    assert {c.gate for c in cheaters(CASES)} == {"static", "correctness", "model", "performance"}
