"""Launcher target: liger-kernel's fused residual add + RMS norm forward over short rows (256 wide,
one 4-warp program a row), on a vendored copy (``liger_fused_add_rms_norm_ops.py``)."""

import os

import torch
from liger_fused_add_rms_norm_ops import fused_add_rms_norm_forward

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


def launch(x, residual, weight):
    y, summed = fused_add_rms_norm_forward(x, residual, weight, 1e-6, 0.0, "llama")[:2]
    return y, summed


def reference(x, residual, weight):
    summed = x + residual
    return summed * torch.rsqrt((summed * summed).mean(-1, keepdim=True) + 1e-6) * weight, summed


def get_inputs():
    rows, cols = (262144, 256) if FULL else (4, 64)
    return [torch.randn(rows, cols), torch.randn(rows, cols), torch.randn(cols)]
