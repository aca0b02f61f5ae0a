"""A standalone-kernel target on a GPU: configs timed on the launcher, gate 4 measured, and a
verified config (if any) delivered as a patch that applies to a clean copy of the source.

Run on the H200 by scripts/gpu_check.sh; skipped without CUDA."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, user_env

pytestmark = pytest.mark.gpu


def test_optimize_a_launcher_on_the_gpu(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    source = (ROOT / "tests" / "launchers" / "row_softmax.py").read_text()
    (repo / "row_softmax.py").write_text(source.replace("torch.randn(6, 40)", "torch.randn(8192, 1024)"))
    run = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "optimize", "row_softmax.py"], cwd=repo,
                         env=user_env(), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((repo / "kernelopt-out" / "row_softmax" / "result.json").read_text())
    (kernel,) = result["kernels"]
    print("LAUNCHER", kernel["status"], kernel["detail"], result["speedup"], result["patch_path"])
    if kernel["status"] == "accepted":
        assert result["patch_path"] and result["speedup"] is not None
        clean = tmp_path / "clean"
        clean.mkdir()
        shutil.copy(repo / "row_softmax.py", clean / "row_softmax.py")
        subprocess.run(["git", "init", "-q"], cwd=clean, check=True)
        patch = Path(result["patch_path"])  # as the run wrote it: relative to where it ran
        patch = patch if patch.is_absolute() else repo / patch
        applied = subprocess.run(["git", "apply", str(patch)], cwd=clean, capture_output=True, text=True)
        assert applied.returncode == 0, applied.stderr
    else:
        assert result["patch_path"] is None
