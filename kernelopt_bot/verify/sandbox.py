"""Run one job on untrusted kernel code in a child process: scrubbed env, memory cap, deadline.

A job is a module-level function named by its import path plus a JSON-able payload. The child
inherits no secrets (:mod:`kernelopt_bot.harness.isolation`), gets an address-space limit on the
CPU interpreter (CUDA maps far more virtual memory than it uses, so there it gets a cap on the
fraction of GPU memory instead), and is killed at the deadline. A crash, a hang, a CUDA error or an
exception all come back as a :class:`SandboxOutcome` with ``ok=False`` and a reason; the tool itself
never dies of a candidate.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.isolation import scrubbed_environ


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


def _child(job: str, payload: dict[str, Any], limits: SandboxLimits, conn: Connection) -> None:
    try:
        if os.environ.get("KERNELOPT_DEVICE") != "cuda" and limits.memory_mb > 0:
            import resource

            cap = limits.memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        if os.environ.get("KERNELOPT_DEVICE") == "cuda":
            import torch

            torch.cuda.set_per_process_memory_fraction(limits.gpu_memory_fraction)
        module_name, _, fn_name = job.rpartition(".")
        fn = getattr(importlib.import_module(module_name), fn_name)
        conn.send(("ok", fn(payload)))
    except MemoryError:
        conn.send(("error", f"out of memory (limit {limits.memory_mb} MiB)"))
    except BaseException as exc:  # noqa: BLE001 - every failure is a result
        last = traceback.format_exc().strip().splitlines()[-1]
        conn.send(("error", f"{one_line(exc)} [{last[:300]}]"))
    finally:
        conn.close()
    # Exit now: threads the job left behind (a compile past its deadline, a candidate's own
    # thread) would otherwise hold the process until the parent kills it.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def run_sandboxed(job: str, payload: dict[str, Any], *, device: str,
                  limits: SandboxLimits | None = None) -> SandboxOutcome:
    """Run ``job(payload)`` in a fresh child process; never raises for the job's failures."""
    limits = limits or SandboxLimits()
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    previous = os.environ.get("KERNELOPT_DEVICE")
    os.environ["KERNELOPT_DEVICE"] = device
    try:
        with scrubbed_environ():
            proc = ctx.Process(target=_child, args=(job, payload, limits, child), daemon=True,
                               name="kernelopt-sandbox")
            proc.start()
    finally:
        if previous is None:
            os.environ.pop("KERNELOPT_DEVICE", None)
        else:
            os.environ["KERNELOPT_DEVICE"] = previous
    child.close()
    try:
        if not parent.poll(limits.timeout_s):
            proc.kill()
            proc.join(10)
            return SandboxOutcome(False, reason=f"timed out after {limits.timeout_s:.0f} s (hang); killed")
        try:
            kind, value = parent.recv()
        except (EOFError, OSError):
            proc.join(10)
            return SandboxOutcome(False, reason=f"crashed ({_describe_exit(proc.exitcode)})")
        proc.join(30)
        if kind == "ok":
            return SandboxOutcome(True, value)
        return SandboxOutcome(False, reason=str(value))
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        parent.close()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
