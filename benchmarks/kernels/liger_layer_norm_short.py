"""Launcher target: liger-kernel's layer norm forward over short rows (256 channels, many tokens),
on a vendored copy (``liger_layer_norm_ops.py``)."""

import os

import torch
from liger_layer_norm_ops import layer_norm_forward

# Full size fills an H200; tiny keeps the CPU interpreter fast. KERNELOPT_EXAMPLE_SIZE overrides.
FULL = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"


def launch(x, weight, bias):
    return layer_norm_forward(x, weight, bias, 1e-5)[0]


def reference(x, weight, bias):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)


def get_inputs():
    return [torch.randn(262144, 256), torch.randn(256), torch.randn(256)] if FULL else [torch.randn(4, 64), torch.randn(64), torch.randn(64)]
