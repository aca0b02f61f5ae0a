"""scripts/noise_problems.py, which picks what the GPU check's noise part measures for ``all``:
the suite's pairs, level 3 first, less those skipped and those a results folder measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "scripts/noise_problems.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_suites_pairs_come_level_3_first_less_the_skipped_and_the_measured(tmp_path: Path) -> None:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"problems": [
        {"path": "level1/a.py", "level": 1, "dtypes": ["fp32", "bf16"]},
        {"path": "level3/net.py", "level": 3, "dtypes": ["bf16"]},
        {"path": "level2/b.py", "level": 2, "dtypes": ["fp32"]},
        {"path": "level1/a.py", "level": 1, "dtypes": ["fp32"], "train": True},  # a training step: not here
    ]}))
    assert _run("--suite", str(suite)) == ["level3/net.py:bf16", "level2/b.py:fp32", "level1/a.py:fp32",
                                           "level1/a.py:bf16"]
    results = tmp_path / "results" / "call1" / "r"
    results.mkdir(parents=True)
    (results / "noise_a_bf16.json").write_text(json.dumps(
        {"target": "benchmarks/level1/a.py", "dtype": "bf16", "measured": True}))
    (results / "noise_b_fp32.json").write_text("")  # a bench cut midway: not measured
    (results / "noise_net_bf16.json").write_text(json.dumps(
        {"target": "/abs/benchmarks/level3/net.py", "dtype": "bf16", "measured": False}))  # no GPU: not measured
    assert _run("--suite", str(suite), "--measured", str(tmp_path / "results"), "--skip", "level1/a.py:fp32") == [
        "level3/net.py:bf16", "level2/b.py:fp32"]


def test_the_committed_suite_has_every_pair_once() -> None:
    pairs = _run()
    assert len(pairs) == len(set(pairs)) and all(p.count(":") == 1 for p in pairs)
    assert pairs[0].startswith("level3/") and pairs[-1].startswith("level1/")
