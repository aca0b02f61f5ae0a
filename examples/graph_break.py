"""Two compiled graphs: a norm, a graph break (a host-side print), then a pointwise tail."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, COLS = (16384, 4096) if FULL else (4, 32)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.layer_norm(x, x.shape[-1:])
        torch._dynamo.graph_break()
        return torch.sigmoid(y) * y


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
