"""Helion target: a layer norm over rows with no pinned config (Helion's default config is the
original), at a shape of a transformer's activations."""

import os

import helion
import helion.language as hl
import torch

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


@helion.kernel(static_shapes=True)
def layer_norm_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    m, n = x.size()
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean = torch.sum(row, dim=-1, keepdim=True) / n
        centered = row - mean
        var = torch.sum(centered * centered, dim=-1, keepdim=True) / n
        normed = centered * torch.rsqrt(var + 1e-5)
        out[tile_m, :] = (normed * weight[None, :].to(torch.float32) + bias[None, :].to(torch.float32)).to(x.dtype)
    return out


def reference(x, weight, bias):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def get_inputs():
    shape = (32768, 768) if FULL else (32, 64)
    return [torch.randn(shape), torch.randn(shape[1]), torch.randn(shape[1])]
