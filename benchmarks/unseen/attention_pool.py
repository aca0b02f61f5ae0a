"""Attention pooling over a sequence: softmax of per-position scores, then the weighted sum of the values."""

import os

import torch

FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, SEQ, DIM = (256, 1000, 768) if FULL else (2, 9, 8)


class Model(torch.nn.Module):
    def forward(self, values: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(scores, dim=1)
        return (weights.unsqueeze(-1) * values).sum(dim=1)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM), torch.randn(BATCH, SEQ)]


def get_init_inputs():
    return []
