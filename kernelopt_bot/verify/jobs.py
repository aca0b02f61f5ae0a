"""Jobs that run inside the sandbox on untrusted candidate code (kernel level: compile, gate 2, timing).

Everything here executes in a child process started by :func:`sandbox.run_sandboxed`; the payload
is plain data and the result is plain data, so nothing a candidate does can reach the parent. The
work itself is :class:`kernelopt_bot.harness.kernel_service.KernelBench`'s, the same code the
engine runs in-process for trusted candidates.
"""

from __future__ import annotations

from typing import Any

from kernelopt_bot.harness.timing import StepClock


def _bench(payload: dict[str, Any]) -> Any:
    """The payload's kernel and recorded arguments (loaded from ``args_path``) on a
    :class:`~kernelopt_bot.harness.kernel_service.KernelBench`, interpreter mode set up first."""
    device = payload["device"]
    from kernelopt_bot.device import prepare_device

    prepare_device(device)
    import torch

    from kernelopt_bot.capture.artifact import TritonKernel
    from kernelopt_bot.capture.recorder import KernelRecording
    from kernelopt_bot.harness.kernel_service import KernelBench

    kernel = TritonKernel.from_json(payload["kernel"])
    # Into host memory: gate 2 needs only their layout and draws its trials on the device; what
    # times the kernel moves them there (KernelBench.on_device).
    args = tuple(torch.load(payload["args_path"], map_location="cpu", weights_only=True))
    recording = KernelRecording(kernel.graph, kernel.name, args, dict(payload.get("kwargs") or {}),
                                chosen_config=payload.get("chosen_config"))
    return KernelBench(kernel, recording, device)


def kernel_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Compile the candidate, run gate 2, and on CUDA time candidate and original alone
    (:func:`kernelopt_bot.verify.kernel_gate.judge_kernel`).

    Payload: ``device``, ``kernel`` (TritonKernel JSON), ``args_path`` (torch.save of the recorded
    arguments), ``kwargs``, ``source`` and/or ``config`` (LaunchConfig JSON), ``seeds``,
    ``distributions``, ``time`` (bool), ``reps``, ``chosen_config``, ``ends_at`` (the run's wall
    deadline, ``time.time()``: no trial of gate 2 starts past it).
    """
    steps = StepClock(sent_at=payload.get("sent_at"))
    bench = _bench(payload)
    from kernelopt_bot.pack.format import LaunchConfig
    from kernelopt_bot.verify.correctness import DEFAULT_SEEDS, DISTRIBUTIONS
    from kernelopt_bot.verify.kernel_gate import GATE2_REPS, judge_kernel

    config = LaunchConfig.from_json(payload["config"]) if payload.get("config") else None
    steps.done("load")
    return judge_kernel(bench, payload.get("source"), config,
                       seeds=tuple(payload.get("seeds") or DEFAULT_SEEDS),
                       distributions=tuple(payload.get("distributions") or DISTRIBUTIONS),
                       time_it=bool(payload.get("time")), reps=int(payload.get("reps") or GATE2_REPS), steps=steps,
                       ends_at=payload.get("ends_at"))


def timing_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Time the compiler's kernel and a batch of variants alone (kernel level, CUDA only;
    :meth:`KernelBench.time_variants <kernelopt_bot.harness.kernel_service.KernelBench.time_variants>`).

    Payload: ``device``, ``kernel``, ``args_path``, ``kwargs``, ``variants`` (a list of
    ``{"source": str | None, "config": LaunchConfig JSON | None}``), ``reps``,
    ``compile_deadline_s``, ``chosen_config``. A variant that fails to compile or run gets an
    error string instead of a time. Results: ``original_ms``, ``times`` (list of float | str).
    A variant still compiling at the deadline is left behind: the sandbox process exits without
    waiting for it.
    """
    steps = StepClock(sent_at=payload.get("sent_at"))
    bench = _bench(payload).on_device()
    from kernelopt_bot.harness.kernel_service import COMPILE_DEADLINE_S, compile_threads
    from kernelopt_bot.pack.format import LaunchConfig

    reps = int(payload.get("reps") or 50)
    variants = [(v.get("source") or None, LaunchConfig.from_json(v["config"]) if v.get("config") else None)
                for v in payload.get("variants") or []]
    steps.done("load")
    original, times = bench.time_variants(
        variants, reps=reps, deadline_s=float(payload.get("compile_deadline_s") or COMPILE_DEADLINE_S),
        threads=compile_threads(), steps=steps)
    return {"original_ms": original, "times": times, "seconds": steps.seconds}

