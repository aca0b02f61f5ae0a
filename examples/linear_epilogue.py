"""GEMM with a fused epilogue: Linear (cuBLAS, preserved), then bias + ReLU + LayerNorm + softmax."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, FEATURES = (16384, 4096) if FULL else (8, 32)


class Model(torch.nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, features)
        self.norm = torch.nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.norm(torch.relu(self.linear(x) + 1.0)), dim=-1)


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
