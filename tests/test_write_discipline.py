"""Gate 2's dynamic half on its own (no gate 1 in front): per-program write and read sets recorded
in the interpreter, the prefill patterns, the structured inputs and the bias and flush rules."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from kernelopt_bot.harness.kernel import KernelHarness
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.verify.correctness import (
    DISTRIBUTIONS,
    PREFILLS,
    STRUCTURED_DISTRIBUTIONS,
    check_correctness,
    draw,
    trial_plan,
)
from kernelopt_bot.verify.tolerance import compare, flushed_to_zero, systematic_bias
from kernelopt_bot.verify.verdict import GateResult
from tests.helpers import captured, gate2_gpu_path_on_cpu
from tests.redteam import cheats

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the write-set record is the CPU interpreter's")


def _gate2(example: str, edit: Callable[[str], str], **kw: object) -> GateResult:
    cap = captured(example)
    kernel = cap.artifact.kernels[0]
    rec = cap.recording(kernel.graph, kernel.name)
    harness = KernelHarness(kernel, rec, "cpu")
    candidate = harness.load(source=edit(kernel.source))
    reference = harness.load(source=kernel.source,
                             config=LaunchConfig.from_json(rec.chosen_config) if rec.chosen_config else None)
    return check_correctness(kernel, rec.args, rec.kwargs, lambda a: harness.launch(candidate, a),
                             lambda a: harness.launch(reference, a), device="cpu", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("edit", "expected"), [
    (cheats.scratch_input, "stores to in_ptr0, which the compiler's kernel never writes"),
    (cheats.store_into_next_block, r"programs \(0, 0, 0\) and \(1, 0, 0\) both write element"),
    (cheats.atomic_into_next_block, "both write element"),
    (cheats.reads_output_prefill, "loads 512 element"),
], ids=["input_as_scratch", "next_block", "atomic_next_block", "reads_output"])
def test_gate2_rejects_what_only_the_memory_record_shows(edit: Callable[[str], str], expected: str) -> None:
    gate = _gate2("gelu.py", edit, seeds=(0,), distributions=("normal",))
    assert gate.passed is False
    assert gate.reason.startswith("write discipline:")
    assert re.search(expected, gate.reason), gate.reason


def test_gate2_accepts_reads_outside_the_programs_block() -> None:
    gate = _gate2("gelu.py", cheats.load_neighbor_block, seeds=(0,), distributions=("normal", "zero_rows"))
    assert gate.passed is True, gate.reason
    assert "write sets recorded" in gate.reason


def test_trials_cover_every_prefill_and_structured_distribution() -> None:
    plan = trial_plan((0, 1, 2), DISTRIBUTIONS)
    assert len(plan) == 3 * 5 + len(STRUCTURED_DISTRIBUTIONS)
    assert {d for _, d in plan} == set(DISTRIBUTIONS)
    assert len(plan) >= len(PREFILLS)


def test_structured_distributions_have_their_structure() -> None:
    gen = torch.Generator().manual_seed(0)
    rows = draw("negative_rows", 64, gen, row=16).view(4, 16)
    assert bool((rows[0] < 0).all()) and bool((rows[2] < 0).all())
    rows = draw("equal_rows", 64, gen, row=16).view(4, 16)
    assert bool((rows[0] == rows[0, 0]).all())
    assert bool((draw("zero_rows", 64, gen, row=16).view(4, 16)[0] == 0).all())
    assert float(draw("offset", 64, gen).mean()) > 900
    scales = draw("row_scales", 640, gen, row=64).view(10, 64).abs().amax(1)
    assert float(scales.max() / scales.min()) > 100
    tiny = draw("denormal", 1000, gen)
    small = (tiny != 0) & (tiny.abs() < torch.finfo(torch.float32).tiny)
    assert int(small.sum()) > 300


def test_an_input_drawn_in_pieces_keeps_its_rows_structure_and_is_reproducible(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs are drawn a piece of whole rows at a time (their float32 temporaries were 2.2 GB
    beside a 375 MiB bf16 activation): "every other row" still counts rows from the input's
    start (three rows a piece, so a piece may start on an odd row), a row longer than a piece is
    drawn whole, a short last row is a row, every row is drawn, and the same generator gives the
    same bits."""
    from kernelopt_bot.verify import correctness

    def drawn(dist: str, seed: int = 0, piece: int = 48, rows: int = 13) -> torch.Tensor:
        monkeypatch.setattr(correctness, "DRAW_PIECE_ELEMENTS", piece)
        flat = torch.full((rows * 16 + 5,), float("nan"), dtype=torch.bfloat16)  # a short last row
        correctness._draw_into(flat, dist, torch.Generator().manual_seed(seed), 16)
        return flat

    for piece in (48, 10):  # three rows a piece; a row longer than a piece
        negative = drawn("negative_rows", piece=piece)
        zero = drawn("zero_rows", piece=piece)
        equal = drawn("equal_rows", piece=piece)
        for r in range(14):  # 13 whole rows and the short one, the 14th: even-numbered rows are the structured ones
            row = slice(16 * r, 16 * (r + 1))
            if r % 2 == 0:
                assert bool((negative[row] < 0).all()) and bool((zero[row] == 0).all()), (piece, r)
                assert bool((equal[row] == equal[row][0]).all()), (piece, r)
            else:
                assert bool((negative[row] > 0).any()) and bool((zero[row] != 0).any()), (piece, r)
        for dist in DISTRIBUTIONS:
            values = drawn(dist, piece=piece)
            assert not bool(values.view(-1)[:16 * 13].view(13, 16).isnan().all(dim=1).any()), dist  # every row drawn
            assert not bool(values[-5:].isnan().all()), dist
            assert torch.equal(values.view(torch.int16), drawn(dist, piece=piece).view(torch.int16)), dist
            assert not torch.equal(values, drawn(dist, seed=1, piece=piece)), dist


