"""Mean over the valid entries of each row (a padding mask), rows of a length that is not a power of two."""

import os

import torch

FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, COLS = (65536, 1000) if FULL else (10, 30)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device)
        mask = (positions[None, :] < lengths[:, None]).to(x.dtype)
        return (x * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randint(0, COLS + 1, (ROWS,))]


def get_init_inputs():
    return []
