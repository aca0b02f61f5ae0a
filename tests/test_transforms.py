"""Our source transformations apply to real kernels (H200 output code) and pass the static gate."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import parse_output_code
from kernelopt_bot.capture.recorder import capture
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.search.space import configs, sample
from kernelopt_bot.search.transforms import (
    applicable,
    pipelined_reduction_loop,
    shifted_sums_for_welford,
    stack,
)
from kernelopt_bot.search.tuner import ORIGIN
from kernelopt_bot.targets import load_target
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.static import check_config, check_source
from tests.helpers import DEVICE

H200 = Path(__file__).resolve().parent / "fixtures" / "output_code" / "torch-2.11.0"


@pytest.mark.parametrize("name", ["softmax.py", "rmsnorm.py", "softmax_bf16.py", "sum_middle_dim.py"])
def test_transformations_of_looped_reductions_pass_gate_1(name: str) -> None:
    kernel = parse_output_code((H200 / name).read_text()).kernels[0]
    assert kernel.kind == "reduction"
    variants = dict(applicable(kernel.source))
    assert "pipelined_loop_2" in variants and "num_stages=2)" in variants["pipelined_loop_2"]
    for label, source in variants.items():
        result = check_source(kernel, source)
        assert result.passed, f"{label}: {result.reason}"


def test_pipelining_does_not_apply_twice_or_to_pointwise() -> None:
    pointwise = parse_output_code((H200 / "gelu.py").read_text()).kernels[0]
    assert pipelined_reduction_loop(2)(pointwise.source) is None
    looped = parse_output_code((H200 / "softmax.py").read_text()).kernels[0]
    once = pipelined_reduction_loop(2)(looped.source)
    assert once is not None and pipelined_reduction_loop(3)(once) is None


def test_launch_space_is_valid_for_gate_1() -> None:
    kernel = parse_output_code((H200 / "softmax_bf16.py").read_text()).kernels[0]
    space = list(configs(kernel))
    assert len(space) > 50
    assert any(c.kwargs.get("R0_BLOCK") == 16384 for c in space)  # a whole row in one iteration
    for config in sample(kernel, 40, seed=1):
        assert check_config(kernel, config).passed, config.describe()


def _loop_bodies(source: str) -> list[str]:
    """The text of each ``for r0_offset`` loop of a kernel (up to the next line indented less)."""
    return re.findall(r"^( +)for r0_offset in[^\n]*\n((?:\1 [^\n]*\n)+)", source, re.M)


@pytest.mark.parametrize("name", ["linear_epilogue.py", "mlp_bf16.py", "graph_break_g0.py"])
def test_welford_loops_of_real_kernels_become_shifted_sums_without_a_division(name: str) -> None:
    kernel = next(k for k in parse_output_code((H200 / name).read_text()).kernels
                  if "welford_reduce" in k.source)
    new = shifted_sums_for_welford(kernel.source)
    assert new is not None and "welford_reduce" not in new
    assert "triton_helpers.welford(" in new  # the lanes are still combined by Inductor's own helper
    shifted_loop = next(body for _, body in _loop_bodies(new) if "_shift" in body)
    assert "/" not in shifted_loop
    assert check_source(kernel, new).passed
    assert shifted_sums_for_welford(new) is None  # once only
    assert dict(applicable(kernel.source))["shifted_sums_for_welford"] == new


def test_no_welford_no_shifted_sums() -> None:
    for name in ("softmax.py", "gelu.py", "rmsnorm.py"):
        assert shifted_sums_for_welford(parse_output_code((H200 / name).read_text()).kernels[0].source) is None


LAYER_NORM_FAR_FROM_ZERO = '''
import torch

class Model(torch.nn.Module):
    """Layer norm over 3000-wide rows (not a multiple of any block: masked lanes) of values near
    1000 with a spread of 0.5: summing squares unshifted would cancel the variance away in fp32."""
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(3000)

    def forward(self, x):
        return self.norm(x)

def get_inputs():
    return [torch.randn(5, 3000) * 0.5 + 1000.0]

def get_init_inputs():
    return []
'''


def test_shifted_sums_pass_gates_1_to_3_on_a_layer_norm_far_from_zero(tmp_path: Path) -> None:
    """With 256-wide blocks each lane sums 11-12 values: the shifted sums pass the gates; the same
    sums without the shift (the textbook sum of squares) lose the variance to cancellation (a
    relative error near 1e-2, against Welford's 1e-4) and the gates reject them."""
    path = tmp_path / "layer_norm_far.py"
    path.write_text(LAYER_NORM_FAR_FROM_ZERO)
    captured = capture(load_target(str(path), DEVICE, "fp32"))
    kernel = next(k for k in captured.artifact.kernels if "welford_reduce" in k.source)
    new = shifted_sums_for_welford(kernel.source)
    assert new is not None
    unshifted = re.sub(r"(\w+)_shift = tl\.where\(\w+_weight == 0, \w+, \w+_shift\)", r"\1_shift = \1_shift", new)
    assert unshifted != new
    blocks = LaunchConfig({"XBLOCK": 1, "R0_BLOCK": 256}, num_warps=4, num_stages=1)
    with Cascade(captured, VerifyOptions(seeds=(0, 1), rounds=1)) as gates:
        verdict = gates.verify(kernel, Candidate("shifted_sums_for_welford", source=new, config=blocks, origin=ORIGIN))
        textbook = gates.verify(kernel, Candidate("unshifted sums", source=unshifted, config=blocks, origin=ORIGIN))
    assert verdict.infrastructure is None and textbook.infrastructure is None
    assert [g.name for g in verdict.gates if g.passed] == ["static", "correctness", "model"], verdict.gates
    failed = [g.name for g in textbook.gates if g.passed is False]
    assert failed and failed[0] in ("correctness", "model"), textbook.gates


# Two mean/variance reductions in one loop, written as Inductor writes them (masks on the rows and
# the columns): the shifted sums must give what Welford gives, special values included.
TWO_WELFORDS = """
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers


@triton.jit
def two_welfords(in_ptr0, in_ptr1, out_ptr0, out_ptr1, out_ptr2, out_ptr3, xnumel, r0_numel,
                 XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    tmp2_mean = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_m2 = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp2_weight = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp5_mean = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp5_m2 = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    tmp5_weight = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + r0_numel*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp2_mean_next, tmp2_m2_next, tmp2_weight_next = triton_helpers.welford_reduce(
            tmp1, tmp2_mean, tmp2_m2, tmp2_weight, roffset == 0
        )
        tmp2_mean = tl.where(r0_mask & xmask, tmp2_mean_next, tmp2_mean)
        tmp2_m2 = tl.where(r0_mask & xmask, tmp2_m2_next, tmp2_m2)
        tmp2_weight = tl.where(r0_mask & xmask, tmp2_weight_next, tmp2_weight)
        tmp3 = tl.load(in_ptr1 + (r0_1 + r0_numel*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp4 = tl.broadcast_to(tmp3, [XBLOCK, R0_BLOCK])
        tmp5_mean_next, tmp5_m2_next, tmp5_weight_next = triton_helpers.welford_reduce(
            tmp4, tmp5_mean, tmp5_m2, tmp5_weight, roffset == 0
        )
        tmp5_mean = tl.where(r0_mask & xmask, tmp5_mean_next, tmp5_mean)
        tmp5_m2 = tl.where(r0_mask & xmask, tmp5_m2_next, tmp5_m2)
        tmp5_weight = tl.where(r0_mask & xmask, tmp5_weight_next, tmp5_weight)
    tmp6, tmp7, tmp8 = triton_helpers.welford(tmp2_mean, tmp2_m2, tmp2_weight, 1)
    tmp9, tmp10, tmp11 = triton_helpers.welford(tmp5_mean, tmp5_m2, tmp5_weight, 1)
    tl.store(out_ptr0 + (x0), tmp6[:, None], xmask)
    tl.store(out_ptr1 + (x0), tmp7[:, None], xmask)
    tl.store(out_ptr2 + (x0), tmp9[:, None], xmask)
    tl.store(out_ptr3 + (x0), tmp10[:, None], xmask)
"""


def _load_kernel(path: Path, source: str, name: str = "two_welfords") -> Any:
    """The kernel ``name`` of ``source``, imported from a file (Triton's JIT reads the source back)."""
    import importlib.util

    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


@pytest.mark.parametrize("xblock, rblock", [(2, 64), (1, 512), (4, 16)])
def test_shifted_sums_give_welfords_mean_and_m2_with_special_values(tmp_path: Path, xblock: int, rblock: int) -> None:
    """Rows near 1000 (the shift's reason), a row with one inf, a row all inf, a row with a NaN, a
    row with both infinities; at R0_BLOCK=512 each lane holds at most one value of a 300-wide row
    and most lanes none."""
    import torch

    new = shifted_sums_for_welford(TWO_WELFORDS)
    assert new is not None and "welford_reduce" not in new
    welford = _load_kernel(tmp_path / "welford_kernel.py", TWO_WELFORDS)
    shifted = _load_kernel(tmp_path / "shifted_kernel.py", new)
    generator = torch.Generator().manual_seed(0)
    rows, width = 6, 300
    a = torch.randn(rows, width, generator=generator) * 0.5 + 1000.0
    b = torch.randn(rows, width, generator=generator)
    a[1, 7] = float("inf")
    a[2, :] = float("inf")
    b[3, 5] = float("nan")
    a[4, 3], a[4, 10] = float("inf"), float("-inf")

    def run(kernel: Any) -> list[torch.Tensor]:
        outs = [torch.full((rows,), -7.0) for _ in range(4)]
        kernel[((rows + xblock - 1) // xblock,)](a, b, *outs, rows, width, XBLOCK=xblock, R0_BLOCK=rblock)
        return outs

    for mine, theirs in zip(run(shifted), run(welford)):
        assert torch.equal(torch.isnan(mine), torch.isnan(theirs)), (mine, theirs)
        assert torch.equal(torch.isinf(mine), torch.isinf(theirs)), (mine, theirs)
        finite = torch.isfinite(theirs)
        assert torch.allclose(mine[finite], theirs[finite], rtol=1e-4, atol=1e-3), (mine, theirs)
    exact = a[0].double()
    m2 = run(shifted)[1][0].item()
    assert m2 == pytest.approx(float(((exact - exact.mean()) ** 2).sum()), rel=1e-3)


def test_shifted_sums_where_inductor_writes_no_mask(tmp_path: Path) -> None:
    """Where every mask is constant true (rows a multiple of the block), Inductor updates the
    accumulators plainly, ``acc_m2 = acc_m2_next``: the compensation then advances plainly too,
    and the sums are Welford's."""
    import torch

    unmasked = re.sub(r"tl\.where\(r0_mask & xmask, (\w+_next), \w+\)", r"\1", TWO_WELFORDS)
    assert "tl.where" not in unmasked
    new = shifted_sums_for_welford(unmasked)
    assert new is not None and "tmp2_m2c = tmp2_m2c_next" in new and "tmp5_m2c = tmp5_m2c_next" in new
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 256, generator=generator) * 0.5 + 100.0, torch.randn(4, 256, generator=generator)

    def run(name: str, source: str) -> list[torch.Tensor]:
        outs = [torch.zeros(4) for _ in range(4)]
        _load_kernel(tmp_path / f"{name}.py", source)[(4,)](a, b, *outs, 4, 256, XBLOCK=1, R0_BLOCK=64)
        return outs

    for mine, theirs in zip(run("shifted", new), run("welford", unmasked)):
        assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-3), (mine, theirs)


def test_shifted_sums_of_squares_are_compensated_so_bf16_values_do_not_bias_them(tmp_path: Path) -> None:
    """Values with bf16's few significant bits, 256 to a lane: summed plainly, the lanes' sums of
    squares come out low against float64 (-6.3e-7 here; -1.3e-6 at 288 a lane, which gate 2
    rejected as a systematic error in a bf16 group norm on the H200), compensated they do not."""
    import torch

    new = shifted_sums_for_welford(TWO_WELFORDS)
    assert new is not None
    plain = re.sub(r"(\w+_square = \w+_delta \* \w+_delta) - \w+_m2c", r"\1", new)
    assert plain != new
    rows, width = 6, 512 * 256
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, width, generator=generator).to(torch.bfloat16).float()
    b = (torch.randn(rows, width, generator=generator) * 3 + 2).to(torch.bfloat16).float()
    exact = torch.cat([a, b]).double()
    m2_exact = ((exact - exact.mean(1, keepdim=True)) ** 2).sum(1)

    def bias(name: str, source: str) -> float:
        outs = [torch.zeros(rows) for _ in range(4)]
        _load_kernel(tmp_path / f"{name}.py", source)[(rows,)](a, b, *outs, rows, width, XBLOCK=1, R0_BLOCK=512)
        return float(((torch.cat([outs[1], outs[3]]).double() - m2_exact) / m2_exact).mean())

    assert abs(bias("compensated", new)) < 2e-7
    assert bias("plain", plain) < -5e-7


