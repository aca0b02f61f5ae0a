"""scripts/pack_on_mant.py: issue 13's third figure for a suite whose runs predate it, from the
packs the runs committed, run as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import EXAMPLES

ROOT = Path(__file__).resolve().parent.parent
EMPTY_PACK = {"format": "kernelopt-pack", "version": 1, "entries": []}


def _row(path: str, speedup: float, verified: int) -> dict[str, object]:
    return {"problem": {"path": path, "level": 1, "dtype": "fp32"}, "status": "ok", "speedup": speedup,
            "speedup_vs_mant": None, "baseline_ms": 1.0, "optimized_ms": 1.0 / speedup,
            "verified_kernels": verified, "seconds": 10.0}


def test_each_verified_pack_is_measured_from_its_own_run_and_a_later_call_goes_on(tmp_path: Path) -> None:
    suite_root = tmp_path / "suite"
    (suite_root / "level1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "gelu.py", suite_root / "level1" / "gelu.py")
    shutil.copy(EXAMPLES / "gelu.py", suite_root / "level1" / "gelu_again.py")
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "suite.json").write_text(json.dumps({"device": "cpu", "compile": {}, "problems": [
        _row("level1/gelu.py", 1.25, 1), _row("level1/gelu_again.py", 1.5, 1), _row("level1/plain.py", 1.0, 0)]}))
    runs = tmp_path / "runs"
    for call, speedup in (("call1", 1.1), ("call2", 1.25)):  # the run the report took its speedup from: call2
        folder = runs / call / "problems" / "l1_gelu_fp32"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({"speedup": speedup}))
        (folder / "pack.json").write_text(json.dumps(EMPTY_PACK if call == "call2" else {"broken": True}))
    out = tmp_path / "out"

    def script(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(ROOT / "scripts" / "pack_on_mant.py"), str(merged), "--runs",
                               str(runs), "--out", str(out), "--suite-root", str(suite_root), *extra],
                              capture_output=True, text=True, timeout=600)

    ran = script("--only", "l1_gelu_fp32")
    assert ran.returncode == 0, ran.stderr
    assert "call2/problems/l1_gelu_fp32/pack.json" in ran.stdout  # the run with the report's speedup
    rows = {p["slug"]: p for p in json.loads((out / "suite.json").read_text())["problems"]}
    assert rows["l1_gelu_fp32"]["speedup_pack_on_mant"] == 1.0  # its kernels are in no build: unchanged
    assert rows["l1_plain_fp32"]["speedup_pack_on_mant"] == 1.0  # nothing verified, nothing on top
    assert rows["l1_gelu_again_fp32"]["speedup_pack_on_mant"] is None  # not asked for yet
    assert (out / "problems" / "l1_gelu_fp32" / "pack_on_max_autotune.log").is_file()
    again = script()  # goes on from --out: only what is left, and no committed pack for it
    assert again.returncode == 0, again.stderr
    assert "l1_gelu_again_fp32: no committed pack with speedup 1.5" in again.stdout
    assert "l1_gelu_fp32" not in again.stdout
    assert "| level1/gelu.py | fp32 | ok | 1.0000 | 0.8000 | 1.250 | - | 1.000 |" in (out / "suite.md").read_text()
