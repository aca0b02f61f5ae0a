"""scripts/phase_table.py: issue 12's before/after table, built from stored H200 runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "benchmarks" / "results" / "h200-2026-12-01"


def _table(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "phase_table.py"), *args],
                          capture_output=True, text=True, timeout=120)


def test_the_table_reads_phases_variants_candidates_and_options_from_the_runs() -> None:
    run = _table(str(RUNS / "call1"), str(RUNS / "call3"), "--label", "before", "--label", "after")
    assert run.returncode == 0, run.stderr
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|")[:2]): line
            for line in run.stdout.splitlines()[2:]}
    before = rows[("before", "cumsum_rows fp32")]
    after = rows[("after", "cumsum_rows fp32")]
    assert "| 34.1 |" in before and "| 1 of 3 | 1.407 |" in before  # the final bench, one option
    assert "| 10.0 |" in after and "| 44 | 3 | 3 of 3 | 1.410 |" in after  # 28 + 16 variants timed
    assert "| 0 of 3 | 1.000 |" in rows[("after", "rms_norm_large fp32")]


def test_a_folder_without_runs_is_an_error(tmp_path: Path) -> None:
    run = _table(str(tmp_path))
    assert run.returncode == 2 and "no result.json" in run.stderr


def test_the_kernel_table_reads_the_kernel_target_runs() -> None:
    """scripts/kernel_table.py on the H200 run that verified liger-kernel's layer norm on short rows
    (benchmarks/results/h200-2026-12-02b/call3): the verified config, gate 4's number and the
    re-measurement of the patch with its noise floor."""
    folder = ROOT / "benchmarks" / "results" / "h200-2026-12-02b" / "call3" / "r" / "kernels"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel_table.py"), str(folder)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = {line.split("|")[1].strip(): line for line in run.stdout.splitlines()[2:]}
    assert "| accepted | config num_warps=1, num_stages=3 | 1.111x | 1.240x |" in rows["liger_layer_norm_short"]
    assert "| 29.81% |" in rows["liger_layer_norm_short"]
    assert "| no candidate accepted |" in rows["liger_swiglu"]


def test_the_option_compile_table_sets_each_compile_beside_its_estimate(tmp_path: Path) -> None:
    """scripts/option_compile_table.py: on the H200 runs of 12-04f (before estimates were
    reported) the compiles against the capture's, and on a run that reports its estimate the
    compile against that."""
    script = str(ROOT / "scripts" / "option_compile_table.py")
    run = subprocess.run([sys.executable, script, str(ROOT / "benchmarks" / "results" / "h200-2026-12-04f")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "| resnet_basic_stack bf16 | coordinate_descent_tuning=True | 12.4 | - | - | 25.4 | - | 6.2 |" in run.stdout
    assert "| mode=max-autotune-no-cudagraphs | 3 | - | 2.52 | - |" in run.stdout
    result = {"name": "mlp", "dtype": "bf16", "phases": {"compiling and capturing": 20.0},
              "processes": {"baseline_compile_s": 30.0},
              "recommendations": [{"option": "coordinate_descent_tuning=True", "compile_s": 45.0,
                                   "compile_estimate_s": 30.0, "timed_s": 8.0},
                                  {"option": "coordinate_descent_tuning=True + pack", "compile_s": 90.0}]}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "result.json").write_text(json.dumps(result))
    (tmp_path / "train").mkdir()  # a training step's run is its own problem
    (tmp_path / "train" / "result.json").write_text(json.dumps({**result, "train": True}))
    for odd, text in (("list", "[1, 2]"), ("nameless", json.dumps({"recommendations": [{"option": None}, 3]}))):
        (tmp_path / odd).mkdir()  # what is not a run's result is passed over
        (tmp_path / odd / "result.json").write_text(text)
    run = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert "| mlp bf16 | coordinate_descent_tuning=True | 20.0 | 30.0 | 30.0 | 45.0 | 1.50 | 8.0 |" in run.stdout
    assert run.returncode == 0, run.stderr
    assert "| mlp bf16 (training step) | coordinate_descent_tuning=True | 20.0 |" in run.stdout
    assert "| coordinate_descent_tuning=True | 2 | 1.50 | 2.25 | 1.50 |" in run.stdout and "+ pack" not in run.stdout
    empty = subprocess.run([sys.executable, script, str(tmp_path / "run" / "none")], capture_output=True, text=True,
                           timeout=120)
    assert empty.returncode == 2 and "no compiler option" in empty.stderr
