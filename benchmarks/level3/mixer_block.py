"""Small network: two MLP-Mixer blocks (token-mixing MLP across patches via transposes, then a channel MLP), LayerNorm before each."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, PATCHES, CHANNELS, TOKEN_HIDDEN, CHANNEL_HIDDEN, DEPTH = (
    (256, 256, 768, 384, 3072, 2) if FULL else (2, 4, 8, 8, 16, 2)
)


class MixerBlock(torch.nn.Module):
    def __init__(self, patches: int, channels: int, token_hidden: int, channel_hidden: int) -> None:
        super().__init__()
        self.token_norm = torch.nn.LayerNorm(channels)
        self.token_mlp = torch.nn.Sequential(
            torch.nn.Linear(patches, token_hidden), torch.nn.GELU(), torch.nn.Linear(token_hidden, patches)
        )
        self.channel_norm = torch.nn.LayerNorm(channels)
        self.channel_mlp = torch.nn.Sequential(
            torch.nn.Linear(channels, channel_hidden), torch.nn.GELU(), torch.nn.Linear(channel_hidden, channels)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.channel_norm(x))


class Model(torch.nn.Module):
    def __init__(self, patches: int, channels: int, token_hidden: int, channel_hidden: int, depth: int) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(
            *(MixerBlock(patches, channels, token_hidden, channel_hidden) for _ in range(depth))
        )
        self.norm = torch.nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(x))


def get_inputs():
    return [torch.randn(BATCH, PATCHES, CHANNELS)]


def get_init_inputs():
    return [PATCHES, CHANNELS, TOKEN_HIDDEN, CHANNEL_HIDDEN, DEPTH]
