"""Small network: an RNN-free sequence model, two gated causal depthwise-Conv1d layers (RMSNorm, in-proj, conv, SiLU x sigmoid gate, out-proj)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, SEQ, HIDDEN, KERNEL, LAYERS = (16, 4096, 1024, 4, 2) if FULL else (1, 8, 16, 4, 2)


class GatedConvLayer(torch.nn.Module):
    def __init__(self, hidden: int, kernel: int) -> None:
        super().__init__()
        self.norm = torch.nn.RMSNorm(hidden, eps=1e-6)
        self.in_proj = torch.nn.Linear(hidden, 2 * hidden, bias=False)
        # Depthwise and causal: pad kernel - 1 steps on the left only.
        self.conv = torch.nn.Conv1d(hidden, hidden, kernel, groups=hidden)
        self.pad = kernel - 1
        self.out_proj = torch.nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u, gate = self.in_proj(self.norm(x)).chunk(2, dim=-1)
        u = self.conv(torch.nn.functional.pad(u.transpose(1, 2), (self.pad, 0))).transpose(1, 2)
        return x + self.out_proj(torch.nn.functional.silu(u) * torch.sigmoid(gate))


class Model(torch.nn.Module):
    def __init__(self, hidden: int, kernel: int, layers: int) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*(GatedConvLayer(hidden, kernel) for _ in range(layers)))
        self.norm = torch.nn.RMSNorm(hidden, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.layers(x))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, KERNEL, LAYERS]
