"""Activation: hardswish, a piecewise-linear pointwise op; pure bandwidth, the bar is the copy roofline."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, COLS = (8192, 16384) if FULL else (4, 64)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardswish(x)


def get_inputs():
    return [3.0 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