def test_a_stack_takes_one_of_each_pair_of_alternatives() -> None:
    kernel = parse_output_code((H200 / "linear_epilogue.py").read_text()).kernels[0]
    source, applied = stack(kernel.source, ["flip_eviction", "drop_eviction_hints", "pipelined_loop_3",
                                            "pipelined_loop_2", "shifted_sums_for_welford"])
    assert applied == ["flip_eviction", "pipelined_loop_3", "shifted_sums_for_welford"]
    assert "evict_first" in source and "num_stages=3)" in source and "num_stages=2)" not in source


CROSS_ENTROPY = '''
import torch

class Model(torch.nn.Module):
    """Label smoothing: after its softmax loops the kernel reads each row once more to sum x - max - lse."""
    def forward(self, logits, targets):
        return torch.nn.functional.cross_entropy(logits, targets, label_smoothing=0.1)

def get_inputs():
    return [2.0 * torch.randn(6, 3001), torch.randint(0, 3001, (6,))]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_loop_that_reads_the_rows_again_to_sum_shifted_values_is_folded(tmp_path: Path, dtype: str) -> None:
    """A cross-entropy with label smoothing, captured: its last loop (sum of x - max - lse) goes,
    an earlier loop over the same row also sums x, and gates 1-3 pass."""
    from kernelopt_bot.search.transforms import fold_shifted_sum_loop

    path = tmp_path / "cross_entropy.py"
    path.write_text(CROSS_ENTROPY)
    captured = capture(load_target(str(path), DEVICE, dtype))
    kernel = next(k for k in captured.artifact.kernels if k.name.startswith("triton_red_"))
    new = fold_shifted_sum_loop(kernel.source)
    assert new is not None and "fold_shifted_sum_loop" in [name for name, _ in applicable(kernel.source)]
    assert new.count("for r0_offset") == kernel.source.count("for r0_offset") - 1
    assert new.count("tl.load(in_ptr0") == kernel.source.count("tl.load(in_ptr0") - 1
    assert "_n * ((" in new and fold_shifted_sum_loop(new) is None  # once
    # a cooperative reduction's loops cover a share of the row each: not folded
    shared = kernel.source.replace("tl.range(0, r0_numel, R0_BLOCK)", "tl.range(rsplit_start, rsplit_end, R0_BLOCK)")
    assert shared != kernel.source and fold_shifted_sum_loop(shared) is None
    with Cascade(captured, VerifyOptions(seeds=(0, 1), rounds=1)) as gates:
        verdict = gates.verify(kernel, Candidate("fold_shifted_sum_loop", source=new, config=None, origin=ORIGIN))
    assert verdict.infrastructure is None
    assert [g.name for g in verdict.gates if g.passed] == ["static", "correctness", "model"], verdict.gates


def test_no_fold_where_the_loop_does_more_than_sum_shifted_values() -> None:
    """The H200 kernels of our examples (softmax, RMS norm, sums, attention): none has such a loop."""
    from kernelopt_bot.search.transforms import fold_shifted_sum_loop

    for name in ("softmax.py", "rmsnorm.py", "softmax_bf16.py", "sum_middle_dim.py", "attention_block_bf16.py"):
        for kernel in parse_output_code((H200 / name).read_text()).kernels:
            assert fold_shifted_sum_loop(kernel.source) is None, (name, kernel.name)


ROWS_WRITTEN_IN_PLACE = '''
import torch

