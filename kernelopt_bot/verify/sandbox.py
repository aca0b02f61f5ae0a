"""Run one job on untrusted kernel code in an isolated child process: no secrets, memory cap, deadline.

A job is a module-level function named by its import path plus a JSON-able payload. The child is
started by :func:`kernelopt_bot.harness.isolation.spawn_isolated` (allowlisted environment, own
namespaces where the machine allows, own process group), gets an address-space limit on the CPU
interpreter (CUDA maps far more virtual memory than it uses, so there it gets a cap on the
fraction of GPU memory instead), and its process group is killed at the deadline. A crash, a
hang, a CUDA error or an exception all come back as a :class:`SandboxOutcome` with ``ok=False``
and a reason; the tool itself never dies of a candidate. ``infrastructure`` says the failure was
ours (deadline, memory limit, a child that could not be started), not the job's.
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass
from typing import Any

from kernelopt_bot.errors import KerneloptError, one_line
from kernelopt_bot.harness.failures import InfrastructureFailure, is_out_of_memory
from kernelopt_bot.harness.isolation import Channel, describe_exit, spawn_isolated

SANDBOX_PROCESS = "kernelopt-sandbox"  # the children's name (isolation.processes_started counts by it)


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 300.0
    memory_mb: int = 16384  # address space on the CPU interpreter
    gpu_memory_fraction: float = 0.9


@dataclass
class SandboxOutcome:
    ok: bool
    value: Any = None
    reason: str = ""
    infrastructure: bool = False  # our deadline or memory limit, or a child we could not start


def serve_job(conn: Channel, job: str, payload: dict[str, Any], limits: SandboxLimits, device: str) -> None:
    """Child side: apply the limits, run ``job(payload)``, send ``(kind, value)`` back once."""
    import importlib

    try:
        if device != "cuda" and limits.memory_mb > 0:
            import resource

            cap = limits.memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        if device == "cuda":
            import torch

            torch.cuda.set_per_process_memory_fraction(limits.gpu_memory_fraction)
        module_name, _, fn_name = job.rpartition(".")
        fn = getattr(importlib.import_module(module_name), fn_name)
        reply: tuple[str, Any] = ("ok", fn(payload))
    except MemoryError:
        reply = ("limit", f"out of memory (limit {limits.memory_mb} MiB)")
    except BaseException as exc:  # noqa: BLE001 - every failure is a result
        last = traceback.format_exc().strip().splitlines()[-1]
        kind = "limit" if is_out_of_memory(exc) or isinstance(exc, InfrastructureFailure) else "error"
        reply = (kind, f"{one_line(exc)} [{last[:300]}]")
    try:
        conn.send(reply)
    except Exception as exc:  # noqa: BLE001 - a value that cannot be pickled
        conn.send(("error", f"result could not be sent back: {one_line(exc)}"))
    conn.close()


def run_sandboxed(job: str, payload: dict[str, Any], *, device: str,
                  limits: SandboxLimits | None = None) -> SandboxOutcome:
    """Run ``job(payload)`` in a fresh isolated child process; never raises for the job's failures."""
    limits = limits or SandboxLimits()
    try:
        child = spawn_isolated("kernelopt_bot.verify.sandbox.serve_job", job, payload, limits, device,
                               extra_env={"KERNELOPT_DEVICE": device}, name=SANDBOX_PROCESS)
    except (OSError, KerneloptError) as exc:
        return SandboxOutcome(False, reason=f"sandbox could not be started: {one_line(exc)}", infrastructure=True)
    try:
        if not child.conn.poll(limits.timeout_s):
            child.kill()
            return SandboxOutcome(False, reason=f"timed out after {limits.timeout_s:.0f} s (our deadline); killed",
                                  infrastructure=True)
        try:
            kind, value = child.conn.recv()
        except (EOFError, OSError):
            code = child.wait(10)
            return SandboxOutcome(False, reason=f"crashed ({describe_exit(code)})")
        child.wait(30)
        if kind == "ok":
            return SandboxOutcome(True, value)
        return SandboxOutcome(False, reason=str(value), infrastructure=kind == "limit")
    finally:
        with contextlib.suppress(Exception):
            child.close()
