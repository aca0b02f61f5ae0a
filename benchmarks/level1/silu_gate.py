"""Activation: SwiGLU-style gate, silu(a) * b over the two halves of the last dim (two strided loads, one store)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

TOKENS, HIDDEN = (16384, 8192) if FULL else (4, 16)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up


def get_inputs():
    return [torch.randn(TOKENS, 2 * HIDDEN)]


def get_init_inputs():
    return []
