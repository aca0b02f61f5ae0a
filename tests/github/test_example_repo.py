"""The PR flow on an example repository with the real pipeline (scripts/example_pr_dry_run.sh)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_example_repository_dry_run(tmp_path: Path) -> None:
    run = subprocess.run(["bash", str(ROOT / "scripts" / "example_pr_dry_run.sh"), str(tmp_path)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    dry = tmp_path / "dry"
    comment = (dry / "comment.md").read_text()
    assert comment.startswith("<!-- kernelopt:report -->")
    assert "| rmsnorm | fp32 |" in comment and "triton_per_fused" in comment.replace("\\_", "_")
    result = json.loads((dry / "results" / "rmsnorm.fp32" / "result.json").read_text())
    assert result["status"] == "ok" and result["kernels"][0]["candidates"] >= 1
    publish = json.loads((dry / "publish.json").read_text())
    assert publish["dry_run"] is True
    outputs = (tmp_path / "github_output.txt").read_text()
    assert "verified-kernels<<" in outputs and "report-path<<" in outputs


def test_example_repository_dry_run_on_a_kernel_file(tmp_path: Path) -> None:
    """A PR that changes a vendored liger-kernel file: the kernel target runs (gates 1-3 in the
    interpreter) and, with nothing timed on the CPU, nothing is proposed; on a GPU the same flow
    proposes the edit (scripts/gpu_check.sh kernels)."""
    import os

    env = {**os.environ, "EXAMPLE": "liger_swiglu"}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "example_pr_dry_run.sh"), str(tmp_path), "cpu"],
                         capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads((tmp_path / "dry" / "results" / "liger_swiglu.fp32" / "result.json").read_text())
    assert result["status"] == "ok"
    (kernel,) = result["kernels"]
    assert kernel["name"] == "_swiglu_forward_kernel" and kernel["candidates"] == 1
    assert kernel["detail"] == "passed gates 1-3; performance not measured"
    comment = (tmp_path / "dry" / "comment.md").read_text()
    assert "kernels/liger\\_swiglu\\_ops.py matches paths" in comment and "nothing verified" in comment
