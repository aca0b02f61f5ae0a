"""Small network: a 4-layer MLP with tanh-GELU between layers; four GEMMs whose bias+activation epilogues should fuse."""

import itertools
import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

TOKENS, DIMS = (16384, (2048, 4096, 4096, 4096, 1024)) if FULL else (4, (16, 32, 32, 24, 8))


class Model(torch.nn.Module):
    def __init__(self, dims: tuple[int, ...]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in itertools.pairwise(dims))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.nn.functional.gelu(layer(x), approximate="tanh")
        return self.layers[-1](x)


def get_inputs():
    return [torch.randn(TOKENS, DIMS[0])]


def get_init_inputs():
    return [DIMS]