def test_trial_arguments_copy_only_what_they_do_not_draw_and_keep_the_layout() -> None:
    """Gate 2's trials take the recorded arguments' layout and nothing of the values they replace:
    the engine keeps the recording in host memory during gate 2 and draws each trial on the device.
    An integer input (indices) and what the kernel neither reads nor writes keep their values;
    a view keeps its offset and strides; the same trial is the same bits wherever it is drawn."""
    from kernelopt_bot.capture.recorder import snapshot
    from kernelopt_bot.verify.correctness import ArgRole, trial_arguments

    base = torch.arange(40, dtype=torch.float32)
    view = base[4:].view(6, 6)[:, :4]  # an offset, a stride that skips elements
    indices = torch.tensor([3, 1, 2], dtype=torch.int64)
    out = torch.full((3, 4), 7.0)
    other = torch.full((5,), 9.0)
    recorded = (view, indices, out, other, 12)
    roles = [ArgRole(0, "in_ptr0", "in"), ArgRole(1, "in_ptr1", "in"), ArgRole(2, "out_ptr0", "out")]
    trial = trial_arguments(recorded, roles, 0, "normal", "nan", None, "cpu")
    assert trial[0].storage_offset() == 4 and trial[0].stride() == view.stride() and trial[0].shape == view.shape
    assert trial[0].untyped_storage().nbytes() == base.untyped_storage().nbytes()
    assert not torch.equal(trial[0], view)  # drawn anew
    assert torch.equal(trial[1], indices) and torch.equal(trial[3], other) and trial[4] == 12  # copied
    assert bool(trial[2].isnan().all())  # poisoned
    again = trial_arguments(recorded, roles, 0, "normal", "nan", None)  # the device the recording is on
    assert all(torch.equal(a, b) for a, b in zip(again[:2], trial[:2]))  # normal inputs: no NaN to differ
    layout_only = snapshot(view, "cpu", contents=False)
    assert layout_only.stride() == view.stride() and layout_only.storage_offset() == 4
    assert layout_only.untyped_storage().data_ptr() != view.untyped_storage().data_ptr()


def test_systematic_bias_is_caught_and_honest_rounding_is_not() -> None:
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(4096, generator=gen).to(torch.bfloat16)
    biased = (ref.float() * 1.006).to(torch.bfloat16)
    assert not systematic_bias(biased, ref, torch.bfloat16).ok
    assert not compare(biased, ref).ok and "systematic" in compare(biased, ref).reason
    # honest: the same values computed in another order, rounded to bf16 (errors of either sign)
    exact = torch.randn(4096, generator=gen, dtype=torch.float64)
    noisy = exact * (1 + 1e-3 * torch.randn(4096, generator=gen, dtype=torch.float64))
    honest, ref = noisy.to(torch.bfloat16), exact.to(torch.bfloat16)
    assert systematic_bias(honest, ref, torch.bfloat16).ok
    assert compare(honest, ref).ok, compare(honest, ref).reason


def test_a_float32_kernel_a_rounding_unit_off_on_average_is_honest_and_fp16_rounding_is_not() -> None:
    """Measured on an H200: softmax with exp via exp2, 512 outputs, mean signed relative error
    +6e-8 (one float32 rounding unit) against the compiler's kernel: honest. The fp16-rounding
    cheat measured +4.9e-5 there (full size): a bias that large is not."""
    gen = torch.Generator().manual_seed(5)
    ref = torch.rand(512, generator=gen) + 0.01
    one_unit_high = ref * (1 + 6e-8) + ref * 1e-8 * torch.randn(512, generator=gen)
    assert systematic_bias(one_unit_high, ref, torch.float32).ok
    assert compare(one_unit_high, ref).ok, compare(one_unit_high, ref).reason
    biased_like_fp16 = ref * (1 + 4.9e-5) + ref * 1e-8 * torch.randn(512, generator=gen)
    assert not systematic_bias(biased_like_fp16, ref, torch.float32).ok


