"""Launcher target: liger-kernel's RMS norm forward (a plain @triton.jit kernel whose launch options
the launcher computes from the row width), on a copy of liger's source in this folder
(``liger_rms_norm_ops.py``, written by ``scripts/vendor_liger.py``): a team that vendors the kernel
gets the patch in its own file."""

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
    return [torch.randn(8192, 4096), torch.randn(4096)] if FULL else [torch.randn(4, 64), torch.randn(64)]
