"""GEMM + epilogue: scaled matmul followed by a softmax over each output row (the GEMM output is read back for the reduction)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

M, K, N = (8192, 4096, 8192) if FULL else (4, 8, 16)


class Model(torch.nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.matmul(a, b) * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return [K**-0.5]
