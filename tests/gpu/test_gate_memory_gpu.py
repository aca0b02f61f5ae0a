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
from kernelopt_bot.verify.correctness import DISTRIBUTIONS, check_correctness
from kernelopt_bot.verify.tolerance import compare

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
    assert extra < 512  # was 6016 MiB with 2**26-element pieces


def test_gate_two_holds_about_two_argument_sets_beside_the_recorded_ones() -> None:
    """Every distribution of every seed: the candidate's and the compiler's argument sets, and
    what drawing one input takes, never a multiple of them."""
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
    assert extra <= 3.0 * args_mb  # was 8064 MiB (7.9x)
