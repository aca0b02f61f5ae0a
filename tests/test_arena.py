"""The arena: baseline arms started once (optionally early) and reused; a failed start is not cached."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelopt_bot.harness.arena import Arena
from kernelopt_bot.harness.model_worker import WorkerError
from tests.helpers import EXAMPLES


def test_prestart_returns_at_once_and_baselines_reuse_the_started_arm() -> None:
    with Arena(str(EXAMPLES / "gelu.py"), "cpu", "fp32") as arena:
        start = time.monotonic()
        arena.prestart()
        assert time.monotonic() - start < 2.0  # started, not waited for
        started = arena._workers["baseline"]
        assert not started.ready
        baseline, repeat = arena.baselines()
        assert baseline is started and baseline.ready and repeat is None  # no noise arm without a GPU
        assert arena.baselines()[0] is baseline  # asked again: the same process
        assert len(baseline.request("outputs", 0)) == 1


def test_a_baseline_that_fails_to_start_is_reported_and_started_afresh_next_time(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                      "        raise RuntimeError('cannot run')\n"
                      "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n")
    with Arena(str(broken), "cpu", "fp32", timeout_s=120) as arena:
        arena.prestart()
        with pytest.raises(WorkerError, match="cannot run"):
            arena.baselines()
        assert "baseline" not in arena._workers
        with pytest.raises(WorkerError, match="cannot run"):
            arena.baselines()
