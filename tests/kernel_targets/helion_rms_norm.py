"""An RMS norm written in Helion, its config pinned by an earlier autotuning run (our own kernel,
in the style of Helion's examples)."""

import helion
import helion.language as hl
import torch


@helion.kernel(config=helion.Config(block_sizes=[16], num_warps=4))
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
    return [torch.randn(64, 128), torch.randn(128)]
