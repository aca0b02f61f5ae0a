"""scripts/warm_cache.py as the GPU check runs it before the noise benches: what it compiles, a
``kernelopt bench`` of the same problem then loads from the cache instead of compiling (the whole
point: the same cache keys as the arms'), and a problem it cannot load is reported, not fatal to
the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import script_module

ROOT = Path(__file__).resolve().parents[1]


def test_a_warmed_problem_is_loaded_from_the_cache_by_its_bench_and_a_broken_one_is_reported(tmp_path: Path) -> None:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}  # this test's own, empty cache
    warm = subprocess.run(
        [sys.executable, "scripts/warm_cache.py", "--device", "cpu", "--jobs", "2", "--keys", str(tmp_path / "keys.json"),
         "level1/hardswish.py:fp32", "level1/no_such_problem.py:fp32"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert warm.returncode == 1, warm.stderr[-2000:]  # one of two not warmed
    assert "level1/hardswish.py:fp32: compiled in" in warm.stdout and "(cache: miss 1)" in warm.stdout
    assert "level1/no_such_problem.py:fp32: not warmed (TargetError:" in warm.stdout
    assert "warmed 1 of 2 problems" in warm.stdout

    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": "kernelopt-pack", "version": 1, "entries": []}))
    bench = subprocess.run(
        [sys.executable, "-m", "kernelopt_bot.cli", "bench", "benchmarks/level1/hardswish.py", "--pack", str(empty),
         "--device", "cpu", "--rounds", "1", "--reps", "1", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert bench.returncode == 0, bench.stderr[-2000:]
    starts = json.loads(bench.stdout)["arm_starts"]
    for arm in ("baseline", "packed"):
        assert starts[arm]["cache"]["hit"] == 1 and starts[arm]["cache"]["miss"] == 0, starts

    # Every lookup, the warm's and the arms', under one key: the warm stored it, the arms loaded it.
    (tmp_path / "bench.json").write_text(bench.stdout)
    keys = subprocess.run([sys.executable, "scripts/cache_keys.py", str(tmp_path / "bench.json"), str(tmp_path / "keys.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert keys.returncode == 0, keys.stderr
    lines = keys.stdout.splitlines()
    assert lines[0] == "level1/hardswish.py:fp32: 1 key(s)", keys.stdout
    assert set(lines[1].split(": ", 1)[1].split(", ")) == {"warm miss", "baseline hit", "packed hit"}, keys.stdout


def test_a_problem_whose_turn_comes_after_the_deadline_is_reported_and_not_started(tmp_path: Path) -> None:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    warm = subprocess.run([sys.executable, "scripts/warm_cache.py", "--device", "cpu", "--deadline", "3",
                           "level1/hardswish.py:fp32"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert warm.returncode == 1, warm.stderr[-2000:]
    assert "level1/hardswish.py:fp32: not warmed (its turn came 5 s or less before the deadline)" in warm.stdout
    assert not (tmp_path / "cache").exists()  # nothing compiled


def test_a_compile_still_running_at_the_deadline_is_killed_and_reported(tmp_path: Path) -> None:
    slow = tmp_path / "slow.py"  # a model file whose import takes longer than the warm may
    slow.write_text("import time\n\nimport torch\n\ntime.sleep(120)\n\n\n"
                    "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n\n\n"
                    "def get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    start = time.monotonic()
    warm = subprocess.run([sys.executable, "scripts/warm_cache.py", "--device", "cpu", "--deadline", "8", f"{slow}:fp32"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert warm.returncode == 1, warm.stderr[-2000:]
    assert f"{slow}:fp32: not warmed (still compiling at the 8 s deadline)" in warm.stdout
    assert time.monotonic() - start < 60  # killed at the deadline, not left to finish its sleep


def test_two_keys_of_one_problem_show_the_components_that_differ() -> None:
    cache_keys = script_module("cache_keys")
    shared = "[abc] fx_kwargs: {'is_inference': True}"
    warm = {"key": "f1", "state": "miss", "components": [shared, "[h1] example_inputs[0]: TensorMetadata(stride=(64, 1))"]}
    arm = {"key": "f2", "state": "miss", "components": [shared, "[h2] example_inputs[0]: TensorMetadata(stride=(1, 64))"]}
    loaded = {"key": "f1", "state": "hit"}  # a hit records no components: the warm's miss describes its key
    lines = cache_keys.report({"level1/x.py:fp32": [("packed", loaded), ("warm", warm), ("baseline", arm)]})
    assert lines[0] == "level1/x.py:fp32: 2 key(s)"
    assert lines[1] == "  f1: packed hit, warm miss" and lines[2] == "  f2: baseline miss"
    assert "    - [h1] example_inputs[0]: TensorMetadata(stride=(64, 1))" in lines
    assert "    + [h2] example_inputs[0]: TensorMetadata(stride=(1, 64))" in lines
    assert not any("fx_kwargs" in line for line in lines)  # alike in both: not shown


def test_each_processs_graphs_are_compared_graph_by_graph() -> None:
    """Two graphs (a break, or a step's forward and backward): a process's second lookup is
    compared with the others' second, never with their first."""
    cache_keys = script_module("cache_keys")
    first = [("warm", {"key": "a", "state": "miss", "components": ["[1] gm: one"]}),
             ("warm", {"key": "b", "state": "miss", "components": ["[2] gm: two"]})]
    second = [("baseline", {"key": "a", "state": "hit"}), ("baseline", {"key": "b", "state": "hit"})]
    lines = cache_keys.report({"l3/x.py:bf16": first + second})
    assert lines == ["l3/x.py:bf16 graph 0: 1 key(s)", "  a: warm miss, baseline hit",
                     "l3/x.py:bf16 graph 1: 1 key(s)", "  b: warm miss, baseline hit"]


def test_a_key_component_is_kept_short() -> None:
    from kernelopt_bot.capture.recorder import compact_component

    assert compact_component("[abcdefghijkl] inductor_config[max_autotune]: False") == "[abcdefgh] inductor_config[max_autotune]"
    long = "[abcdefghijkl] example_inputs[0]: " + "x" * 1000
    assert compact_component(long) == "[abcdefgh] example_inputs[0]: " + "x" * 160
    assert compact_component("no bracket") == "no bracket"


def test_a_malformed_problem_is_refused_before_anything_compiles() -> None:
    done = subprocess.run([sys.executable, "scripts/warm_cache.py", "level1/hardswish.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "expected level/file.py:dtype" in done.stderr


def test_recording_cache_keys_puts_inductors_lookup_back_even_after_an_error() -> None:
    import inspect

    import pytest
    from torch._inductor.codecache import FxGraphCache

    from kernelopt_bot.capture.recorder import recording_cache_keys

    before = inspect.getattr_static(FxGraphCache, "load_with_key")
    with pytest.raises(RuntimeError), recording_cache_keys():
        assert inspect.getattr_static(FxGraphCache, "load_with_key") is not before  # wrapped inside
        raise RuntimeError("a compile failed")
    assert inspect.getattr_static(FxGraphCache, "load_with_key") is before
