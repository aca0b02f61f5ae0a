"""Helion target: an RMS norm whose config was pinned for another shape (small rows, one warp);
at this shape the pin is stale."""

import os

import helion
import helion.language as hl
import torch

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


@helion.kernel(config=helion.Config(block_sizes=[1], num_warps=1))
def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    m = x.size(0)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        inv = torch.rsqrt(torch.mean(row * row, dim=-1, keepdim=True) + 1e-6)
        out[tile_m, :] = (row * inv * weight[None, :].to(torch.float32)).to(x.dtype)
    return out


def reference(x, weight):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * weight


def get_inputs():
    return [torch.randn(8192, 4096), torch.randn(4096)] if FULL else [torch.randn(32, 64), torch.randn(64)]