class Model(torch.nn.Module):
    """Inductor writes x - max into x's own buffer between its loops: a later loop's load of the
    same address reads other values than an earlier loop's."""
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 3001))

    def forward(self, a):
        x = a @ self.w
        centred = x - x.amax(1, keepdim=True)
        return centred, (centred - torch.logsumexp(centred, 1, keepdim=True)).sum(1)

def get_inputs():
    return [torch.randn(6, 64)]

def get_init_inputs():
    return []
'''


def test_no_fold_into_a_loop_that_read_the_rows_before_the_kernel_rewrote_them(tmp_path: Path) -> None:
    from kernelopt_bot.search.transforms import fold_shifted_sum_loop

    path = tmp_path / "in_place.py"
    path.write_text(ROWS_WRITTEN_IN_PLACE)
    captured = capture(load_target(str(path), DEVICE, "fp32"))
    kernel = next(k for k in captured.artifact.kernels if "tl.store(in_out_ptr0 + (r0_" in k.source)
    assert fold_shifted_sum_loop(kernel.source) is None
    # the in-place write is what stops it: the same kernel storing elsewhere would be folded
    elsewhere = kernel.source.replace("tl.store(in_out_ptr0 + (r0_", "tl.store(out_ptr9 + (r0_")
    assert fold_shifted_sum_loop(elsewhere) is not None


def _cross_entropy_rows(path: Path, source: str, logits: Any, xblock: int, rblock: int) -> list[Any]:
    """The outputs of ``source``'s ``cross_entropy_rows`` (a version of the H200 kernel below) on
    ``logits``: each row's maximum, its sum of exponentials, and its sum of log-probabilities."""
    import torch

    rows, width = logits.shape
    kernel = _load_kernel(path, source, "cross_entropy_rows")
    outs = [torch.full((rows,), -7.0), torch.full((rows,), -7.0), torch.full((rows,), -7.0, dtype=torch.bfloat16)]
    kernel[(rows // xblock,)](logits, *outs, rows, width, XBLOCK=xblock, R0_BLOCK=rblock)
    return outs


# The cross-entropy kernel torch 2.11 generated on the H200 (bf16 logits, 8192 x 50257; sizes made
# arguments here): an online softmax loop, then a loop that sums x - max - log(sum) with the log
# computed inside the loop. The log is fixed for the row and moves out; the loop still folds.
H200_CROSS_ENTROPY = """
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math


@triton.jit
def cross_entropy_rows(in_ptr0, out_ptr0, out_ptr1, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp3_max = tl.full([XBLOCK, R0_BLOCK], float('-inf'), tl.float32)
    _tmp3_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + r0_numel*x0), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tmp1 = tmp0.to(tl.float32)
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])

        _tmp3_max_next, _tmp3_sum_next = triton_helpers.online_softmax_combine(
            _tmp3_max, _tmp3_sum, tmp2, False
        )

        _tmp3_max = tl.where(r0_mask, _tmp3_max_next, _tmp3_max)
        _tmp3_sum = tl.where(r0_mask, _tmp3_sum_next, _tmp3_sum)

    tmp3, tmp4 = triton_helpers.online_softmax_reduce(
        _tmp3_max, _tmp3_sum, 1, False)
    tmp3 = tmp3[:, None]
    tmp4 = tmp4[:, None]
    tl.store(out_ptr0 + (x0), tmp3, None)
    tl.store(out_ptr1 + (x0), tmp4, None)
    _tmp12 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp5 = tl.load(in_ptr0 + (r0_1 + r0_numel*x0), r0_mask, eviction_policy='evict_first', other=0.0).to(tl.float32)
        tmp6 = tmp5.to(tl.float32)
        tmp7 = tmp6 - tmp3
        tmp8 = tl_math.log(tmp4)
        tmp9 = tmp7 - tmp8
        tmp10 = tmp9.to(tl.float32)
        tmp11 = tl.broadcast_to(tmp10, [XBLOCK, R0_BLOCK])
        tmp13 = _tmp12 + tmp11
        _tmp12 = tl.where(r0_mask, tmp13, _tmp12)
    tmp12 = tl.sum(_tmp12, 1)[:, None]
    tl.store(out_ptr2 + (x0), tmp12, None)
"""


@pytest.mark.parametrize("xblock, rblock", [(2, 64), (1, 1024)])
def test_the_h200_cross_entropy_kernel_folds_its_loop_with_the_log_moved_out(
        tmp_path: Path, xblock: int, rblock: int) -> None:
    """torch 2.11's GPU kernel (the suite's cross-entropy found no fold on the H200 because of the
    log inside the loop): folded, it gives the original's sums on bf16 rows near 0 and near 500,
    with -inf and NaN."""
    import torch

    from kernelopt_bot.search.transforms import fold_shifted_sum_loop

    new = fold_shifted_sum_loop(H200_CROSS_ENTROPY)
    assert new is not None and new.count("for r0_offset") == 1 and new.count("tl.load(") == 1
    assert "    tmp8 = tl_math.log(tmp4)\n    tmp12 = tl.sum(_kfold1 - " in new
    assert fold_shifted_sum_loop(new) is None

    generator = torch.Generator().manual_seed(0)
    logits = (2.0 * torch.randn(6, 3001, generator=generator)).to(torch.bfloat16)
    logits[1] += 500.0
    logits[2, 17] = float("-inf")
    logits[3, 5] = float("nan")

    def run(name: str, source: str) -> torch.Tensor:
        return _cross_entropy_rows(tmp_path / f"{name}.py", source, logits, xblock, rblock)[2].float()

    folded, original = run("folded", new), run("original", H200_CROSS_ENTROPY)
    assert torch.equal(torch.isnan(folded), torch.isnan(original)), (folded, original)
    assert torch.equal(torch.isinf(folded), torch.isinf(original)), (folded, original)
    finite = torch.isfinite(original)
    assert finite.sum() >= 4
    assert torch.allclose(folded[finite], original[finite], rtol=1e-2), (folded, original)
    exact = logits[0].double()
    assert folded[0].item() == pytest.approx(float(torch.log_softmax(exact, 0).sum()), rel=1e-2)


def _rows_with_special_values(seed: int) -> Any:
    """Eight bf16 rows of 1500 for a softmax kernel: near 0, near 500 (row 1), with a -inf (2), a
    NaN (3), a +inf (4), all -inf (5) and starting with 700 -inf (6)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    rows = (3.0 * torch.randn(8, 1500, generator=generator)).to(torch.bfloat16)
    rows[1] += 500.0
    rows[2, 17] = float("-inf")
    rows[3, 5] = float("nan")
    rows[4, 900] = float("inf")
    rows[5, :] = float("-inf")
    rows[6, :700] = float("-inf")
    return rows


@pytest.mark.parametrize("xblock, rblock", [(2, 64), (1, 1024)])
def test_one_exp_online_softmax_gives_the_same_bits_special_values_included(
        tmp_path: Path, xblock: int, rblock: int) -> None:
    """The H200 cross-entropy kernel's online softmax with one exponential per element: the row's
    maximum and sum of exponentials equal the original's bit for bit on finite rows (near 0, near
    500), and -inf, +inf, NaN, an all -inf row and a row that starts with -inf come out alike;
    stacked on the fold it still applies."""
    import torch

    from kernelopt_bot.search.transforms import one_exp_online_softmax

    new = one_exp_online_softmax(H200_CROSS_ENTROPY)
    assert new is not None and "online_softmax_combine" not in new and new.count("libdevice.exp(") == 1
    assert one_exp_online_softmax(new) is None
    stacked, applied = stack(H200_CROSS_ENTROPY, ["fold_shifted_sum_loop", "one_exp_online_softmax"])
    assert applied == ["fold_shifted_sum_loop", "one_exp_online_softmax"]
    h200 = parse_output_code((H200 / "softmax_bf16.py").read_text()).kernels[0]
    assert check_source(h200, stack(h200.source, ["one_exp_online_softmax", "pipelined_loop_3"])[0]).passed

    logits = _rows_with_special_values(seed=1)

    def run(name: str, source: str) -> list[torch.Tensor]:
        return _cross_entropy_rows(tmp_path / f"{name}.py", source, logits, xblock, rblock)

    original = run("original", H200_CROSS_ENTROPY)
    for mine, theirs in zip(run("one_exp", new)[:2], original[:2]):
        same = (mine == theirs) | (torch.isnan(mine) & torch.isnan(theirs))
        assert bool(same.all()), (mine, theirs)
    assert torch.isnan(original[1][3]) and torch.isnan(original[1][4]) and torch.isfinite(original[1][[0, 1, 2, 6]]).all()
    both = run("both", stacked)
    finite = torch.isfinite(original[2].float())
    assert torch.equal(torch.isnan(both[2].float()), torch.isnan(original[2].float()))
    assert torch.allclose(both[2].float()[finite], original[2].float()[finite], rtol=1e-2)


def _sizes_as_arguments(source: str) -> str:
    """A fixture kernel made to run at any size in the interpreter: its module's imports and the
    plain ``@triton.jit`` function, without the sizes Inductor wrote into its body (``xnumel =
    8192``) and with the row stride written from the row's length (``16384*x0``)."""
    sizes = dict(re.findall(r"^ +(xnumel|r0_numel) = (\d+)$", source, re.M))
    body = source[source.index("@triton.jit"):]
    body = re.sub(r"^ +(xnumel|r0_numel) = \d+\n", "", body, flags=re.M)
    body = body.replace(f"{sizes['r0_numel']}*x0", "r0_numel*x0")
    imports = [ln for ln in source.splitlines() if ln.startswith(("import ", "from "))]
    return "\n".join(imports) + "\n\n\n" + body


# The bf16 softmax kernel torch 2.11 generated on the H200 (tests/fixtures: 8192 x 16384), sizes
# made arguments: an online softmax loop, then a loop that divides exp(x - max) by the row's sum,
# fixed before that loop.
H200_SOFTMAX_KERNEL = parse_output_code((H200 / "softmax_bf16.py").read_text()).kernels[0]
H200_SOFTMAX = _sizes_as_arguments(H200_SOFTMAX_KERNEL.source)


@pytest.mark.parametrize("xblock, rblock", [(2, 64), (1, 512)])
def test_the_h200_softmax_divides_once_a_row_and_multiplies(tmp_path: Path, xblock: int, rblock: int) -> None:
    """The loop divides by the row's sum: one reciprocal before the loop, a multiplication in
    it. Within a bf16 ulp of the original (most elements the same bits), with -inf, +inf, NaN, an
    all -inf row and a row far from 0 coming out alike; it passes gate 1 on the H200 kernels, also
    stacked on one exponential per step; it does not apply twice, nor to a loop whose divisor it
    sets itself."""
    import torch

    from kernelopt_bot.search.transforms import multiply_by_hoisted_reciprocal

    new = multiply_by_hoisted_reciprocal(H200_SOFTMAX)
    assert new is not None and " / tmp4" not in new.split("tmp4_rcp = 1.0 / tmp4")[1]
    assert "    tmp4_rcp = 1.0 / tmp4\n    for r0_offset" in new and "tmp9 = (tmp8 * tmp4_rcp)" in new
    assert multiply_by_hoisted_reciprocal(new) is None
    in_loop = H200_SOFTMAX.replace("tmp9 = (tmp8 / tmp4)", "tmp4b = tmp7 + 1.0\n        tmp9 = (tmp8 / tmp4b)")
    assert multiply_by_hoisted_reciprocal(in_loop) is None
    for name in ("softmax_bf16.py", "softmax.py", "linear_epilogue.py"):
        kernel = next(k for k in parse_output_code((H200 / name).read_text()).kernels if k.kind == "reduction")
        for stacked in (multiply_by_hoisted_reciprocal(kernel.source),
                        stack(kernel.source, ["one_exp_online_softmax", "multiply_by_hoisted_reciprocal"])[0]):
            assert stacked is not None and "_rcp = 1.0 / " in stacked
            assert check_source(kernel, stacked).passed

    x = _rows_with_special_values(seed=2)

    def run(name: str, source: str) -> torch.Tensor:
        kernel = _load_kernel(tmp_path / f"{name}.py", source, H200_SOFTMAX_KERNEL.name)
        out = torch.full_like(x, -7.0)
        kernel[(x.shape[0] // xblock,)](x, out, x.shape[0], x.shape[1], XBLOCK=xblock, R0_BLOCK=rblock)
        return out.float()

    original, mine = run("original", H200_SOFTMAX), run("reciprocal", new)
    assert torch.equal(torch.isnan(mine), torch.isnan(original))
    finite = ~torch.isnan(original)
    assert torch.allclose(mine[finite], original[finite], rtol=2 ** -7, atol=0.0)  # a bf16 ulp
    assert (mine[finite] == original[finite]).float().mean() > 0.9
    assert torch.allclose(original[0].sum(), torch.tensor(1.0), rtol=2e-2)  # a softmax row, as it was


MASKED_SOFTMAX = '''
import torch

