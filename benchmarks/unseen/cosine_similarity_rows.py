"""Row-wise cosine similarity of two matrices: three reductions over a row (a.b, |a|, |b|) in one pass."""

import os

import torch

FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, DIM = (131072, 768) if FULL else (12, 24)


class Model(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, DIM), torch.randn(ROWS, DIM)]


def get_init_inputs():
    return []
