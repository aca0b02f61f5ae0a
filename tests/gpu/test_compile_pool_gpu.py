"""On a GPU the engine's variants compile first in the compile process (into the Triton cache),
then load in the engine: the variants come back as kernels that run and time.

Run on the H200 by scripts/gpu_check.sh; skipped without CUDA."""

from __future__ import annotations

import time

import pytest

from kernelopt_bot.capture.recorder import capture
from kernelopt_bot.harness.kernel_service import KernelService
from kernelopt_bot.search.space import sample
from kernelopt_bot.targets import load_target
from tests.helpers import EXAMPLES

pytestmark = pytest.mark.gpu


def test_variants_compile_in_the_compile_process_and_time_in_the_engine() -> None:
    cap = capture(load_target(str(EXAMPLES / "softmax.py"), "cuda", "fp32"))
    kernel = cap.artifact.kernels[0]
    service = KernelService("cuda", cap.recording)
    try:
        assert service.pool is not None
        configs = sample(kernel, 24, seed=7)
        start = time.monotonic()
        timed = service.time_variants(kernel, [(None, c) for c in configs], reps=10)
        seconds = time.monotonic() - start
        print(f"POOL {len(configs)} variants in {seconds:.1f} s; steps {timed.seconds}; "
              f"compile processes started {service.pool.started}, killed {service.pool.killed}")
        assert service.pool.started == 1 and service.pool.killed == 0
        floats = [t for t in timed.times if isinstance(t, float)]
        assert len(floats) >= len(configs) // 2, timed.times
        errors = [t for t in timed.times if isinstance(t, str)]
        assert not any("GPU backend" in e for e in errors), errors
    finally:
        service.close()
