"""Loss: cross-entropy with label smoothing over a 50257-way vocabulary with int64 targets (softmax + gather + mean)."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

TOKENS, VOCAB = (8192, 50257) if FULL else (4, 37)


class Model(torch.nn.Module):
    def __init__(self, label_smoothing: float) -> None:
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, targets, label_smoothing=self.label_smoothing)


def get_inputs():
    return [2.0 * torch.randn(TOKENS, VOCAB), torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return [0.1]
