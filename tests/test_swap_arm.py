"""Gates 3-4 for trusted candidates inside the engine: the candidate's kernel swapped into the
captured model for each request, no process started, the same gate-3 verdict as the process arms,
and the compiled model exactly the compiler's again after every request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.capture.recorder import Capture, capture
from kernelopt_bot.harness.arm_process import ArmRaised
from kernelopt_bot.harness.isolation import processes_started
from kernelopt_bot.harness.swap_arm import EngineArm, KernelSwap
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.search.tuner import ORIGIN
from kernelopt_bot.targets import load_target
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from tests.helpers import DEVICE, EXAMPLES, other_tiling
from tests.redteam import cheats

OPTIONS = VerifyOptions(seeds=(0, 1), distributions=("normal",), rounds=1)
# Within gate 2's kernel tolerance and unbiased; only gate 3's float64 referee catches it (the red
# team's fp16_rounding_normal_range, sent here as if the tuner had written it).
FP16_NORMAL_RANGE = "tl.where(tl.abs({v}) < 1e-4, {v}, {v}.to(tl.float16).to(tl.float32))"


@pytest.fixture(scope="module")
def gelu() -> Iterator[Cascade]:
    with Cascade(fresh_capture("gelu.py"), OPTIONS) as cascade:
        yield cascade


def _other_config(cap: Capture, kernel: TritonKernel) -> LaunchConfig:
    return other_tiling(kernel, cap.recording(kernel.graph, kernel.name).chosen_config)


def _globals(cap: Capture, kernel: TritonKernel) -> dict[int, Any]:
    """The kernel's module-level object in every output module that has it."""
    return {i: getattr(g.module, kernel.name) for i, g in enumerate(cap.graphs) if hasattr(g.module, kernel.name)}


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def fresh_capture(example: str) -> Capture:
    """A capture of this test's own: the session's shared one may have been recompiled by another
    test's ``install()`` (which resets Dynamo), and a swap must be tested on the module that runs."""
    return capture(load_target(str(EXAMPLES / example), DEVICE, "fp32"))


def test_a_trusted_config_passes_gates_1_to_3_with_no_process_and_the_process_arms_verdict(gelu: Cascade) -> None:
    kernel = gelu.capture.artifact.kernels[0]
    config = _other_config(gelu.capture, kernel)
    before = processes_started()
    ours = gelu.verify(kernel, Candidate("config", config=config, origin=ORIGIN))
    assert processes_started() == before  # no sandbox, no model arm
    assert [g.passed for g in ours.gates[:3]] == [True, True, True], [g.to_json() for g in ours.gates]
    assert ours.gate("performance").passed is None  # type: ignore[union-attr]
    assert "not measured" in ours.gate("performance").reason  # type: ignore[union-attr]
    assert "arm ready" in ours.seconds and "baselines ready" not in ours.seconds
    theirs = gelu.verify(kernel, Candidate("config", config=config))  # the same config, untrusted
    assert processes_started() > before
    assert ours.gate("model").to_json() == theirs.gate("model").to_json()  # type: ignore[union-attr]


def test_a_trusted_candidate_wrong_only_at_the_model_level_is_rejected_by_gate_3_in_the_engine() -> None:
    cap = fresh_capture("linear_epilogue.py")
    kernel = cap.artifact.kernels[-1]
    wrong = cheats.map_store(kernel.source, FP16_NORMAL_RANGE)
    with Cascade(cap, OPTIONS) as cascade:
        before = processes_started()
        verdict = cascade.verify(kernel, Candidate("fp16 rounding", source=wrong, origin=ORIGIN))
        assert processes_started() == before
    assert verdict.infrastructure is None
    assert verdict.gate("correctness").passed is True  # type: ignore[union-attr]
    assert verdict.rejected_by == "model", [g.to_json() for g in verdict.gates]
    assert "float64" in verdict.gate("model").reason  # type: ignore[union-attr]


def test_the_swap_is_undone_after_every_request_and_really_happens_during_it() -> None:
    cap = fresh_capture("linear_epilogue.py")
    kernel = cap.artifact.kernels[-1]
    originals = _globals(cap, kernel)
    assert originals
    with Cascade(cap, OPTIONS) as cascade:
        wrong = cheats.map_store(kernel.source, "{v} * 2.0")
        replacement = cascade.kernels.compiled(kernel, wrong, None)
    baseline = EngineArm(cap, "baseline")
    before = baseline.request("outputs", 7)
    arm = EngineArm(cap, "candidate", KernelSwap.build(cap, kernel, replacement))
    assert arm.info["applied"] == [kernel.name] and arm.swap is not None and arm.swap.counted.launches >= 1
    doubled = arm.request("outputs", 7)
    assert not _same(doubled, before)  # the candidate ran inside the compiled model
    assert _globals(cap, kernel) == originals and all(
        _globals(cap, kernel)[i] is originals[i] for i in originals)  # the very objects, back
    assert _same(baseline.request("outputs", 7), before)
    assert arm.request("time", 7, 2) is None  # the CPU times nothing; on CUDA a number (gpu test)
    assert all(_globals(cap, kernel)[i] is originals[i] for i in originals)


