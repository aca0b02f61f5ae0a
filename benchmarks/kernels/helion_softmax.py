"""Helion target: a row softmax with no pinned config (Helion's default config is the original)."""

import os

import helion
import helion.language as hl
import torch

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


@helion.kernel(static_shapes=True)
def softmax_rows(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    m = x.size(0)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        shifted = row - torch.amax(row, dim=-1, keepdim=True)
        num = torch.exp(shifted)
        out[tile_m, :] = (num / torch.sum(num, dim=-1, keepdim=True)).to(x.dtype)
    return out


def reference(x):
    return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(16384, 1024)] if FULL else [torch.randn(32, 64)]
