"""Sandbox jobs on the CPU interpreter: the timing job compiles every variant and survives bad ones."""

from __future__ import annotations

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
    outcome = run_sandboxed("kernelopt_bot.verify.jobs.environment_names", {}, device="cpu",
                            limits=SandboxLimits(timeout_s=60))
    assert outcome.ok, outcome.reason
    names = set(outcome.value)
    assert "PATH" in names
    assert not names & {"GITHUB_TOKEN", "MY_API_KEY", "OPENAI_API_KEY", "KERNELOPT_LLM_API_KEY", "AWS_SECRET"}
    import os

    assert os.environ["GITHUB_TOKEN"] == "secret-value"  # the parent keeps its environment