class Model(torch.nn.Module):
    """Attention probabilities with a causal mask (masked_fill to -inf, then softmax), rows of
    WIDTH: short rows give a persistent reduction, long ones a loop that reads the scores twice."""
    def __init__(self):
        super().__init__()
        self.register_buffer("causal", torch.ones(WIDTH, WIDTH, dtype=torch.bool).tril())

    def forward(self, scores):
        return torch.softmax((scores * 0.125).masked_fill(~self.causal, float("-inf")), dim=-1)

def get_inputs():
    return [4.0 * torch.randn(2, WIDTH, WIDTH)]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("width, dtype", [(48, "fp32"), (48, "bf16")])
def test_a_causal_softmax_reads_no_masked_score(tmp_path: Path, width: int, dtype: str) -> None:
    """The captured kernel's score load is masked with the causal mask's condition, the mask's
    own load is not, and gates 1-3 pass."""
    from kernelopt_bot.search.transforms import skip_discarded_loads

    path = tmp_path / "masked_softmax.py"
    path.write_text(MASKED_SOFTMAX.replace("WIDTH", str(width)))
    captured = capture(load_target(str(path), DEVICE, dtype))
    (kernel,) = [k for k in captured.artifact.kernels if "masked_fill" in k.name]
    new = skip_discarded_loads(kernel.source)
    assert new is not None and "skip_discarded_loads" in [name for name, _ in applicable(kernel.source)]
    loads = [ln.strip() for ln in new.splitlines() if "tl.load(" in ln]
    masked = [ln for ln in loads if re.search(r"\) & \(~tmp\d+\), ", ln)]
    assert len(masked) == kernel.source.count("tl.load(in_ptr1") >= 1  # every read of the scores
    assert all("in_ptr1" in ln for ln in masked)  # not the mask's own
    assert skip_discarded_loads(new) is None  # once
    with Cascade(captured, VerifyOptions(seeds=(0, 1), rounds=1)) as gates:
        verdict = gates.verify(kernel, Candidate("skip_discarded_loads", source=new, config=None, origin=ORIGIN))
    assert verdict.infrastructure is None
    assert [g.name for g in verdict.gates if g.passed] == ["static", "correctness", "model"], verdict.gates


