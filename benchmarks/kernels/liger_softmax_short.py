"""Launcher target: liger-kernel's softmax over short rows (128 wide, many rows: one program a
row with liger's 4 warps for 128 values), on a vendored copy (``liger_softmax_ops.py``)."""

import os

import torch
from liger_softmax_ops import _softmax_forward

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


def launch(x):
    return _softmax_forward(x)[0]


def reference(x):
    return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(524288, 128)] if FULL else [torch.randn(4, 64)]