def test_a_candidate_that_raises_is_the_arms_failure_and_the_swap_is_still_undone() -> None:
    cap = fresh_capture("gelu.py")
    kernel = cap.artifact.kernels[0]
    originals = _globals(cap, kernel)

    class Broken:
        def run(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the candidate's own error")

    with pytest.raises(ArmRaised, match="the candidate's own error"):
        EngineArm(cap, "candidate", KernelSwap.build(cap, kernel, Broken()))
    assert all(_globals(cap, kernel)[i] is originals[i] for i in originals)
    baseline = EngineArm(cap, "baseline")
    assert _same(baseline.request("outputs", 3), baseline.request("outputs", 3))


def test_the_baseline_a_swapped_candidate_is_timed_against_is_the_compilers_kernel_swapped_in_alike(
        gelu: Cascade) -> None:
    """Gate 4 in the engine compares like with like: the compiler's own kernel, loaded and swapped
    in the way the candidate is, runs in the baseline arm (the same outputs, bit for bit, as the
    compiled model as it is), and the compiled model is the compiler's again afterwards."""
    cap = gelu.capture
    kernel = cap.artifact.kernels[0]
    originals = _globals(cap, kernel)
    baseline = gelu._engine_baseline(kernel)
    assert baseline.swap is not None and baseline.info["applied"] == [kernel.name]
    assert baseline.swap.counted._kernel_obj is gelu.kernels.bench(kernel).original()
    assert _same(baseline.request("outputs", 5), EngineArm(cap, "as compiled").request("outputs", 5))
    assert all(_globals(cap, kernel)[i] is originals[i] for i in originals)


def test_a_baseline_that_cannot_be_swapped_in_is_the_compiled_model_as_it_is(monkeypatch: Any) -> None:
    cap = fresh_capture("gelu.py")
    kernel = cap.artifact.kernels[0]
    with Cascade(cap, OPTIONS) as cascade:
        bench = cascade.kernels.bench(kernel)

        def unloadable() -> Any:
            raise RuntimeError("does not compile")

        monkeypatch.setattr(bench, "original", unloadable)
        assert cascade._engine_baseline(kernel).swap is None


@pytest.mark.gpu
def test_a_trusted_candidates_gate_4_runs_in_the_engine_on_a_gpu(gelu: Cascade) -> None:
    """On CUDA: gate 4 is measured on the engine's model (baseline, candidate, baseline again),
    labelled so that the run reports a number from fresh processes instead."""
    kernel = gelu.capture.artifact.kernels[0]
    before = processes_started()
    verdict = gelu.verify(kernel, Candidate("config", config=_other_config(gelu.capture, kernel), origin=ORIGIN))
    assert processes_started() == before
    perf = verdict.gate("performance")
    assert perf is not None and perf.numbers.get("arms") == "engine"
    assert isinstance(perf.numbers.get("noise_floor"), float) and perf.numbers.get("rounds") == OPTIONS.rounds
    assert perf.numbers.get("baseline_arm") == "the compiler's kernel, swapped in as the candidate is"


def test_a_model_recompiled_since_capture_is_judged_in_process_arms_not_rejected() -> None:
    """If the captured output module no longer runs (Dynamo was reset and the model recompiled), a
    swap there would prove nothing: the candidate is judged in process arms, never rejected for it."""
    cap = fresh_capture("gelu.py")
    torch._dynamo.reset()
    with torch.no_grad():
        cap.compiled(*cap.inputs)  # recompiled: a new output module runs from now on
    kernel = cap.artifact.kernels[0]
    with Cascade(cap, OPTIONS) as cascade:
        before = processes_started()
        verdict = cascade.verify(kernel, Candidate("config", config=_other_config(cap, kernel), origin=ORIGIN))
    assert [g.passed for g in verdict.gates[:3]] == [True, True, True], [g.to_json() for g in verdict.gates]
    assert processes_started() > before  # the model gate ran in process arms
