"""On a GPU, ``hide_host`` keeps a call's Python out of its GPU time: the sleep kernel covers the
host while it queues the call, so a call that spends 2 ms in Python before a tiny kernel measures
as the kernel, and without it as the host's wait. Run on the H200 by scripts/gpu_check.sh."""

from __future__ import annotations

import time

import pytest
import torch

from kernelopt_bot.harness.timing import time_cuda

pytestmark = pytest.mark.gpu


def test_hide_host_measures_the_device_not_the_python_before_it() -> None:
    x = torch.randn(1 << 20, device="cuda")

    def slow_host() -> None:
        deadline = time.perf_counter() + 0.002
        while time.perf_counter() < deadline:  # 2 ms of Python before the kernel is queued
            pass
        x.mul_(1.0)

    kernel_only = time_cuda(lambda: x.mul_(1.0), reps=20).median_ms
    exposed = time_cuda(slow_host, reps=20).median_ms
    hidden = time_cuda(slow_host, reps=20, hide_host=True).median_ms
    assert kernel_only is not None and exposed is not None and hidden is not None
    print(f"TIMING kernel {kernel_only:.4f} ms, host exposed {exposed:.4f} ms, host hidden {hidden:.4f} ms")
    assert exposed > 1.5  # the host's 2 ms show up between the events (the flush covers only part)
    assert hidden < kernel_only * 3 + 0.05  # the device's own time, give or take the launch


def test_recordings_of_kernels_not_searched_leave_the_gpu() -> None:
    """Before the search, the recorded arguments of every kernel but the searched ones move to host
    memory (a training step records all of forward and backward)."""
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.targets import load_target
    from kernelopt_bot.verify.cascade import Cascade
    from tests.helpers import EXAMPLES

    cap = capture(load_target(str(EXAMPLES / "mlp.py"), "cuda", "fp32", train=True))
    keys = list(cap.recordings)
    assert len(keys) >= 2
    kept = {keys[0]}
    with Cascade(cap) as cascade:
        cascade.keep_on_device(kept)
    for key, recording in cap.recordings.items():
        tensors = [a for a in recording.args if isinstance(a, torch.Tensor)]
        assert all(a.is_cuda == (key in kept) for a in tensors), key
