"""Gate 2's GPU memory, measured: the engine runs the tuner's candidates through gate 2 on the GPU
the model arms share, and on the H200 its search-phase peak was 10-14 GB for models of 1-2 GB
(12-04): float64 comparisons in 512 MB pieces held 6 GB of temporaries, and drawing the trials'
inputs built int64 row indices per element. Run on the H200 by scripts/gpu_check.sh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.targets import load_target
from kernelopt_bot.verify.correctness import DISTRIBUTIONS, check_correctness
from kernelopt_bot.verify.references import references_of
from kernelopt_bot.verify.tolerance import compare
from tests.helpers import ROOT

pytestmark = pytest.mark.gpu

MIB = 1 << 20
ROWS, COLS = 16384, 8192  # 512 MiB of float32: a large activation


def _extra_peak_mb(work: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    work()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / MIB


def test_a_float64_comparison_of_a_large_output_holds_a_bounded_piece() -> None:
    a = torch.randn(ROWS, COLS, device="cuda")
    b = a.clone()
    extra = _extra_peak_mb(lambda: compare(a, b))
    print(f"MEMORY compare of two {a.numel() * 4 // MIB} MiB outputs: {extra:.0f} MiB extra")
    assert extra < 160  # was 6016 MiB with 2**26-element pieces, 376 with 2**22


def test_gate_two_holds_about_two_argument_sets_beside_the_recorded_ones() -> None:
    """Every distribution of every seed: the candidate's outputs, the compiler's argument set, and
    what drawing one input takes (its values, then copied in), never a multiple of them. The
    candidate's inputs go once checked, and the repeat check's copies of them are on the host."""
    x = torch.randn(ROWS, COLS, device="cuda")
    out = torch.empty_like(x)
    recorded = (x, out, x.numel())
    kernel = TritonKernel(name="copy", graph=0, kind="pointwise", heuristic=None, source="", sha256="", key="",
                          params=["in_ptr0", "out_ptr0", "xnumel"], signature={}, size_hints=None, mutated_args=[])

    def launch(args: tuple[Any, ...]) -> None:
        args[1].copy_(args[0])

    result: list[Any] = []
    extra = _extra_peak_mb(lambda: result.append(check_correctness(
        kernel, recorded, {}, launch, launch, device="cuda", distributions=DISTRIBUTIONS)))
    args_mb = 2 * x.numel() * 4 / MIB
    print(f"MEMORY gate 2 on {args_mb:.0f} MiB of arguments: {extra:.0f} MiB extra ({extra / args_mb:.1f}x)")
    assert result[0].passed, result[0].reason
    assert extra <= 2.1 * args_mb  # was 8064 MiB (7.9x), then 2688 MiB (2.6x) with both argument sets whole


def test_gate_two_on_a_recording_in_host_memory_holds_no_copy_of_it_on_the_device() -> None:
    """As the engine runs gate 2 (``KernelService.bench_on_host``): the recorded arguments stay in
    host memory and each trial is drawn on the device, so the device holds the trials' buffers and
    nothing of the recording (the whole device peak, not the peak beyond what was there before)."""
    x = torch.randn(ROWS, COLS)
    recorded = (x, torch.empty_like(x), x.numel())
    kernel = TritonKernel(name="copy", graph=0, kind="pointwise", heuristic=None, source="", sha256="", key="",
                          params=["in_ptr0", "out_ptr0", "xnumel"], signature={}, size_hints=None, mutated_args=[])

    def launch(args: tuple[Any, ...]) -> None:
        assert args[0].is_cuda and args[1].is_cuda
        args[1].copy_(args[0])

    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() < MIB
    result: list[Any] = []
    peak = _extra_peak_mb(lambda: result.append(check_correctness(
        kernel, recorded, {}, launch, launch, device="cuda", distributions=DISTRIBUTIONS)))
    args_mb = 2 * x.numel() * 4 / MIB
    print(f"MEMORY gate 2 on {args_mb:.0f} MiB of arguments in host memory: {peak:.0f} MiB on the device "
          f"({peak / args_mb:.1f}x)")
    assert result[0].passed, result[0].reason
    assert not recorded[0].is_cuda and not recorded[1].is_cuda
    assert peak <= 2.1 * args_mb  # recorded on the device, it was 3x: the recording, then 2x beside it


def test_gate_three_references_are_kept_on_the_host_and_the_referee_runs_there() -> None:
    """The float64 copy of a bf16 model and its activations is four times the model: on the
    device it was the engine's peak (4130 MiB on attention pooling, 3.7x the model, 12-07). Now
    the referee takes no more of the device than drawing its inputs there does (the file draws
    them on the GPU in float32, then casts: 1126 MiB for 375 MiB of bf16 inputs on an H100), and
    nothing of either reference stays."""
    target = load_target(str(ROOT / "benchmarks" / "unseen" / "attention_pool.py"), "cuda", "bf16")
    calls: list[int] = []
    target.model.register_forward_hook(lambda *_: calls.append(1))
    inputs_mb = sum(x.numel() * x.element_size() for x in target.make_inputs(101)) / MIB
    drawing = _extra_peak_mb(lambda: target.make_inputs(101))
    refs = references_of(target)
    eager = _extra_peak_mb(lambda: refs.eager(101))  # first: whether the model draws on the device decides
    assert refs._host_allowed  # the CUDA generator's state was read, and did not move: no dropout here
    referee = _extra_peak_mb(lambda: refs.float64(101))
    again = _extra_peak_mb(lambda: (refs.eager(101), refs.float64(101)))
    print(f"MEMORY gate 3's references on {inputs_mb:.0f} MiB of bf16 inputs (drawn with {drawing:.0f} MiB): "
          f"referee {referee:.0f} MiB, eager {eager:.0f} MiB, both again {again:.0f} MiB extra on the device")
    assert all(t.device.type == "cpu" for t in [*refs.eager(101), *refs.float64(101)])
    assert len(calls) == 2 and again == 0
    assert referee <= drawing + 64  # its inputs drawn on the device, then moved; the float64 model not there


def test_a_model_that_draws_on_the_gpu_keeps_its_referee_there(tmp_path: Any) -> None:
    """Dropout draws from the CUDA generator; on the host the referee would draw other masks and
    judge another computation. The eager run shows it: the generator's state moved (an inference
    model that draws; a training step is kept on the device whatever it does)."""
    model_file = tmp_path / "noisy.py"
    model_file.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.nn.functional.dropout(x, 0.5, training=True)\n\n\n"
        "def get_inputs():\n    return [torch.randn(64, 64)]\n\n\ndef get_init_inputs():\n    return []\n")
    noisy = references_of(load_target(str(model_file), "cuda", "fp32"))
    noisy.eager(101)
    assert not noisy._host_allowed
    assert all(t.device.type == "cpu" for t in noisy.float64(101))  # computed on the device, kept on the host
    step = references_of(load_target(str(ROOT / "tests" / "train_targets" / "bn_dropout.py"), "cuda", "fp32",
                                     train=True))
    step.eager(101)
    assert not step._host_allowed
