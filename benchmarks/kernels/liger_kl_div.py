"""Launcher target: liger-kernel's KL-divergence loss forward over a vocabulary (one program a row,
liger's 16 warps for its 16384-wide block), on a vendored copy (``liger_kl_div_ops.py``)."""

import os

import torch
from liger_kl_div_ops import kldiv_forward_triton

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


def launch(log_probs, target_probs):
    return kldiv_forward_triton(log_probs, target_probs, False, "batchmean", 1e-10)


def reference(log_probs, target_probs):
    return torch.nn.functional.kl_div(log_probs, target_probs, reduction="batchmean")


def get_inputs():
    rows, vocab = (4096, 32000) if FULL else (4, 96)
    logits = torch.randn(rows, vocab)
    return [torch.log_softmax(logits, dim=-1), torch.softmax(torch.randn(rows, vocab), dim=-1)]
