"""scripts/unseen_table.py: the table of optimize runs on benchmarks/unseen/, from stored runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "results" / "h200-2026-12-05b" / "call1" / "r" / "suite" / "problems" / "l3_tiny_vit_bf16"


def _table(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "unseen_table.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_a_row_per_run_and_one_for_a_run_that_left_no_result(tmp_path: Path) -> None:
    shutil.copytree(RUN, tmp_path / "tiny_vit_bf16")
    (tmp_path / "crashed_fp32").mkdir()
    run = _table(str(tmp_path))
    assert run.returncode == 0, run.stderr
    rows = run.stdout.splitlines()[2:]
    assert len(rows) == 2
    assert rows[0].startswith("| crashed_fp32 | no result.json")
    vit = rows[1]
    assert vit.startswith("| tiny_vit bf16 | ok | 1.1240 | 1.1240 | 1.000 |")
    assert "max-autotune-no-cudagraphs 1.181" in vit and "coordinate_descent_tuning 0.949 (not verified)" in vit


def test_a_missing_folder_is_an_error() -> None:
    run = _table(str(ROOT / "no-such-folder"))
    assert run.returncode == 2 and "not a folder" in run.stderr
