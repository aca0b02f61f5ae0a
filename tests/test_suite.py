"""`kernelopt suite`: each problem in its own process, shards, merge, and the report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernelopt_bot.errors import BadInputError
from kernelopt_bot.suite import (
    Problem,
    ProblemResult,
    SuiteResult,
    geomean,
    load_problems,
    markdown,
    parse_shard,
)
from tests.helpers import EXAMPLES, run_cli


def _suite(root: Path) -> Path:
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    shutil.copy(EXAMPLES / "gelu.py", root / "level1" / "gelu.py")
    (root / "level2" / "broken.py").write_text("raise RuntimeError('this problem is broken')\n")
    (root / "suite.json").write_text(json.dumps({"problems": [
        {"path": "level1/gelu.py", "level": 1, "dtypes": ["fp32"]},
        {"path": "level2/broken.py", "level": 2, "dtypes": ["fp32"]},
    ]}))
    return root


def test_shards_run_each_problem_in_its_own_process_and_merge(tmp_path: Path) -> None:
    root = _suite(tmp_path / "suite")
    outs = []
    for shard in ("1/2", "2/2"):
        out = tmp_path / f"out-{shard[0]}"
        result = run_cli("suite", str(root), "--out", str(out), "--shard", shard, "--budget", "candidates=1")
        assert result.returncode == 0, result.stderr
        outs.append(out)
    one = json.loads((outs[0] / "suite.json").read_text())
    two = json.loads((outs[1] / "suite.json").read_text())
    assert [p["slug"] for p in one["problems"]] == ["l1_gelu_fp32"]
    assert [p["slug"] for p in two["problems"]] == ["l2_broken_fp32"]
    assert one["problems"][0]["status"] == "ok"
    assert two["problems"][0]["status"] == "failed" and "broken" in two["problems"][0]["error"]
    merged = tmp_path / "merged"
    result = run_cli("suite-merge", str(outs[0]), str(outs[1]), "--out", str(merged))
    assert result.returncode == 0, result.stderr
    report = (merged / "suite.md").read_text()
    assert "level1/gelu.py" in report and "level2/broken.py" in report


def test_geomean_counts_fallbacks_as_one_on_a_gpu() -> None:
    def row(path: str, level: int, status: str, speedup: float | None) -> ProblemResult:
        return ProblemResult(Problem(path, level, "fp32"), status, speedup, None, 1.0, 1.0, 0, 10.0)

    suite = SuiteResult([row("a.py", 1, "ok", 1.21), row("b.py", 1, "ok", 1.0), row("c.py", 1, "failed", None)],
                        device="cuda")
    level = suite.levels()["1"]
    assert level["geomean_vs_default"] == pytest.approx(geomean([1.21, 1.0, 1.0]))
    assert level["failed"] == 1 and level["slowest"] == 1.0
    assert "xychart-beta" in markdown(suite)
    cpu = SuiteResult([row("a.py", 1, "ok", None)], device="cpu")
    assert cpu.levels()["1"]["geomean_vs_default"] is None


def test_bad_suite_input() -> None:
    with pytest.raises(BadInputError):
        parse_shard("3/2")
    with pytest.raises(BadInputError):
        parse_shard("0/2")
    with pytest.raises(BadInputError):
        parse_shard("x")
    with pytest.raises(BadInputError, match="not a directory"):
        load_problems(Path("/nonexistent"))


def test_repository_suite_loads() -> None:
    problems = load_problems(Path(__file__).resolve().parent.parent / "benchmarks")
    assert len({p.path for p in problems}) >= 30
    assert {p.level for p in problems} == {1, 2, 3} and {p.dtype for p in problems} >= {"fp32", "bf16"}
