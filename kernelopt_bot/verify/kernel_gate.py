"""Gate 2 at kernel level, on a :class:`~kernelopt_bot.harness.kernel_service.KernelBench`.

The harness compiles, launches and times kernels; this module is the gate that judges a candidate
with them: compile it, run it and the compiler's kernel on the recorded arguments with every seed
and input distribution (:func:`~kernelopt_bot.verify.correctness.check_correctness`), and time both
alone once it passed. The sandbox's kernel job runs it in a child process for untrusted source; the
engine runs it in-process for its trusted candidates (:func:`judge_in_engine`), where an
out-of-memory error is retried once after freeing and then reported as ours.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.harness.failures import InfrastructureFailure, OutOfWallTime, is_out_of_memory
from kernelopt_bot.harness.kernel_service import KernelBench, KernelService, late_text
from kernelopt_bot.harness.memory import free_memory
from kernelopt_bot.harness.timing import StepClock
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.verify.correctness import DEFAULT_SEEDS, DISTRIBUTIONS, check_correctness

GATE2_REPS = 100  # kernel-level timing of a candidate that passed gate 2 (CUDA), for gate 4


def judge_kernel(bench: KernelBench, source: str | None, config: LaunchConfig | None, *,
                 seeds: tuple[int, ...] = DEFAULT_SEEDS, distributions: tuple[str, ...] = DISTRIBUTIONS,
                 time_it: bool = False, reps: int = GATE2_REPS, steps: StepClock,
                 compile_deadline_s: float | None = None, ends_at: float | None = None,
                 place: Callable[[], KernelBench] | None = None) -> dict[str, Any]:
    """Compile the candidate, run gate 2 against the compiler's kernel, and (``time_it``, on
    CUDA, after gate 2 passed) time candidate and original alone. Gate 2 needs only the recorded
    arguments' layout: they may lie in host memory, its trials are drawn on ``bench.device``.
    Timing needs them on the device: ``place`` returns the bench with them there (default: this
    bench, its arguments moved). The result is plain data:
    ``compiled``, ``reason`` (when it did not), ``correctness`` (GateResult JSON), ``bytes``,
    ``candidate_ms``, ``candidate_min_ms``, ``original_ms``, ``original_min_ms``, ``seconds``;
    ``infrastructure`` instead of ``correctness`` where the run's wall deadline (``ends_at``,
    ``time.time()``) passed during gate 2 (plain data, so a sandbox returns it as the engine does).

    Raises :class:`InfrastructureFailure` when the candidate was still compiling at
    ``compile_deadline_s`` (ours, not the candidate's); exceptions of the runs propagate."""
    compiled = bench.compile_all([(source, config)], deadline_s=compile_deadline_s, threads=1)[0]
    if isinstance(compiled, str) and compile_deadline_s is not None and compiled == late_text(compile_deadline_s):
        raise InfrastructureFailure(f"candidate {compiled} (our deadline)")
    if isinstance(compiled, str):
        return {"compiled": False, "reason": f"does not compile: {compiled}"}
    reference = bench.original()
    steps.done("compile")
    harness = bench.harness

    def reference_at_candidate_config() -> Any:
        """The compiler's source pinned to the candidate's launch config (gate 2's measure of the
        compiler's own spread on inputs that overflow), compiled when first asked for, within the
        candidate's compile deadline and the run's. None where it does not compile; our deadline
        and running out of memory are raised (ours, not the candidate's)."""
        if config is None:
            return None
        limits = [x for x in (compile_deadline_s, None if ends_at is None else max(1.0, ends_at - time.time()))
                  if x is not None]
        deadline = min(limits) if limits else None
        pinned = bench.compile_all([(None, config)], deadline_s=deadline, threads=1)[0]
        if isinstance(pinned, str) and deadline is not None and pinned == late_text(deadline):
            raise InfrastructureFailure(f"the compiler's kernel at the candidate's config {pinned} (our deadline)")
        if isinstance(pinned, str) and is_out_of_memory(pinned):
            raise torch.cuda.OutOfMemoryError(pinned)
        return None if isinstance(pinned, str) else (lambda a: harness.launch(pinned, a))
    with warnings.catch_warnings():
        # Special-value inputs make the interpreter's numpy warn; the comparison judges the results.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            gate = check_correctness(
                bench.kernel, bench.recording.args, bench.recording.kwargs,
                lambda a: harness.launch(compiled, a), lambda a: harness.launch(reference, a),
                seeds=seeds, distributions=distributions, device=bench.device, ends_at=ends_at,
                reference_at_candidate_config=reference_at_candidate_config,
            )
        except OutOfWallTime as exc:
            steps.done("correctness")
            return {"compiled": True, "infrastructure": str(exc), "seconds": steps.seconds}
    steps.done("correctness")
    result: dict[str, Any] = {"compiled": True, "correctness": gate.to_json(), "bytes": harness.bytes_moved()}
    if gate.passed and time_it and bench.device == "cuda":
        timed = (place or bench.on_device)().harness
        timing = timed.time_kernel(compiled, reps=reps)
        result["candidate_ms"] = timing.median_ms
        # The fastest call, for gate 4's physical floor: other work on the GPU (the candidate's
        # model arm compiles and warms up meanwhile) can only slow calls down, so the minimum is
        # the check that contention cannot loosen.
        result["candidate_min_ms"] = min(timing.samples_ms) if timing.samples_ms else None
        original = timed.time_kernel(reference, reps=reps)
        result["original_ms"] = original.median_ms
        result["original_min_ms"] = min(original.samples_ms) if original.samples_ms else None  # gate 4's saving
        steps.done("timing")
    result["seconds"] = steps.seconds
    return result


def judge_in_engine(service: KernelService, kernel: TritonKernel, source: str | None, config: LaunchConfig | None,
                    *, seeds: tuple[int, ...] = DEFAULT_SEEDS, distributions: tuple[str, ...] = DISTRIBUTIONS,
                    time_it: bool = False, compile_deadline_s: float | None = None,
                    ends_at: float | None = None) -> dict[str, Any]:
    """Gate 2 for a trusted candidate in the engine: the sandbox's kernel job's result, computed
    on the service's bench for ``kernel`` (compiled variants kept), its recorded arguments in host
    memory during the trials and back on the device to time it."""

    def attempt() -> dict[str, Any]:
        result = judge_kernel(service.bench_on_host(kernel), source, config, seeds=seeds, distributions=distributions,
                              time_it=time_it, steps=StepClock(), compile_deadline_s=compile_deadline_s,
                              ends_at=ends_at, place=lambda: service.bench(kernel))
        if not result.get("compiled") and is_out_of_memory(str(result.get("reason", ""))):
            raise torch.cuda.OutOfMemoryError(result["reason"])
        return result

    try:
        return service.retrying_memory(attempt)
    finally:
        # The trials' buffers and comparisons (several copies of the kernel's arguments) go back
        # to the GPU: the model arms and the sandbox share it with the engine's search.
        free_memory(service.device)
