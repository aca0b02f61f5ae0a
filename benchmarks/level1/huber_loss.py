"""Loss: smooth-L1 (Huber) with beta, reduced to a per-sample mean over a 3-D tensor (branchy pointwise + reduction)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

BATCH, SEQ, FEATURES = (32, 4096, 1000) if FULL else (2, 4, 10)


class Model(torch.nn.Module):
    def __init__(self, beta: float) -> None:
        super().__init__()
        self.beta = beta

    def forward(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.smooth_l1_loss(prediction, target, reduction="none", beta=self.beta)
        return loss.mean(dim=(1, 2))


def get_inputs():
    return [torch.randn(BATCH, SEQ, FEATURES), torch.randn(BATCH, SEQ, FEATURES)]


def get_init_inputs():
    return [0.5]
