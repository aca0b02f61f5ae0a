"""Launcher target: liger-kernel's RMS norm forward over short rows (512 wide, one 4-warp program a
row), on a vendored copy (``liger_rms_norm_ops.py``, written by ``scripts/vendor_liger.py``)."""

import os

import torch
from liger_rms_norm_ops import rms_norm_forward

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


def launch(x, weight):
    return rms_norm_forward(x, weight, 1e-6, 0.0, "llama", False)[0]


def reference(x, weight):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * weight


def get_inputs():
    return [torch.randn(65536, 512), torch.randn(512)] if FULL else [torch.randn(4, 64), torch.randn(64)]
