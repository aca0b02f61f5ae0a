"""Jobs that run inside the sandbox on candidate code (kernel level: compile, gate 2, timing).

Everything here executes in a child process started by :func:`sandbox.run_sandboxed`; the payload
is plain data and the result is plain data, so nothing a candidate does can reach the parent.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from kernelopt_bot.errors import one_line
from kernelopt_bot.verify.result import StepClock


def kernel_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Compile the candidate, run gate 2, and on CUDA time candidate and original alone.

    Payload: ``device``, ``kernel`` (TritonKernel JSON), ``args_path`` (torch.save of the recorded
    arguments), ``kwargs``, ``source`` and/or ``config`` (LaunchConfig JSON), ``seeds``,
    ``distributions``, ``time`` (bool), ``reps``.
    """
    steps = StepClock(sent_at=payload.get("sent_at"))
    device = payload["device"]
    from kernelopt_bot.compile.capture import KernelRecording, prepare_device

    prepare_device(device)
    import warnings

    import torch

    # Special-value inputs make the interpreter's numpy warn; the comparison judges the results.
    warnings.simplefilter("ignore", RuntimeWarning)

    from kernelopt_bot.compile.artifact import TritonKernel
    from kernelopt_bot.harness.kernel import KernelHarness
    from kernelopt_bot.stitch.pack import LaunchConfig
    from kernelopt_bot.verify.correctness import DEFAULT_SEEDS, DISTRIBUTIONS, check_correctness

    kernel = TritonKernel.from_json(payload["kernel"])
    args = tuple(torch.load(payload["args_path"], map_location=device, weights_only=True))
    recording = KernelRecording(kernel.graph, kernel.name, args, dict(payload.get("kwargs") or {}))
    harness = KernelHarness(kernel, recording, device)
    config = LaunchConfig.from_json(payload["config"]) if payload.get("config") else None
    source = payload.get("source")
    steps.done("load")

    try:
        candidate = harness.load(source=source if source is not None else kernel.source, config=config)
        if device == "cuda" and hasattr(candidate, "precompile"):
            candidate.precompile()
    except Exception as exc:  # noqa: BLE001 - a candidate that does not compile is a result
        return {"compiled": False, "reason": f"does not compile: {one_line(exc)}"}
    reference = _load_original(harness, kernel.source, payload)
    steps.done("compile")

    gate = check_correctness(
        kernel, args, recording.kwargs,
        lambda a: harness.launch(candidate, a), lambda a: harness.launch(reference, a),
        seeds=tuple(payload.get("seeds") or DEFAULT_SEEDS),
        distributions=tuple(payload.get("distributions") or DISTRIBUTIONS), device=device,
    )
    steps.done("correctness")
    result: dict[str, Any] = {"compiled": True, "correctness": gate.to_json(), "bytes": harness.bytes_moved()}
    if gate.passed and payload.get("time") and device == "cuda":
        reps = int(payload.get("reps") or 100)
        timing = harness.time_kernel(candidate, reps=reps)
        result["candidate_ms"] = timing.median_ms
        # The fastest call, for gate 4's physical floor: other work on the GPU (the candidate's
        # model arm compiles and warms up meanwhile) can only slow calls down, so the minimum is
        # the check that contention cannot loosen.
        result["candidate_min_ms"] = min(timing.samples_ms) if timing.samples_ms else None
        result["original_ms"] = harness.time_kernel(reference, reps=reps).median_ms
        steps.done("timing")
    result["seconds"] = steps.seconds
    return result