DISCARDED = """
    tmp0 = tl.load(in_ptr0 + (x0), xmask).to(tl.int1)
    tmp2 = tl.load(in_ptr1 + (x0), xmask, other=0.0)
    tmp1 = tmp0 == 0
    tmp3 = tl.full([1], float("-inf"), tl.float32)
    tmp4 = tmp2 * 2.0
    tmp6 = tl.where(tmp1, tmp3, tmp4)
    tl.store(out_ptr0 + (x0), tmp6, xmask)
"""


def test_a_load_is_masked_only_where_nothing_else_uses_its_value() -> None:
    from kernelopt_bot.search.transforms import skip_discarded_loads

    new = skip_discarded_loads(DISCARDED)
    assert new is not None and "tmp2 = tl.load(in_ptr1 + (x0), (xmask) & (~tmp1), other=0.0)" in new
    assert new.index("tmp1 = tmp0 == 0") < new.index("tmp2 = tl.load") < new.index("tmp4 = tmp2 * 2.0")
    # kept where the condition holds: loaded where it holds
    assert "(xmask) & (tmp1)" in skip_discarded_loads(DISCARDED.replace("where(tmp1, tmp3, tmp4)", "where(tmp1, tmp4, tmp3)"))
    for other_use in ("    tmp7 = tmp6 + tmp2\n",  # the value is used beside the where
                      "    tmp7 = tl.sum(tmp4, 0)\n",  # a value computed from it is reduced
                      "    tl.store(out_ptr1 + (x0), tmp4, xmask)\n"):  # or stored
        assert skip_discarded_loads(DISCARDED + other_use) is None, other_use
    assert skip_discarded_loads(DISCARDED.replace("tmp1 = tmp0 == 0", "tmp1 = tmp2 > 0")) is None  # its own condition
    stored_between = DISCARDED.replace("    tmp1 = tmp0 == 0\n", "    tmp1 = tmp0 == 0\n    tl.store(in_ptr1 + (x0), tmp0, xmask)\n")
    assert skip_discarded_loads(stored_between) is None  # the load would read what the store wrote
    commas = DISCARDED.replace("tl.load(in_ptr1 + (x0), xmask, other=0.0)", "tl.load(in_ptr1 + (tl.broadcast_to(x0, [XBLOCK])))")
    assert skip_discarded_loads(commas) is None  # an address with a comma is not misread as address and mask
    assert skip_discarded_loads(DISCARDED.replace("tl.where(tmp1, tmp3, tmp4)", "tl.where(tmp1, tmp2, tmp4)")) is None


