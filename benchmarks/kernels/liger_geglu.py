"""Launcher target: liger-kernel's GEGLU forward (tanh-approximated gelu(a) * b), on a vendored copy
(``liger_geglu_ops.py``)."""

import os

import torch
from liger_geglu_ops import geglu_forward

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


def launch(a, b):
    return geglu_forward(a, b)[-1]


def reference(a, b):
    return torch.nn.functional.gelu(a, approximate="tanh") * b


def get_inputs():
    return [torch.randn(4096, 8192), torch.randn(4096, 8192)] if FULL else [torch.randn(4, 64), torch.randn(4, 64)]
