"""Arms of one model, started one after another in identical processes, load each other's compile
from the compiler's cache on the GPU.

On the H200 (12-05e) 35 of 51 arm starts of `kernelopt bench` compiled cold although a process
had compiled the same model into the cache just before (on the CPU every arm loads: the
warm-cache test). Each cold start costs a compile and a replacement load (13-34 s and 12-19 s on a
level-2/3 problem). This test names the component of Inductor's cache key that differs when it
fails (``scripts/cache_keys.py``'s comparison, from the arms' recorded lookups).

Run on the GPU by scripts/gpu_check.sh (tests part); skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec
from tests.helpers import script_module

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = [("level2/conv2d_bn_relu.py", "bf16"), ("level3/mixer_block.py", "bf16")]


@pytest.mark.parametrize(("problem", "dtype"), PROBLEMS)
def test_a_second_arm_loads_the_first_arms_compile(problem: str, dtype: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # empty: the first arm compiles
    target = str(ROOT / "benchmarks" / problem)
    lookups = []
    for label in ("first", "second", "third"):
        with ArmProcess(ArmSpec(label, target, "cuda", dtype)) as arm:
            info = arm.wait_ready()
            lookups.append((label, info.get("cache_keys") or []))
    cache_keys = script_module("cache_keys")
    report = "\n".join(cache_keys.report({f"{problem}:{dtype}": [(who, k) for who, keys in lookups for k in keys]}))
    states = {who: [k.get("state") for k in keys] for who, keys in lookups}
    assert states["first"] and all(s == "miss" for s in states["first"]), report
    assert states["second"] and states["third"], report  # each looked its graphs up (none bypassed the cache)
    assert all(s == "hit" for s in states["second"] + states["third"]), report


def test_a_bench_loads_what_the_warm_script_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case the H200 showed (12-05e): ``scripts/warm_cache.py`` compiled a problem, then the
    arms of its ``kernelopt bench`` missed that compile and compiled cold. The warm now compiles in
    a model arm started as a bench's are; every arm of the bench after it loads."""
    import json
    import subprocess
    import sys

    from kernelopt_bot.harness.arm_process import how_started

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))  # reaches both commands and their arms
    problem, dtype = PROBLEMS[0]
    warm = subprocess.run([sys.executable, "scripts/warm_cache.py", "--keys", str(tmp_path / "keys.json"),
                           f"{problem}:{dtype}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stdout + warm.stderr[-2000:]
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": "kernelopt-pack", "version": 1, "entries": []}))
    bench = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "bench", f"benchmarks/{problem}", "--pack",
                            str(empty), "--dtype", dtype, "--rounds", "1", "--reps", "1", "--json"],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert bench.returncode == 0, bench.stderr[-2000:]
    (tmp_path / "bench.json").write_text(bench.stdout)
    keys = subprocess.run([sys.executable, "scripts/cache_keys.py", str(tmp_path / "bench.json"), str(tmp_path / "keys.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    starts = json.loads(bench.stdout)["arm_starts"]
    assert set(starts) == {"baseline", "packed", "baseline-repeat"}, starts
    assert all(how_started(start) == "loaded" for start in starts.values()), keys.stdout + keys.stderr