# The score kernel of benchmarks/level2/bmm_scale_masked_softmax.py in bf16 as torch 2.11 generated
# it on the H200 (`kernelopt inspect ... --json`, 12-04): a persistent online softmax whose loads
# have no mask (the sizes need none) and no ``other``, reading and writing the scores in place.
H200_MASKED_SOFTMAX = '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice


@triton.jit
def masked_softmax(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 196608
    r0_numel = 1024
    R0_BLOCK: tl.constexpr = 1024
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_2 = r0_index
    x0 = (xindex % 1024)
    x3 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_2 + 1024*x0), None, eviction_policy='evict_last').to(tl.int1)
    tmp2 = tl.load(in_out_ptr0 + (r0_2 + 1024*x3), None).to(tl.float32)
    tmp1 = tmp0 == 0
    tmp3 = tl.full([1, 1], 0.08838834764831845, tl.float32)
    tmp4 = tmp2 * tmp3
    tmp5 = tl.full([1, 1], float("-inf"), tl.float32)
    tmp6 = tl.where(tmp1, tmp5, tmp4)
    tmp7 = tmp6.to(tl.float32)
    tmp8 = tl.broadcast_to(tmp7, [XBLOCK, R0_BLOCK])
    tmp10 = tl.broadcast_to(tmp8, [XBLOCK, R0_BLOCK])
    tmp12 = triton_helpers.max2(tmp10, 1)[:, None].to(tl.float32)
    tmp13 = tmp8 - tmp12
    tmp14 = libdevice.exp(tmp13)
    tmp15 = tl.broadcast_to(tmp14, [XBLOCK, R0_BLOCK])
    tmp17 = tl.sum(tmp15, 1)[:, None].to(tl.float32)
    tmp18 = tmp7 - tmp12
    tmp19 = libdevice.exp(tmp18)
    tmp20 = (tmp19 / tmp17)
    tmp21 = tmp20.to(tl.float32)
    tl.store(in_out_ptr0 + (r0_2 + 1024*x3), tmp21, None)
