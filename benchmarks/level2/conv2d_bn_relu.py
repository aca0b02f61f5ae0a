"""Conv + epilogue: 3x3 Conv2d (no bias), BatchNorm in eval mode, ReLU; the BN folds into a per-channel scale and shift."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, IN_CHANNELS, OUT_CHANNELS, SIZE = (64, 64, 128, 128) if FULL else (2, 3, 4, 6)


class Model(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.weight.copy_(1.0 + 0.1 * torch.randn(out_channels))
            self.bn.bias.copy_(0.1 * torch.randn(out_channels))
            self.bn.running_mean.copy_(0.1 * torch.randn(out_channels))
            self.bn.running_var.copy_(0.5 + torch.rand(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
