"""Test doubles for the engine: a runner that returns RunResults the test chose.

The engine is tested elsewhere; these tests prove what the GitHub layer does with its results.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt_bot.github.runner import TargetJob
from kernelopt_bot.pack.format import Guard, KernelPack, LaunchConfig, PackEntry
from kernelopt_bot.result import KernelOutcome, RunResult


def key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def make_result(job: TargetJob, outcome: str, *, speedup: float = 1.2, kernels: tuple[str, ...] = ("k0",),
                error: str = "boom") -> RunResult:
    """``outcome``: verified, nothing, failed."""
    if outcome == "failed":
        return RunResult(target=job.entry, name=job.name, device="cuda", dtype=job.dtype, status="failed",
                         error=error)
    accepted = outcome == "verified"
    ks = [KernelOutcome(name=f"triton_poi_{k}", kind="pointwise", share=0.4, time_ms=0.01, candidates=5,
                        status="accepted" if accepted else "rejected by perf gate",
                        speedup=speedup if accepted else 0.99, replacement="config" if accepted else None,
                        detail="" if accepted else "1.01x < gamma 1.03")
          for k in kernels]
    return RunResult(
        target=job.entry, name=job.name, device="cuda", dtype=job.dtype, status="ok",
        hardware={"gpu": "NVIDIA H200", "compute_capability": "9.0"},
        versions={"torch": "2.11.0", "triton": "3.5.0", "kernelopt": "0.1.0"},
        baseline_ms=1.0, optimized_ms=1.0 / speedup if accepted else 1.0,
        speedup=speedup if accepted else 1.0, noise_floor=0.004, kernels=ks,
        pack_entries=len(kernels) if accepted else 0,
        reproduce=f"kernelopt optimize {job.entry} --dtype {job.dtype}",
    )


def write_pack(job: TargetJob, out_dir: Path, result: RunResult, kernels: tuple[str, ...]) -> None:
    pack = KernelPack(target=job.entry, created_by="fake")
    if result.pack_entries:
        for k in kernels:
            pack.add(PackEntry(key=key(f"{job.name}.{job.dtype}.{k}"), kernel_name=f"triton_poi_{k}",
                               config=LaunchConfig({"XBLOCK": 128}, 4, 1),
                               guard=Guard(torch="2.11.0", triton="3.5.0", gpu="NVIDIA H200"),
                               measured={"speedup": result.speedup}))
    pack.save(out_dir / "pack.json")
    result.pack_path = str(out_dir / "pack.json")


@dataclass
class FakeRunner:
    """Per target name: "verified", "nothing", "failed" (status failed) or "raise" (an exception)."""

    plan: dict[str, str] = field(default_factory=dict)
    default: str = "verified"
    speedup: float = 1.2
    kernels: tuple[str, ...] = ("k0",)
    calls: list[str] = field(default_factory=list)
    llm_unavailable: str | None = None  # set: the LLM agents were asked for and unavailable, for this reason

    def run(self, target_cfg: TargetJob, out_dir: Path) -> RunResult:
        self.calls.append(target_cfg.slug)
        what = self.plan.get(target_cfg.name, self.default)
        if what == "raise":
            raise RuntimeError(f"engine exploded on {target_cfg.name}")
        result = make_result(target_cfg, what, speedup=self.speedup, kernels=self.kernels)
        if self.llm_unavailable is not None:
            result.llm_status, result.llm_error = "unavailable", self.llm_unavailable
        if what != "failed":
            write_pack(target_cfg, out_dir, result, self.kernels)
        (out_dir / "report.md").write_text(f"# {target_cfg.name}\n")
        return result


@dataclass
class GpuAwareRunner(FakeRunner):
    """``FakeRunner`` whose plan may also say ``cuda@N``: a CUDA error on GPU N (the process's
    ``CUDA_VISIBLE_DEVICES``), verified elsewhere."""

    def run(self, target_cfg: TargetJob, out_dir: Path) -> RunResult:
        what = self.plan.get(target_cfg.name, "")
        if what.startswith("cuda@"):
            self.calls.append(target_cfg.slug)
            if what == f"cuda@{os.environ.get('CUDA_VISIBLE_DEVICES', '')}":
                return make_result(target_cfg, "failed", error="CUDA error: unspecified launch failure")
            return FakeRunner(default="verified").run(target_cfg, out_dir)
        return super().run(target_cfg, out_dir)
