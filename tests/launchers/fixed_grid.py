"""A launcher whose grid assumes two rows per program whatever the autotuner picks: its second
config is one the launcher does not agree with (half the rows are never written)."""

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"ROWS": 2}, num_warps=4), triton.Config({"ROWS": 1}, num_warps=4)],
                 key=["n_cols"])
@triton.jit
def scale_rows_kernel(x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    x = tl.load(x_ptr + rows * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + rows * n_cols + cols, x * 2.0 + 1.0, mask=mask)


def launch(x):
    out = torch.zeros_like(x)
    n_rows, n_cols = x.shape
    scale_rows_kernel[(triton.cdiv(n_rows, 2),)](x, out, n_rows, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return out


def reference(x):
    return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(8, 24)]
