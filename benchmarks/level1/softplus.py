"""Activation: softplus with beta and a linear threshold over a non-power-of-two last dim (masked tails, exp/log1p)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, COLS = (32768, 5123) if FULL else (4, 37)


class Model(torch.nn.Module):
    def __init__(self, beta: float, threshold: float) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(x, beta=self.beta, threshold=self.threshold)


def get_inputs():
    return [4.0 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [2.0, 10.0]
