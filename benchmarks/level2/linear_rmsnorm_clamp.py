"""GEMM + epilogue: Linear, RMSNorm with a learned scale, then clamp (a norm reduction and a saturating pointwise op)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

TOKENS, HIDDEN = (16384, 4096) if FULL else (4, 16)


class Model(torch.nn.Module):
    def __init__(self, hidden: int, limit: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden, hidden)
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 2.0, hidden))
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x).float()
        y = y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
        return torch.clamp(y.to(x.dtype) * self.weight, -self.limit, self.limit)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, 2.5]
