"""A trusted variant that poisons the CUDA context ends the engine's work with WorkerPoisoned
(the supervisor then replaces the engine and skips the variant: tests/test_supervisor.py).

Run on the H200 by scripts/gpu_check.sh; skipped without CUDA. The poisoning runs in a child
process: a sticky CUDA error would take this test process's context with it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent('''
    import re
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.harness.failures import WorkerPoisoned
    from kernelopt_bot.harness.kernel_service import KernelService
    from kernelopt_bot.harness.work_watch import WorkWatch
    from kernelopt_bot.targets import load_target
    from tests.helpers import EXAMPLES

    cap = capture(load_target(str(EXAMPLES / "gelu.py"), "cuda", "fp32"))
    kernel = cap.artifact.kernels[0]
    # Every store lands 64 GiB past its buffer: an illegal address, which poisons the context.
    far = re.sub(r"tl\\.store\\((\\w+) \\+ ", r"tl.store(\\1 + 17179869184 + ", kernel.source, count=1)
    assert far != kernel.source
    sent = []
    service = KernelService("cuda", cap.recording, WorkWatch(sent.append, "cuda"))
    healthy = service.time_variants(kernel, [(None, None)], reps=5)
    print("HEALTHY", healthy.times)
    try:
        service.time_variants(kernel, [(far, None)], reps=5)
    except WorkerPoisoned as exc:
        print("POISONED", exc.label, "|", exc.reason, "|", " ".join(k for k, _ in sent))
    else:
        print("NOT POISONED")
''')


def test_a_variant_that_poisons_the_device_ends_the_engines_work() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert "HEALTHY [" in out, out[-3000:]
    line = next((x for x in out.splitlines() if x.startswith(("POISONED", "NOT POISONED"))), out[-3000:])
    print(line)
    assert line.startswith("POISONED") and "illegal" in line.lower(), line
    # The healthy variant's watched pieces (a probe, then the full repetitions) each ended; the
    # poisoned variant's first piece began and never ended.
    events = line.rsplit("|", 1)[1].split()
    assert events[-1] == "begin" and events[:-1] and events[:-1] == ["begin", "end"] * (len(events) // 2), line