'''


def test_the_h200_causal_softmax_without_load_masks_reads_no_masked_score(tmp_path: Path) -> None:
    """Where the sizes need no load mask (``None``) the score load gets the causal condition as
    its whole mask and an ``other``; the mask's own load is left alone; the rows it writes are
    the same bits as the original's, the masked lanes included (exp(-inf) is 0 either way)."""
    import torch

    from kernelopt_bot.search.transforms import skip_discarded_loads

    new = skip_discarded_loads(H200_MASKED_SOFTMAX)
    assert new is not None
    assert "tmp2 = tl.load(in_out_ptr0 + (r0_2 + 1024*x3), (~tmp1), other=0.0).to(tl.float32)" in new
    assert "tmp0 = tl.load(in_ptr0 + (r0_2 + 1024*x0), None, eviction_policy='evict_last').to(tl.int1)" in new
    assert skip_discarded_loads(new) is None
    rows = 4  # of the 196608: the interpreter runs a few programs, one row each
    causal = torch.ones(1024, 1024, dtype=torch.bool).tril()
    scores = 4.0 * torch.randn(rows, 1024, generator=torch.Generator().manual_seed(0))

    def run(name: str, source: str) -> torch.Tensor:
        kernel = _load_kernel(tmp_path / f"{name}.py", source, "masked_softmax")
        out = scores.to(torch.bfloat16).clone()
        kernel[(rows,)](out, causal, rows, 1024, XBLOCK=1)
        return out

    original, mine = run("original", H200_MASKED_SOFTMAX), run("skipped", new)
    assert torch.equal(mine, original)
    assert torch.equal(original[:, 512:] == 0, ~causal[:rows, 512:])  # the masked half is 0, as it was


# The H200 cross-entropy kernel with its row length written in, as Inductor writes it, and odd.
ODD_ROWS = (H200_CROSS_ENTROPY.replace("xnumel, r0_numel, XBLOCK", "xnumel, r0_numel_given, XBLOCK")
            .replace("    xoffset = tl.program_id(0)", "    r0_numel = 3001\n    xoffset = tl.program_id(0)")
            .replace("r0_numel*x0", "3001*x0"))


@pytest.mark.parametrize("xblock, rblock", [(2, 64), (1, 1024), (2, 8)])
def test_rows_of_odd_length_are_read_in_aligned_chunks(tmp_path: Path, xblock: int, rblock: int) -> None:
    """A 3001-wide row: its chunks start at the row's offset rounded down to a multiple of 8, and
    those wholly inside the row load without the row's mask. The row's maximum comes out the same
    bits, its sums within rounding, with -inf and NaN as before; a row length that is a multiple
    of 8 is left as it is, and the rewrite does not apply twice."""
    import torch

    from kernelopt_bot.search.transforms import aligned_row_loads

    new = aligned_row_loads(ODD_ROWS)
    assert new is not None and new.count("if _kfull:") == 2 and new.count("_kbase = ((3001*x0) // 8) * 8") == 1
    assert new.count("tl.range(0, r0_numel + 7, R0_BLOCK)") == 2
    assert "tmp0 = tl.load(in_ptr0 + (_kbase + _krow), None, eviction_policy='evict_last')" in new
    assert aligned_row_loads(new) is None
    assert aligned_row_loads(ODD_ROWS.replace("3001", "3008")) is None
    generator = torch.Generator().manual_seed(3)
    logits = (2.0 * torch.randn(6, 3001, generator=generator)).to(torch.bfloat16)
    logits[1] += 500.0
    logits[2, 17] = float("-inf")
    logits[3, 3000] = float("nan")
    logits[4, :9] = 40.0  # the row's first chunk, partly before its first aligned offset
    original = _cross_entropy_rows(tmp_path / "original.py", ODD_ROWS, logits, xblock, rblock)
    aligned = _cross_entropy_rows(tmp_path / "aligned.py", new, logits, xblock, rblock)
    torch.testing.assert_close(aligned[0], original[0], rtol=0, atol=0, equal_nan=True)  # the maximum: the same bits
    for mine, theirs in zip(aligned[1:], original[1:]):
        assert torch.equal(torch.isnan(mine), torch.isnan(theirs)) and torch.equal(torch.isinf(mine), torch.isinf(theirs))
        finite = torch.isfinite(theirs)
        assert finite.sum() >= 4 and torch.allclose(mine[finite].float(), theirs[finite].float(), rtol=1e-2)
    exact = torch.logsumexp(logits[0].double(), 0)
    assert float(original[0][0] + torch.log(original[1][0])) == pytest.approx(float(exact), rel=1e-5)
    assert float(aligned[0][0] + torch.log(aligned[1][0])) == pytest.approx(float(exact), rel=1e-5)


LAYER_NORM_ODD = '''
import torch

