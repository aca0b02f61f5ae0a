"""Small network: three ResNet basic blocks (conv-BN-ReLU-conv-BN, identity shortcut, ReLU); BN folding plus residual fusion."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, CHANNELS, SIZE, BLOCKS = (64, 128, 56, 3) if FULL else (2, 4, 4, 3)


class BasicBlock(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.running_mean.copy_(0.1 * torch.randn(channels))
                bn.running_var.copy_(0.5 + torch.rand(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class Model(torch.nn.Module):
    def __init__(self, channels: int, blocks: int) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*(BasicBlock(channels) for _ in range(blocks)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, BLOCKS]
