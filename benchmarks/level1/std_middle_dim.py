"""Reduction: unbiased standard deviation over the middle dim of a 3-D tensor (Welford or two-pass, strided)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

SHAPE = (128, 2048, 1024) if FULL else (2, 16, 4)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.std(x, dim=1, correction=1)


def get_inputs():
    return [1.0 + torch.randn(*SHAPE)]


def get_init_inputs():
    return []
