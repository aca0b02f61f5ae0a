"""A launcher target as a team writes one around a vendored kernel: it calls liger-kernel's SwiGLU
forward, copied into the repository next to it as ``liger_swiglu.py`` by the tests (the copy is
made at test time from the installed package; nothing of liger-kernel lives in this repository)."""

import torch
from liger_swiglu import swiglu_forward


def launch(a, b):
    return swiglu_forward(a, b)[-1]


def reference(a, b):
    return torch.nn.functional.silu(a) * b


def get_inputs():
    return [torch.randn(4, 96), torch.randn(4, 96)]
