"""Fake jobs for the GPU pool tests: real worker processes, no GPU, no torch.compile.

Each job says what to do per GPU (the worker's ``CUDA_VISIBLE_DEVICES``): succeed and report what
the worker sees, raise, raise a CUDA-looking error, hang, or kill its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelopt_bot.github.runner import TargetJob
from kernelopt_bot.gpu_pool import COMPILE_THREADS_ENV, INDUCTOR_THREADS_ENV, GpuFailure
from kernelopt_bot.result import RunResult
from tests.github.fakes import FakeRunner, make_result


def _gpu() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def _act(action: str, job: dict[str, Any]) -> None:
    if action == "exit":
        os._exit(3)
    if action == "raise":
        raise ValueError(f"job {job.get('i')} is broken")
    if action == "cuda":
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if action == "hang":
        # A child of our own, so the test can see that the deadline kills the job's whole tree.
        child = subprocess.Popen(["sleep", "120"])
        if job.get("pid_file"):
            Path(job["pid_file"]).write_text(str(child.pid))
        time.sleep(3600)


def behave(job: dict[str, Any]) -> dict[str, Any]:
    """``job``: ``i``, optional ``sleep``, ``on`` ({gpu: action}), ``always`` (an action anywhere),
    ``log_dir`` (one file per execution, to count them)."""
    time.sleep(float(job.get("sleep", 0.0)))
    if job.get("log_dir"):
        Path(job["log_dir"], f"{job['i']}-{os.getpid()}-{time.monotonic_ns()}").write_text(_gpu())
    action = job.get("always") or (job.get("on") or {}).get(_gpu(), "")
    _act(action, job)
    return {"i": job.get("i"), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "threads": os.environ.get(COMPILE_THREADS_ENV), "inductor": os.environ.get(INDUCTOR_THREADS_ENV),
            "pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0))}


def crash_once(job: dict[str, Any]) -> int:
    """Kill the worker the first time (a marker file remembers), succeed after."""
    if job["marker"] and not Path(job["marker"]).exists():
        Path(job["marker"]).write_text("x")
        os._exit(9)
    return os.getpid()


def fake_problem(job: dict[str, Any]) -> dict[str, Any]:
    """Stands in for ``kernelopt_bot.suite.problem_job``: a ProblemResult as a dict, no compile.

    The problem's file says what happens: ``# speedup 1.25``, ``# crash on 1`` (kill the worker on
    GPU 1), ``# cuda error on 1``, ``# fail`` (an ordinary failed run).
    """
    lines = Path(job["root"], job["problem"]["path"]).read_text().splitlines()
    gpu = _gpu()
    if f"# crash on {gpu}" in lines or "# crash everywhere" in lines:
        os._exit(5)
    result: dict[str, Any] = {"problem": job["problem"], "status": "ok", "speedup": 1.0, "speedup_vs_mant": 0.9,
                              "baseline_ms": 1.0, "optimized_ms": 1.0, "verified_kernels": 0, "seconds": 0.1,
                              "error": None}
    for line in lines:
        if line.startswith("# speedup "):
            speedup = float(line.split()[-1])
            result.update(speedup=speedup, optimized_ms=1.0 / speedup, verified_kernels=1)
    if f"# cuda error on {gpu}" in lines:
        result.update(status="failed", speedup=None, speedup_vs_mant=None, baseline_ms=None, optimized_ms=None,
                      error="RuntimeError: CUDA error: an illegal memory access was encountered")
        raise GpuFailure(result["error"], value=result)
    if "# fail" in lines:
        result.update(status="failed", speedup=None, speedup_vs_mant=None, baseline_ms=None, optimized_ms=None,
                      error="ValueError: this problem is broken")
    return result


@dataclass
class GpuAwareRunner(FakeRunner):
    """``FakeRunner`` whose plan may also say ``cuda@1``: a CUDA error on GPU 1, verified elsewhere."""

    def run(self, target_cfg: TargetJob, out_dir: Path) -> RunResult:
        what = self.plan.get(target_cfg.name, "")
        if what.startswith("cuda@"):
            self.calls.append(target_cfg.slug)
            if what == f"cuda@{_gpu()}":
                return make_result(target_cfg, "failed", error="CUDA error: unspecified launch failure")
            return FakeRunner(default="verified").run(target_cfg, out_dir)
        return super().run(target_cfg, out_dir)


def fake_runner(repo_root: Path) -> GpuAwareRunner:
    """A sweep runner built inside a worker (the factory is named by import path): planned by the
    ``FAKE_RUNNER_PLAN`` environment variable, which workers inherit."""
    return GpuAwareRunner(plan=json.loads(os.environ.get("FAKE_RUNNER_PLAN", "{}")))
