"""The README's quick start, run as printed (after its install steps, which CI's own setup does)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, user_env


def _main_job_command() -> str:
    """The ``kernelopt ...`` part of the quick start's "run the main job" line."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    line = next(ln for ln in block.splitlines() if "kernelopt optimize" in ln)
    return re.split(r"&&\s*(?=kernelopt )", line)[-1].strip()


@pytest.mark.slow
def test_the_quick_start_main_job_runs_as_printed(tmp_path: Path) -> None:
    command = _main_job_command()
    assert command.startswith("kernelopt optimize examples/")
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # a checkout, with the output kept out of ours
    env = {**user_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / command.split("--out", 1)[1].split()[0]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok", result.get("error")
    assert (out / "report.md").is_file() and (out / "pack.json").is_file()