class Model(torch.nn.Module):
    """A 3001-wide layer norm: a loop of statistics, then a loop that reads the row again and writes it."""
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(3001)

    def forward(self, x):
        return self.norm(x)

def get_inputs():
    return [3.0 * torch.randn(5, 3001) + 2.0]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_an_odd_width_layer_norm_with_aligned_rows_passes_gates_1_to_3(tmp_path: Path, dtype: str) -> None:
    """Captured here: its loads and its store of the row are split into an aligned unmasked
    access and the masked one, its weight's loads are left alone, and gates 1-3 pass it (the
    row's shift on its own and on the stacked rewrites)."""
    from kernelopt_bot.search.transforms import aligned_row_loads

    path = tmp_path / "layer_norm_odd.py"
    path.write_text(LAYER_NORM_ODD)
    captured = capture(load_target(str(path), DEVICE, dtype))
    kernel = next(k for k in captured.artifact.kernels if k.name.startswith("triton_red_"))
    new = aligned_row_loads(kernel.source)
    assert new is not None and "aligned_row_loads" in [name for name, _ in applicable(kernel.source)]
    assert re.search(r"if _kfull:\n\s+tl\.store\(out_ptr\d+ \+ \(_kbase \+ _krow\)", new)
    assert re.search(r"tl\.load\(in_ptr[12] \+ \(r0_1\)", new)  # the weight and bias: not the row's offset
    stacked, applied = stack(kernel.source, ["aligned_row_loads", "shifted_sums_for_welford"])
    assert applied == ["shifted_sums_for_welford", "aligned_row_loads"]
    assert check_source(kernel, new).passed and check_source(kernel, stacked).passed
    with Cascade(captured, VerifyOptions(seeds=(0, 1), rounds=1)) as gates:
        for source in (new, stacked):
            verdict = gates.verify(kernel, Candidate("aligned_row_loads", source=source, config=None, origin=ORIGIN))
            assert verdict.infrastructure is None
            assert [g.name for g in verdict.gates if g.passed] == ["static", "correctness", "model"], verdict.gates


LOG_CUMSUM_ODD = '''
import torch

class Model(torch.nn.Module):
    """A scan along 3001-wide rows: Inductor's looped scan combines every lane of a chunk in order."""
    def forward(self, x):
        return torch.logcumsumexp(x, dim=1)

def get_inputs():
    return [torch.randn(4, 3001)]

def get_init_inputs():
    return []
'''


def test_rows_are_not_aligned_where_lanes_are_combined_in_order(tmp_path: Path) -> None:
    """A looped scan's shifted first chunk would put masked lanes (holding ``other``) before the
    row's first element, inside every prefix: not rewritten. A fill value written as a call
    (``other=float("-inf")``) is dropped whole from the unmasked branch."""
    import ast

    from kernelopt_bot.search.transforms import aligned_row_loads

    path = tmp_path / "log_cumsum_odd.py"
    path.write_text(LOG_CUMSUM_ODD)
    kernels = [k for k in capture(load_target(str(path), DEVICE, "fp32")).artifact.kernels if "r0_numel = 3001" in k.source]
    assert kernels and any("scan" in k.source for k in kernels)
    assert all(aligned_row_loads(k.source) is None for k in kernels)
    filled = ODD_ROWS.replace("r0_mask, eviction_policy='evict_last', other=0.0)",
                              "r0_mask, eviction_policy='evict_last', other=float(\"-inf\"))")
    new = aligned_row_loads(filled)
    assert new is not None and "tmp0 = tl.load(in_ptr0 + (_kbase + _krow), None, eviction_policy='evict_last').to(" in new
    ast.parse(new)
