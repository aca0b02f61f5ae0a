"""Rotary position embedding applied to the queries of an attention layer (rotate-half form, tables as buffers)."""

import os

import torch

FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, HEADS, SEQ, HEAD_DIM = (8, 32, 2048, 128) if FULL else (1, 2, 6, 8)


class Model(torch.nn.Module):
    def __init__(self, seq: int, head_dim: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
        self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()], dim=-1).float())
        self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()], dim=-1).float())

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        half = q.shape[-1] // 2
        rotated = torch.cat([-q[..., half:], q[..., :half]], dim=-1)
        return q * self.cos + rotated * self.sin


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM)]


def get_init_inputs():
    return [SEQ, HEAD_DIM]
