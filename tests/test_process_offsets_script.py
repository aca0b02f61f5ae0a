"""scripts/process_offsets.py as a user runs it (its numbers need a GPU: on the CPU it starts the
arms, wave after wave, and says that nothing was timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]


def test_the_offsets_script_starts_its_waves_in_a_cold_cache_and_says_nothing_was_timed_on_the_cpu(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    done = subprocess.run(
        [sys.executable, "scripts/process_offsets.py", str(EXAMPLES / "gelu.py"), "--device", "cpu",
         "--arms", "2", "--waves", "2", "--rounds", "1", "--warm-load", "--cache-dir", str(cache),
         "--json", str(tmp_path / "out.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "nothing timed: no CUDA device" in done.stderr
    assert any(cache.iterdir())  # the first wave compiled into the cache it was given
    starts = [line for line in done.stdout.splitlines() if " started: " in line]
    assert len(starts) == 2
    assert "replaced (compiled cold, then loaded from the cache)" in starts[0]  # the first wave: cold, replaced
    assert "started: loaded from the cache;" in starts[1]  # the second loads what the first stored
    assert all(line.endswith("configs unlike baseline-w1-0's: 0") for line in starts)  # one kernel, one config
    assert not (tmp_path / "out.json").exists()  # written only with times
