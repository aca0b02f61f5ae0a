"""On a GPU, ``aligned_row_loads`` is what it claims: rows of odd length read in aligned chunks
load 16-byte vectors and run faster than Inductor's element-wise loads. The kernel is torch 2.11's
cross-entropy kernel from the H200 (8192 rows of a 50257-word vocabulary), timed with the
harness's own timer over a few launch configs each. Run on the H200 by scripts/gpu_check.sh."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelopt_bot.harness.roofline import measure_copy_bandwidth
from kernelopt_bot.harness.timing import time_cuda
from kernelopt_bot.search.transforms import aligned_row_loads
from tests.test_transforms import H200_CROSS_ENTROPY, _load_kernel

pytestmark = pytest.mark.gpu

ROWS, VOCAB = 8192, 50257
CONFIGS = [(1, 1024, 8), (1, 2048, 8), (1, 2048, 16), (1, 4096, 16), (2, 1024, 8)]  # XBLOCK, R0_BLOCK, num_warps


def _source() -> str:
    return (H200_CROSS_ENTROPY.replace("xnumel, r0_numel, XBLOCK", "xnumel, r0_numel_given, XBLOCK")
            .replace("    xoffset = tl.program_id(0)", f"    r0_numel = {VOCAB}\n    xoffset = tl.program_id(0)")
            .replace("r0_numel*x0", f"{VOCAB}*x0"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_odd_rows_read_in_aligned_chunks_are_faster(tmp_path: Path, dtype: torch.dtype) -> None:
    original = _source()
    aligned = aligned_row_loads(original)
    assert aligned is not None
    logits = (2.0 * torch.randn(ROWS, VOCAB, device="cuda")).to(dtype)
    best: dict[str, float] = {}
    outs: dict[str, list[torch.Tensor]] = {}
    for name, source in (("original", original), ("aligned", aligned)):
        kernel = _load_kernel(tmp_path / f"{name}_{str(dtype)[6:]}.py", source, "cross_entropy_rows")
        for xblock, rblock, warps in CONFIGS:
            out = [torch.empty(ROWS, device="cuda"), torch.empty(ROWS, device="cuda"),
                   torch.empty(ROWS, device="cuda", dtype=torch.bfloat16)]

            def call(out: list[torch.Tensor] = out, kernel=kernel, xblock=xblock, rblock=rblock, warps=warps) -> None:
                kernel[(ROWS // xblock,)](logits, *out, ROWS, VOCAB, XBLOCK=xblock, R0_BLOCK=rblock, num_warps=warps)

            ms = time_cuda(call, reps=30).median_ms
            assert ms is not None
            print(f"ALIGNED {str(dtype)[6:]} {name} XBLOCK={xblock} R0_BLOCK={rblock} num_warps={warps}: {ms:.4f} ms")
            if ms < best.get(name, float("inf")):
                best[name], outs[name] = ms, out
    for mine, theirs in zip(outs["aligned"], outs["original"]):
        torch.testing.assert_close(mine.float(), theirs.float(), rtol=1e-2, atol=1e-3)
    gbps = logits.numel() * logits.element_size() * 2 / (best["aligned"] / 1000) / 1e9  # two passes over the rows
    copy_gbps = measure_copy_bandwidth()
    print(f"ALIGNED {str(dtype)[6:]} best: original {best['original']:.4f} ms, aligned {best['aligned']:.4f} ms "
          f"({best['original'] / best['aligned']:.2f}x, {gbps:.0f} GB/s read, copy roofline {copy_gbps:.0f} GB/s)")
    assert best["aligned"] < best["original"]
    # 5% faster, unless the original already reads at 90% of the copy roofline: on the H100 fp32
    # (3.35 TB/s) the original read at 3160 GB/s and aligned loads gained 4% (12-06); on the H200 8-11%.
    original_gbps = gbps * best["aligned"] / best["original"]
    assert best["aligned"] < 0.95 * best["original"] or original_gbps >= 0.9 * copy_gbps
