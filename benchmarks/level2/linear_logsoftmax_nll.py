"""GEMM + epilogue: an LM head (Linear to a 50257 vocab), log-softmax and NLL with int64 targets; the logits dominate memory."""

import os

import torch

# Full size fills an H200; tiny keeps the CPU interpreter (CI) fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

TOKENS, HIDDEN, VOCAB = (8192, 2048, 50257) if FULL else (4, 16, 37)


class Model(torch.nn.Module):
    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_probs = torch.log_softmax(self.head(x), dim=-1)
        return torch.nn.functional.nll_loss(log_probs, targets)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return [HIDDEN, VOCAB]
