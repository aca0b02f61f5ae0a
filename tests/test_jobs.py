"""Sandbox jobs on the CPU interpreter: the timing job compiles every variant and survives bad ones."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernelopt_bot.verify.sandbox import SandboxLimits, run_sandboxed
from tests.helpers import captured


def test_timing_job_survives_a_broken_variant(tmp_path: Path) -> None:
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    args_path = tmp_path / "args.pt"
    torch.save(list(cap.recording(kernel.graph, kernel.name).args), args_path)
    payload = {
        "device": cap.target.device, "kernel": kernel.to_json(), "args_path": str(args_path), "kwargs": {},
        "reps": 3,
        "variants": [
            {"source": None, "config": {"kwargs": {"XBLOCK": 64}, "num_warps": 4, "num_stages": 1}},
            {"source": "def broken(:\n", "config": None},
        ],
    }
    outcome = run_sandboxed("kernelopt_bot.verify.jobs.timing_job", payload, device=cap.target.device,
                            limits=SandboxLimits(timeout_s=300))
    assert outcome.ok, outcome.reason
    times = outcome.value["times"]
    assert len(times) == 2
    assert isinstance(times[1], str) and "Error" in times[1]
    if cap.target.device == "cuda":
        assert isinstance(times[0], float) and outcome.value["original_ms"] > 0
    else:
        assert times[0] is None and outcome.value["original_ms"] is None  # not measured, never a number


def test_sandbox_reports_a_missing_job() -> None:
    outcome = run_sandboxed("kernelopt_bot.verify.jobs.no_such_job", {}, device="cpu",
                            limits=SandboxLimits(timeout_s=60))
    assert not outcome.ok and "AttributeError" in outcome.reason


def test_sandbox_environment_has_no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITHUB_TOKEN", "MY_API_KEY", "OPENAI_API_KEY", "KERNELOPT_LLM_API_KEY", "AWS_SECRET"):
        monkeypatch.setenv(name, "secret-value")
    outcome = run_sandboxed("tests.isolation_probe.environment_names", {}, device="cpu",
                            limits=SandboxLimits(timeout_s=60))
    assert outcome.ok, outcome.reason
    names = set(outcome.value)
    assert "PATH" in names
    assert not names & {"GITHUB_TOKEN", "MY_API_KEY", "OPENAI_API_KEY", "KERNELOPT_LLM_API_KEY", "AWS_SECRET"}
    import os

    assert os.environ["GITHUB_TOKEN"] == "secret-value"  # the parent keeps its environment


def test_timing_job_leaves_a_variant_behind_at_the_compile_deadline(tmp_path: Path) -> None:
    """A variant still compiling at the deadline is reported, not waited for; the job still
    answers and its process exits."""
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    args_path = tmp_path / "args.pt"
    torch.save(list(cap.recording(kernel.graph, kernel.name).args), args_path)
    slow = kernel.source + "\nimport time as _t\n_t.sleep(20)\n"  # loading this module takes 20 s
    payload = {
        "device": cap.target.device, "kernel": kernel.to_json(), "args_path": str(args_path), "kwargs": {},
        "reps": 3, "compile_deadline_s": 2, "sent_at": time.time(),
        "chosen_config": cap.recording(kernel.graph, kernel.name).chosen_config,
        "variants": [{"source": slow, "config": None}],
    }
    started = time.monotonic()
    outcome = run_sandboxed("kernelopt_bot.verify.jobs.timing_job", payload, device=cap.target.device,
                            limits=SandboxLimits(timeout_s=120))
    assert outcome.ok, outcome.reason
    assert outcome.value["times"] == ["not compiled within 2 s; skipped"]
    assert time.monotonic() - started < 18  # neither the job nor the sandbox waited for the sleeper
    assert set(outcome.value["seconds"]) >= {"start", "load", "original", "compile", "timing"}

