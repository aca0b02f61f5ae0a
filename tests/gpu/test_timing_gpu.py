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


def test_one_kernels_recorded_arguments_are_on_the_gpu_at_a_time() -> None:
    """Recordings are made in host memory (a training step records all of forward and backward);
    the kernel the search works on has its arguments on the GPU, and gives them back when another
    kernel's are asked for; a kernel asked for again (its bench kept) gets them back. The sandbox's
    copy of them is saved from host memory and loaded onto the GPU with their layout."""
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.targets import load_target
    from kernelopt_bot.verify.cascade import Cascade
    from tests.helpers import EXAMPLES

    cap = capture(load_target(str(EXAMPLES / "mlp.py"), "cuda", "fp32", train=True))
    keys = list(cap.recordings)
    assert len(keys) >= 2

    def on_gpu() -> set[tuple[int, str]]:
        return {key for key, rec in cap.recordings.items()
                if any(isinstance(a, torch.Tensor) and a.is_cuda for a in rec.args)}

    assert on_gpu() == set()
    first, second = (cap.artifact.kernel(f"g{g}:{n}") for g, n in keys[:2])
    host = cap.recording(*keys[0]).args
    with Cascade(cap) as cascade:
        timed = cascade.kernels.time_variants(first, [(None, None)], reps=5)
        assert timed.original_ms is not None and on_gpu() == {keys[0]}
        cascade.kernels.time_variants(second, [(None, None)], reps=5)
        assert on_gpu() == {keys[1]}
        back = cap.recording(*keys[0]).args  # the host copy came back, not a copy of the device's
        assert len(back) == len(host) and all(a is b for a, b in zip(back, host))
        again = cascade.kernels.time_variants(first, [(None, None)], reps=5)
        assert again.original_ms is not None and on_gpu() == {keys[0]}
        saved = torch.load(cascade._args_path(second), map_location="cuda", weights_only=True)
        recorded = cap.recording(*keys[1]).args
        assert [tuple(a.stride()) for a in saved if isinstance(a, torch.Tensor)] == \
            [tuple(a.stride()) for a in recorded if isinstance(a, torch.Tensor)]
        cascade.release_search_memory()
        assert on_gpu() == set()
