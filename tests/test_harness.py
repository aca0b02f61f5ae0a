"""The per-kernel harness: a kernel alone, on the arguments it really got in the model."""

from __future__ import annotations

import pytest
import torch

from kernelopt_bot.harness.kernel import KernelHarness
from kernelopt_bot.pack.format import LaunchConfig
from tests.helpers import bump_constant, captured


@pytest.fixture(scope="module")
def harness() -> KernelHarness:
    cap = captured("linear_epilogue.py")
    kernel = cap.artifact.kernels[0]
    return KernelHarness(kernel, cap.recording(kernel.graph, kernel.name), cap.target.device)


def _model_output() -> torch.Tensor:
    cap = captured("linear_epilogue.py")
    return cap.target.eager(*cap.inputs)


def test_recorded_arguments_reproduce_the_model_output(harness: KernelHarness) -> None:
    """The kernel writes the model's output in place (in_out_ptr1): alone it must give the same."""
    run = harness.run()
    torch.testing.assert_close(run.args[0], _model_output())
    assert harness.recording.calls == 1
    assert harness.recording.args[-2:] == (8, 32)


def test_recorded_arguments_are_not_mutated_by_runs(harness: KernelHarness) -> None:
    before = harness.recording.args[0].clone()
    harness.run()
    harness.run()
    assert torch.equal(harness.recording.args[0], before)


def test_another_launch_config_gives_the_same_result(harness: KernelHarness) -> None:
    run = harness.run(config=LaunchConfig({"XBLOCK": 4}, num_warps=2, num_stages=1))
    torch.testing.assert_close(run.args[0], _model_output())


def test_another_source_runs(harness: KernelHarness) -> None:
    changed = bump_constant(harness.kernel.source, "tl.full([1, 1], 1.0, tl.float32)",
                            "tl.full([1, 1], 5.0, tl.float32)")
    run = harness.run(source=changed)
    assert not torch.allclose(run.args[0], _model_output(), atol=1e-3)


def test_snapshots_keep_storage_layout() -> None:
    from kernelopt_bot.capture.recorder import snapshot

    base = torch.arange(64.0).reshape(8, 8)
    view = base[2:, 1::2]
    copy = snapshot(view)
    assert copy.stride() == view.stride() and copy.storage_offset() == view.storage_offset()
    assert torch.equal(copy, view) and copy.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()


def test_timing_without_gpu_is_not_a_number(harness: KernelHarness) -> None:
    if harness.device == "cuda":
        timing = harness.time(reps=10)
        assert timing.median_ms is not None and timing.median_ms > 0
    else:
        timing = harness.time()
        assert timing.median_ms is None and not timing.measured and "not measured" in timing.reason


def test_bytes_moved_counts_in_out_twice(harness: KernelHarness) -> None:
    rows, cols = 8, 32
    # in_out_ptr1 (rows x cols, read and written) + LayerNorm weight and bias (cols each), fp32
    assert harness.bytes_moved() == 4 * (2 * rows * cols + 2 * cols)


def test_timing_copies_only_what_the_kernel_reads_and_writes(harness: KernelHarness) -> None:
    """A model that fills the GPU has no room for a copy of every argument: timing shares what
    the kernel only reads, and copies (and restores) what it reads and writes."""
    args = harness.timing_args()
    params = harness.kernel.params
    for i, (arg, recorded) in enumerate(zip(args, harness.recording.args)):
        if not isinstance(recorded, torch.Tensor):
            continue
        if params[i].startswith("in_out_ptr"):
            assert arg is not recorded and arg.untyped_storage().data_ptr() != recorded.untyped_storage().data_ptr()
        else:
            assert arg is recorded, params[i]
    assert any(p.startswith("in_out_ptr") for p in params)
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in harness.recording.args]
    harness.time(reps=3)
    harness.time(config=LaunchConfig({"XBLOCK": 4}, num_warps=2, num_stages=1), reps=3)
    for now, then in zip(harness.recording.args, before):
        if isinstance(now, torch.Tensor):
            assert torch.equal(now, then)


def test_a_harness_refuses_arguments_on_another_device() -> None:
    """The capture keeps recorded arguments in host memory; a GPU harness given them unmoved would
    fail at launch with "CUDA driver error: invalid argument" (the H100, 12-06), so it says what to do."""
    cap = captured("linear_epilogue.py")
    kernel = cap.artifact.kernels[0]
    recording = cap.recording(kernel.graph, kernel.name)
    unplaced = KernelHarness(kernel, recording, "cuda")
    assert unplaced.bytes_moved() > 0  # what reads only sizes (the profile) needs no move
    for use in (unplaced.run, unplaced.time):
        with pytest.raises(ValueError, match=r"recording.on\('cuda'\)"):
            use()
    moved = recording.on("cpu")  # already there: the same tensors, nothing copied
    assert all(a is b for a, b in zip(moved.args, recording.args, strict=True))
