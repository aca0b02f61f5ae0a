"""Batched GEMM + epilogue: attention scores q k^T, scale, causal mask, softmax (the unfused attention-probabilities path)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH_HEADS, SEQ, HEAD_DIM = (192, 1024, 128) if FULL else (2, 8, 4)


class Model(torch.nn.Module):
    def __init__(self, seq: int, head_dim: int) -> None:
        super().__init__()
        self.scale = head_dim**-0.5
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril())

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scale
        scores = scores.masked_fill(~self.causal, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(BATCH_HEADS, SEQ, HEAD_DIM), torch.randn(BATCH_HEADS, SEQ, HEAD_DIM)]


def get_init_inputs():
    return [SEQ, HEAD_DIM]
