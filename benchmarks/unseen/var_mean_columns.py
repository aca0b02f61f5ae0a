"""Variance and mean over the first dimension (a strided, column-wise reduction), as a batch statistic."""

import os

import torch

FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, COLS = (16384, 3000) if FULL else (14, 10)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        var, mean = torch.var_mean(x, dim=0)
        return var, mean


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
