"""Launcher target: liger-kernel's SwiGLU forward (silu(a) * b), on a vendored copy (``liger_swiglu_ops.py``)."""

import os

import torch
from liger_swiglu_ops import swiglu_forward

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


def launch(a, b):
    return swiglu_forward(a, b)[-1]


def reference(a, b):
    return torch.nn.functional.silu(a) * b


def get_inputs():
    return [torch.randn(4096, 11008), torch.randn(4096, 11008)] if FULL else [torch.randn(4, 96), torch.randn(4, 96)]
