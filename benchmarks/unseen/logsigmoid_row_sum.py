"""A logistic loss per row: the sum of log-sigmoid of margins times labels, over rows of odd length."""

import os

import torch

FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, COLS = (16384, 6000) if FULL else (6, 50)


class Model(torch.nn.Module):
    def forward(self, margins: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        signs = labels.to(margins.dtype) * 2.0 - 1.0
        return -torch.nn.functional.logsigmoid(margins * signs).sum(dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randint(0, 2, (ROWS, COLS))]


def get_init_inputs():
    return []
