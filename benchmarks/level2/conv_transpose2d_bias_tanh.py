"""Conv + epilogue: stride-2 ConvTranspose2d upsampling, an extra per-channel bias, tanh (a decoder output stage)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, IN_CHANNELS, OUT_CHANNELS, SIZE = (32, 128, 64, 64) if FULL else (2, 4, 3, 3)


class Model(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.deconv = torch.nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)
        self.shift = torch.nn.Parameter(0.1 * torch.randn(out_channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.deconv(x) + self.shift)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
