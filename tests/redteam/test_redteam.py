"""The red team: cheating candidates against real Inductor kernels, each rejected by the gate
responsible for it (VERIFY.md's table), and honest candidates that must not be rejected.

Runs in CI on the CPU interpreter at tiny shapes and on the H200 at full shapes (same file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from kernelopt_bot.compile.artifact import TritonKernel
from kernelopt_bot.stitch.pack import LaunchConfig
from kernelopt_bot.verify.cascade import Candidate, Cascade, VerifyOptions
from kernelopt_bot.verify.result import Verdict
from kernelopt_bot.verify.sandbox import SandboxLimits
from tests.helpers import DEVICE as FORCED_DEVICE
from tests.helpers import captured
from tests.redteam import cheats

ON_GPU = FORCED_DEVICE == "cuda" or __import__("torch").cuda.is_available()
HANG_TIMEOUT_S = 60.0 if ON_GPU else 25.0


@dataclass(frozen=True)
class Case:
    id: str
    example: str
    make: Callable[[TritonKernel, dict | None], Candidate]
    gate: str | None  # the gate that must reject it; None: honest, must pass gates 1-3
    row: str  # VERIFY.md pitfall (or "honest")
    gpu_only: bool = False


def src(fn: Callable[[str], str]) -> Callable[[TritonKernel, dict | None], Candidate]:
    return lambda k, _cfg: Candidate("source", source=fn(k.source))


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
    Case("mutates_input", "gelu.py", src(cheats.write_input), "correctness", "inputs modified in place"),
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
    Case("fp16_output_rounding", "linear_epilogue.py",
         src(lambda s: cheats.map_store(s, "{v}.to(tl.float16).to(tl.float32)")), "model", "lower precision"),
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
    Case("hangs", "gelu.py", src(spin), "correctness", "hung candidate"),
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


_CASCADES: dict[str, Cascade] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_cascades() -> Iterator[None]:
    yield
    for cascade in _CASCADES.values():
        cascade.close()
    _CASCADES.clear()


def _verify(case: Case) -> Verdict:
    """One cascade per example, so its baseline arms are compiled once for all its cases."""
    cap = captured(case.example)
    if case.example not in _CASCADES:
        _CASCADES[case.example] = Cascade(cap, VerifyOptions(rounds=6 if ON_GPU else 1, reps=20))
    kernel = cap.artifact.kernels[-1] if case.example != "gelu.py" else cap.artifact.kernels[0]
    chosen = cap.recording(kernel.graph, kernel.name).config
    timeout = HANG_TIMEOUT_S if case.id == "hangs" else 600.0
    return _CASCADES[case.example].verify(kernel, case.make(kernel, chosen),
                                          sandbox=SandboxLimits(timeout_s=timeout))


@pytest.mark.parametrize("case", [c for c in CASES if c.gate is not None], ids=lambda c: c.id)
def test_cheater_is_rejected_by_the_responsible_gate(case: Case) -> None:
    if case.gpu_only and not ON_GPU:
        pytest.skip("gate 4 measures on a GPU only")
    verdict = _verify(case)
    print(f"REDTEAM {case.id:28} {case.row:40} -> {verdict.status}: "
          f"{next((g.reason for g in verdict.gates if g.passed is False), '')[:160]}")
    assert not verdict.accepted
    assert verdict.rejected_by == case.gate, [g.to_json() for g in verdict.gates]
    order = ["static", "correctness", "model", "performance"]
    for gate in verdict.gates[: order.index(case.gate)]:
        assert gate.passed is True, f"{gate.name} should have passed before {case.gate}: {gate.reason}"


@pytest.mark.parametrize("case", [c for c in CASES if c.gate is None], ids=lambda c: c.id)
def test_honest_candidate_passes_gates_1_to_3(case: Case) -> None:
    verdict = _verify(case)
    perf_gate = verdict.gate("performance")
    print(f"HONEST  {case.id:28} -> {verdict.status}; "
          f"model: {verdict.gate('model').reason if verdict.gate('model') else '-'}; "
          f"performance: {perf_gate.reason if perf_gate else '-'}")
    for name in ("static", "correctness", "model"):
        gate = verdict.gate(name)
        assert gate is not None and gate.passed is True, f"{name}: {gate.reason if gate else 'missing'}"
    perf = verdict.gate("performance")
    assert perf is not None
    if not ON_GPU:
        assert perf.passed is None and "not measured" in perf.reason


def test_red_team_covers_every_pitfall_row() -> None:
    cheaters = [c for c in CASES if c.gate is not None]
    assert len(cheaters) >= 14
    assert len([c for c in CASES if c.gate is None]) >= 4
    assert {c.gate for c in cheaters} == {"static", "correctness", "model", "performance"}
