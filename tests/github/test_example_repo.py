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