def timing_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Time the compiler's kernel and a batch of variants alone (kernel level, CUDA only).

    Payload: ``device``, ``kernel``, ``args_path``, ``kwargs``, ``variants`` (a list of
    ``{"source": str | None, "config": LaunchConfig JSON | None}``), ``reps``. Variants are loaded
    (compiled) first, then timed one at a time; a variant that fails to compile or run gets an
    error string instead of a time. Results: ``original_ms``, ``times`` (list of float | str).
    """
    steps = StepClock(sent_at=payload.get("sent_at"))
    device = payload["device"]
    from kernelopt_bot.compile.capture import KernelRecording, prepare_device

    prepare_device(device)
    import torch

    from kernelopt_bot.compile.artifact import TritonKernel
    from kernelopt_bot.harness.kernel import KernelHarness
    from kernelopt_bot.stitch.pack import LaunchConfig

    kernel = TritonKernel.from_json(payload["kernel"])
    args = tuple(torch.load(payload["args_path"], map_location=device, weights_only=True))
    harness = KernelHarness(kernel, KernelRecording(kernel.graph, kernel.name, args,
                                                    dict(payload.get("kwargs") or {})), device)
    reps = int(payload.get("reps") or 50)
    steps.done("load")
    original = harness.time_kernel(_load_original(harness, kernel.source, payload), reps=reps).median_ms
    steps.done("original")
    variants = payload.get("variants") or []

    def compile_variant(variant: dict[str, Any]) -> Any:
        """Load and compile one variant; the error text if it does not compile."""
        config = LaunchConfig.from_json(variant["config"]) if variant.get("config") else None
        try:
            kernel_obj = harness.load(source=variant.get("source") or kernel.source, config=config)
            if device == "cuda" and hasattr(kernel_obj, "precompile"):
                kernel_obj.precompile()
            return kernel_obj
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result, not a crash
            return one_line(exc)

    # Compile on all CPU cores at once (Triton's compiler releases the GIL), time one at a time.
    # A multi-GPU pool gives each worker its share of the cores (KERNELOPT_COMPILE_THREADS).
    # A variant still compiling at the deadline is left behind (the sandbox process exits without
    # waiting for it): one pathological config must not stall the whole search. Its thread may
    # still compile while the others are timed; timing is per call on the GPU, so that costs
    # CPU, not accuracy.
    cores = int(os.environ.get("KERNELOPT_COMPILE_THREADS") or os.cpu_count() or 1)
    deadline_s = float(payload.get("compile_deadline_s") or COMPILE_DEADLINE_S)
    deadline_at = time.monotonic() + deadline_s
    late = f"not compiled within {deadline_s:.0f} s; skipped"
    compiled = _compile_until(compile_variant, variants, max(1, min(len(variants), cores)), deadline_at, late)
    # Whatever failed alongside others is compiled again alone (a compiler that is not thread-safe
    # costs time, never a variant), while the deadline lasts.
    again = [i for i, c in enumerate(compiled) if isinstance(c, str) and c != late]
    if again:
        retried = _compile_until(compile_variant, [variants[i] for i in again], 1, deadline_at, late)
        for i, value in zip(again, retried):
            compiled[i] = value if value != late else compiled[i]
    steps.done("compile")
    times: list[float | str | None] = []
    for kernel_obj in compiled:
        if isinstance(kernel_obj, str):
            times.append(kernel_obj)
            continue
        try:
            times.append(_time_variant(harness, kernel_obj, original, reps))
        except Exception as exc:  # noqa: BLE001
            times.append(one_line(exc))
    steps.done("timing")
    return {"original_ms": original, "times": times, "seconds": steps.seconds}


COMPILE_DEADLINE_S = 30.0  # per timing job, for compiling all its variants in parallel
PROBE_REPS = 3  # a first look at a variant before it gets the full repetitions
SLOW_FACTOR = 1.5  # a variant this much slower than the original is not worth the full timing


def _compile_until(compile_one: Any, variants: list[dict[str, Any]], threads: int, deadline_at: float,
                   late: str) -> list[Any]:
    """Compile ``variants`` on ``threads`` threads; what is not done by ``deadline_at``
    (:func:`time.monotonic`) gets the ``late`` text instead of a kernel."""
    pool = ThreadPoolExecutor(max_workers=threads)
    futures = [pool.submit(compile_one, v) for v in variants]
    wait(futures, timeout=max(0.0, deadline_at - time.monotonic()))
    pool.shutdown(wait=False, cancel_futures=True)
    return [f.result() if f.done() and not f.cancelled() else late for f in futures]


def _load_original(harness: Any, source: str, payload: dict[str, Any]) -> Any:
    """The compiler's kernel pinned to the launch config its autotuning chose in the model
    (``original_config``): loaded without it, the source autotunes again in every job (seconds:
    every config compiled and benchmarked). Unpinned if that config is unknown or cannot be pinned."""
    from kernelopt_bot.stitch.pack import LaunchConfig

    if payload.get("original_config"):
        try:
            return harness.load(source=source, config=LaunchConfig.from_json(payload["original_config"]))
        except Exception:  # noqa: BLE001 - fall back to the compiler's own autotuning
            pass
    return harness.load(source=source)


def _time_variant(harness: Any, kernel_obj: Any, original_ms: float | None, reps: int) -> float | None:
    """Median time of one variant; a variant far slower than the original after a short probe
    keeps the probe's median (it is out of the running either way, and spilling configs can take
    milliseconds a call)."""
    probe = harness.time_kernel(kernel_obj, reps=PROBE_REPS, warmup=1).median_ms
    if probe is not None and original_ms and probe > SLOW_FACTOR * original_ms:
        return probe
    return harness.time_kernel(kernel_obj, reps=reps).median_ms


def environment_names(payload: dict[str, Any]) -> list[str]:
    """The environment variable names a sandboxed job sees (for audits: no secret may be among them)."""
    return sorted(os.environ)
