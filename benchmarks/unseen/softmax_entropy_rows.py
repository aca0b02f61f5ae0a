"""Entropy of the softmax of each row of logits over a vocabulary (a sampler's uncertainty): two passes over long rows."""

import os

import torch

FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

ROWS, VOCAB = (4096, 32000) if FULL else (4, 70)


class Model(torch.nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        return (-(log_probs.exp() * log_probs).sum(dim=-1)).to(logits.dtype)


def get_inputs():
    return [torch.randn(ROWS, VOCAB) * 3.0]


def get_init_inputs():
    return []
