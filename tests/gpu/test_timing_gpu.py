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
