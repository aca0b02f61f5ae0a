"""Stands in for ``kernelopt optimize`` in the fleet's tests: its arguments, files and exit codes,
no torch. ``python -m tests.fake_optimize TARGET --dtype D [--device X] ... --out OUT``.

What happens is read from TARGET's lines, per GPU (the job's ``CUDA_VISIBLE_DEVICES``):

* ``# sleep S``: sleep S seconds first;
* ``# wait for PATH``: first wait (up to 60 s) until PATH exists (another job has started, say);
* ``# speedup X``: a run that verified one kernel at X end to end (else: nothing verified, 1.0);
* ``# fail``: an ordinary failed run (exit 1 with its result.json);
* ``# cuda error on N`` (or ``everywhere``): a failed run whose error is a CUDA error;
* ``# crash on N`` (or ``everywhere``): exit 5 without a result;
* ``# hang on N`` (or ``everywhere``): start a child ``sleep`` (its pid in OUT/child.pid) and hang.

With ``KERNELOPT_FAKE_PLAN`` set (the sweep's tests) it is ``tests.github.fakes.GpuAwareRunner``
with that plan instead, for the target named by OUT's folder. Every run appends its GPU to OUT/runs and writes OUT/seen.json: the
GPU, compile threads, CPUs, pid and environment names it saw.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kernelopt_bot.gpu_pool import COMPILE_THREADS_ENV, INDUCTOR_THREADS_ENV
from kernelopt_bot.result import KernelOutcome, Recommendation, RunResult

COMMAND = (sys.executable, "-m", "tests.fake_optimize")
PLAN_ENV = "KERNELOPT_FAKE_PLAN"
CUDA_ERROR = "RuntimeError: CUDA error: an illegal memory access was encountered"


def _gpu() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")


def _here(lines: list[str], what: str) -> bool:
    return f"# {what} on {_gpu()}" in lines or f"# {what} everywhere" in lines


def _seen(out: Path) -> None:
    with (out / "runs").open("a") as runs:
        runs.write(_gpu() + "\n")
    (out / "seen.json").write_text(json.dumps({
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "threads": os.environ.get(COMPILE_THREADS_ENV),
        "inductor": os.environ.get(INDUCTOR_THREADS_ENV), "pid": os.getpid(),
        "cpus": sorted(os.sched_getaffinity(0)), "env": sorted(os.environ)}))


def _directed(target: Path, args: argparse.Namespace, out: Path) -> RunResult:
    lines = [line.strip() for line in target.read_text().splitlines()]
    for line in lines:
        if line.startswith("# wait for "):
            deadline = time.monotonic() + 60
            while not Path(line.removeprefix("# wait for ")).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if line.startswith("# sleep "):
            time.sleep(float(line.split()[-1]))
    if _here(lines, "crash"):
        os._exit(5)
    if _here(lines, "hang"):
        child = subprocess.Popen(["sleep", "120"])
        (out / "child.pid").write_text(str(child.pid))
        time.sleep(3600)
    result = RunResult(target=str(target), name=target.stem, device=args.device or "cpu", dtype=args.dtype,
                       baseline_ms=1.0, optimized_ms=1.0, speedup=1.0, noise_floor=0.004,
                       recommendations=[Recommendation("mode=max-autotune-no-cudagraphs", 1.1, True)])
    for line in lines:
        if line.startswith("# speedup "):
            speedup = float(line.split()[-1])
            result.speedup, result.optimized_ms = speedup, 1.0 / speedup
            result.kernels = [KernelOutcome("triton_poi_0", "pointwise", status="accepted", speedup=speedup)]
    failed = CUDA_ERROR if _here(lines, "cuda error") else "ValueError: this problem is broken" \
        if "# fail" in lines else None
    if failed:
        result = RunResult(target=str(target), name=target.stem, device=result.device, dtype=args.dtype,
                           status="failed", error=failed)
    result.seconds = 0.1
    return result


def _planned(args: argparse.Namespace, out: Path) -> RunResult:
    from kernelopt_bot.github.runner import TargetJob
    from tests.github.fakes import GpuAwareRunner  # late: the directed runs need no GitHub layer

    plan = json.loads(os.environ[PLAN_ENV])
    job = TargetJob(name=out.name.rpartition(".")[0], entry=args.shown_as or args.target, dtype=args.dtype,
                    device=args.device)
    return GpuAwareRunner(plan=plan).run(job, out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    for flag in ("--dtype", "--device", "--out", "--shown-as"):
        parser.add_argument(flag)
    args, _rest = parser.parse_known_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _seen(out)
    result = _planned(args, out) if os.environ.get(PLAN_ENV) else _directed(Path(args.target), args, out)
    result.save(out / "result.json")
    print(f"{result.name}: {result.status}")
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
