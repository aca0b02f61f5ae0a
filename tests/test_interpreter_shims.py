"""The interpreter's reductions of Inductor's helpers (``max2``, ``min2``, ``welford``) give the
values Inductor's own combine functions give on a GPU: NaN propagates through max/min, masked
lanes (weight 0) count for nothing, equal infinite means stay infinite. Without the shims the
interpreter applied each combine pair by pair in Python (8 s for one 2048-wide row)."""

from __future__ import annotations

import time

import pytest
import torch

if torch.cuda.is_available():  # on a GPU Inductor's own helpers run; nothing is shimmed
    pytest.skip("interpreter shims only", allow_module_level=True)

import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers


@triton.jit
def _extremes(x_ptr, out_ptr, R: tl.constexpr):
    rows = tl.arange(0, 4)[:, None]
    cols = tl.arange(0, R)[None, :]
    x = tl.load(x_ptr + rows * R + cols)
    tl.store(out_ptr + tl.arange(0, 4), triton_helpers.max2(x, 1))
    tl.store(out_ptr + 4 + tl.arange(0, 4), triton_helpers.min2(x, 1))


@triton.jit
def _moments(x_ptr, w_ptr, out_ptr, R: tl.constexpr):
    rows = tl.arange(0, 4)[:, None]
    cols = tl.arange(0, R)[None, :]
    x = tl.load(x_ptr + rows * R + cols)
    w = tl.load(w_ptr + rows * R + cols)
    mean, m2, weight = triton_helpers.welford(x, tl.zeros_like(x), w, 1)
    tl.store(out_ptr + tl.arange(0, 4), mean)
    tl.store(out_ptr + 4 + tl.arange(0, 4), m2)
    tl.store(out_ptr + 8 + tl.arange(0, 4), weight)


def test_max_and_min_propagate_nan_and_are_fast() -> None:
    x = torch.randn(4, 2048)
    x[1, 7] = float("nan")
    out = torch.empty(8)
    start = time.monotonic()
    _extremes[(1,)](x, out, R=2048)
    assert time.monotonic() - start < 2.0
    assert torch.isnan(out[1]) and torch.isnan(out[5])
    for row in (0, 2, 3):
        assert out[row] == x[row].max() and out[4 + row] == x[row].min()


def test_welford_matches_the_moments_and_ignores_masked_lanes() -> None:
    x = torch.randn(4, 1024, dtype=torch.float64).float() * 3 + 5
    w = torch.ones(4, 1024)
    w[2, 512:] = 0.0  # masked lanes: their values must not count
    x[2, 512:] = 1e30
    x[3] = float("inf")  # all equal infinite means: the mean stays inf, M2 is 0 (no inf - inf)
    out = torch.empty(12)
    _moments[(1,)](x, w, out, R=1024)
    for row, part in ((0, x[0]), (1, x[1]), (2, x[2, :512])):
        torch.testing.assert_close(out[row], part.double().mean().float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[4 + row], ((part.double() - part.double().mean()) ** 2).sum().float(),
                                   rtol=1e-4, atol=1e-3)
    assert out[8:11].tolist() == [1024.0, 1024.0, 512.0]
    assert out[3] == float("inf") and out[7] == 0.0


@triton.jit
def _scaled(x_ptr, out_ptr, scale, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * scale.to(tl.float32))


def test_a_float_argument_is_an_fp32_scalar_as_in_a_compiled_kernel() -> None:
    """Hand-written kernels (liger-kernel's norms, SwiGLU) call ``.to`` on a float argument."""
    x = torch.randn(16)
    out = torch.empty_like(x)
    _scaled[(1,)](x, out, 0.5, N=16)
    assert torch.equal(out, x * 0.5)


@triton.jit
def _pair_max(a_value, a_index, b_value, b_index):
    """A kernel's own combine: the larger value and its index, the left one on ties."""
    take_a = (a_value > b_value) | ((a_value == b_value) & (a_index < b_index))
    return tl.where(take_a, a_value, b_value), tl.where(take_a, a_index, b_index)


@triton.jit
def _scaled_add(a, b):
    return a * 0.5 + b


@triton.jit
def _branchy_max(a, b):
    """Python control flow on the values: a compiled kernel allows it on a reduce's scalars; the
    interpreter cannot apply it to whole slices and takes one element at a time."""
    if a > b:
        return a
    return b


@triton.jit
def _own_combines(x_ptr, val_ptr, idx_ptr, scan_ptr, branchy_ptr, not_ptr, R: tl.constexpr):
    rows = tl.arange(0, 4)[:, None]
    cols = tl.arange(0, R)[None, :]
    x = tl.load(x_ptr + rows * R + cols)
    index = tl.broadcast_to(cols, [4, R])
    value, where = tl.reduce((x, index), 1, _pair_max)
    tl.store(val_ptr + tl.arange(0, 4), value)
    tl.store(idx_ptr + tl.arange(0, 4), where)
    tl.store(scan_ptr + rows * R + cols, tl.associative_scan(x, 1, _scaled_add))
    tl.store(branchy_ptr + tl.arange(0, 4), tl.reduce(x, 1, _branchy_max))
    tl.store(not_ptr + rows * R + cols, (not (x > 0)).to(tl.int8))


def test_a_kernels_own_combine_runs_on_whole_slices_with_the_compilers_meaning() -> None:
    """``tl.reduce``/``tl.associative_scan`` with a combine of the kernel's own gave the same
    values one element at a time in Python (one argmax over a 16x256x64 tensor took minutes);
    they now run on slices. A combine that branches on its values still runs, element by element;
    ``not`` on a block negates each element, as the compiler reads it (the interpreter's Python
    ``not`` answered False for any block)."""
    R = 1024
    x = torch.randn(4, R)
    x[1, 10] = x[1, 900] = x[1].max() + 1  # a tie: the left index wins
    val, idx = torch.empty(4), torch.empty(4, dtype=torch.int32)
    scan, branchy, negated = torch.empty(4, R), torch.empty(4), torch.empty(4, R, dtype=torch.int8)
    start = time.monotonic()
    _own_combines[(1,)](x, val, idx, scan, branchy, negated, R=R)
    took = time.monotonic() - start
    assert torch.equal(val, x.max(1).values) and idx.tolist()[1] == 10
    assert torch.equal(idx.long(), x.argmax(1))
    expected = x.double().clone()
    for i in range(1, R):
        expected[:, i] = expected[:, i - 1] * 0.5 + expected[:, i]
    torch.testing.assert_close(scan.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(branchy, x.max(1).values)  # the element-by-element path, unchanged
    assert torch.equal(negated, (x <= 0).to(torch.int8))
    assert took < 60, f"{took:.0f} s"  # the scan's 1024 steps and the branchy reduce's 4096 elements dominate


def test_inductors_argmax_is_fast_and_lets_nan_win_as_on_a_gpu() -> None:
    """Inductor's argmax (``max_with_index``, and ``maximum_with_index``'s ``not b_isnan`` in the
    loop) run in the interpreter as compiled: NaN wins, as in eager; ties go left."""
    x = torch.randn(8, 256, 16)
    x[3, 5, 7] = float("nan")
    x[2, :, 4] = 1.0  # all equal: index 0
    for dim in (1, 2):  # no torch._dynamo.reset(): it would recompile other tests' session captures
        compiled = torch.compile(lambda t, d=dim: torch.argmax(t, dim=d))
        start = time.monotonic()
        got = compiled(x)
        assert time.monotonic() - start < 120
        assert torch.equal(got, torch.argmax(x, dim=dim)), dim
