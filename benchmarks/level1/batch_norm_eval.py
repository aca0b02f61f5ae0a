"""Norm: BatchNorm2d in eval mode (running statistics): a per-channel scale and shift broadcast over NCHW."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, CHANNELS, SIZE = (64, 192, 112) if FULL else (2, 3, 4)


class Model(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm2d(channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))
            self.norm.running_mean.copy_(0.5 * torch.randn(channels))
            self.norm.running_var.copy_(0.5 + torch.rand(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS]
