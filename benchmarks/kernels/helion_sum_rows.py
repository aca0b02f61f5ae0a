"""Helion target: a sum over the last dimension of a wide tensor (few rows, long rows) with no
pinned config: a shape where one program a row leaves most of the GPU idle unless the config
changes how the row is read."""

import os

import helion
import helion.language as hl
import torch

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


@helion.kernel(static_shapes=True)
def sum_rows(x: torch.Tensor) -> torch.Tensor:
    m, _ = x.size()
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m] = torch.sum(x[tile_m, :].to(torch.float32), dim=-1)
    return out


def reference(x):
    return x.to(torch.float32).sum(-1)


def get_inputs():
    return [torch.randn(4096, 16384)] if FULL else [torch.randn(16, 128)]