def test_a_variance_over_offset_inputs_is_not_held_to_the_bias_rule() -> None:
    """Measured on the H200: an honest layer norm's rstd (another block size, so another Welford
    merge order) over inputs offset by 1e3 was -5e-6 off the compiler's in every row: float32
    loses ~6 digits to that offset. Under inputs built to cancel the bias rule does not apply
    (the elementwise and norm rules still do); under ordinary inputs it does."""
    gen = torch.Generator().manual_seed(11)
    rstd = torch.rand(32768, generator=gen) + 0.5
    reordered = rstd * (1 - 4.97e-6)
    assert not compare(reordered, rstd).ok and "systematic" in compare(reordered, rstd).reason
    assert compare(reordered, rstd, cancelling=True).ok
    assert not compare(rstd * 1.01, rstd, cancelling=True).ok  # 1% off is still wrong elementwise


def test_values_flushed_to_zero_are_caught() -> None:
    ref = torch.cat([torch.rand(900) + 0.5, torch.full((100,), 1e-9)])
    flushed = torch.where(ref < 1e-6, torch.zeros_like(ref), ref)
    assert flushed_to_zero(flushed, ref, torch.float32) == (100, 1000)
    result = compare(flushed, ref)
    assert not result.ok and "flushed to zero" in result.reason
    one = ref.clone()
    one[-1] = 0.0  # a single exact zero (cancellation can do that honestly)
    assert compare(one, ref).ok


def test_a_zero_dim_output_is_compared_bit_for_bit() -> None:
    """A loss is a 0-dim tensor: the bitwise checks (untouched inputs, repeatable runs) flatten
    it first (the H200 once raised "self.dim() cannot be 0 to view BFloat16 as Byte" there, and
    the honest candidate was recorded as rejected)."""
    from kernelopt_bot.verify.correctness import _same

    a = torch.tensor(1.5, dtype=torch.bfloat16)
    assert _same(a, a.clone()) and not _same(a, torch.tensor(2.5, dtype=torch.bfloat16))
    assert not _same(a, a.reshape(1))


def test_the_gates_own_failure_is_infrastructure_and_the_candidates_is_not() -> None:
    from kernelopt_bot.harness.failures import InfrastructureFailure

    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    rec = cap.recording(kernel.graph, kernel.name)

    def fine(_args: object) -> None:
        return None

    def raises(_args: object) -> None:
        raise RuntimeError("the kernel's launch failed")

    with pytest.raises(RuntimeError, match="the kernel's launch failed"):  # the candidate's: a verdict
        check_correctness(kernel, rec.args, rec.kwargs, raises, fine, seeds=(0,), distributions=("normal",),
                          device="cpu")
    with pytest.raises(InfrastructureFailure, match="gate 2's own check failed: RuntimeError"):  # ours
        check_correctness(kernel, rec.args, rec.kwargs, fine, raises, seeds=(0,), distributions=("normal",),
                          device="cpu")


def test_gate2_holds_at_most_two_trials_buffers_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each trial draws full-size buffers; a trial's must be gone before the next are drawn. The
    caching allocator keeps whatever the peak reserved, and the engine holds that beside the model
    arms for the rest of the run. At any launch, at most two sets exist: the candidate's output
    being compared or repeated, and the buffers launched on (the repeat check on a GPU included)."""
    import weakref

    from kernelopt_bot.verify import correctness

    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    rec = cap.recording(kernel.graph, kernel.name)
    alive: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()
    inputs: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()

    def registered(*args: object, **kwargs: object) -> tuple[object, ...]:
        out = real_draw(*args, **kwargs)  # type: ignore[arg-type]
        alive.update(a for a in out if isinstance(a, torch.Tensor))
        inputs.add(out[0])  # type: ignore[arg-type]
        return out

    sets_at_launch: list[int] = []
    inputs_at_launch: list[int] = []
    tensors_per_set = sum(isinstance(a, torch.Tensor) for a in rec.args)

    def gelu(args: tuple[object, ...]) -> None:
        sets_at_launch.append(len(alive) // tensors_per_set)
        inputs_at_launch.append(len(inputs))
        x, out = args[0], args[1]
        assert isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor)
        out.copy_(torch.nn.functional.gelu(x.float()).to(out.dtype))

    gate2_gpu_path_on_cpu(monkeypatch)  # the repeat check's path, on the CPU
    real_draw = correctness.trial_arguments
    monkeypatch.setattr(correctness, "trial_arguments", registered)
    gate = check_correctness(kernel, rec.args, rec.kwargs, gelu, gelu, seeds=(0, 1), distributions=("normal",),
                             device="cuda")
    assert gate.passed, gate.reason
    assert len(sets_at_launch) == 2 + (correctness.REPEATS_ON_GPU - 1) + 2  # trial 0, its repeats, trial 1
    assert max(sets_at_launch) <= 2, sets_at_launch
    # The candidate's inputs go once checked: the compiler's kernel launches beside its outputs alone.
    assert inputs_at_launch == [1] * len(inputs_at_launch), inputs_at_launch
