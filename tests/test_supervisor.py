"""The engine's supervisor: work that brings the engine down is that work's failure; the run goes
on in a new engine that skips it (issue 12: respawn on death, timeout or a sticky CUDA error)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import torch

from kernelopt_bot.harness.failures import WorkerPoisoned, is_sticky_device_error
from kernelopt_bot.harness.isolation import spawn_isolated
from kernelopt_bot.harness.supervisor import supervise
from kernelopt_bot.harness.work_watch import WorkWatch


def _run(script: str, **extra: Any) -> tuple[Any, list[str]]:
    lines: list[str] = []

    def start(request: dict[str, Any]) -> Any:
        return spawn_isolated("tests.engine_doubles.engine", request, name="kernelopt-test-engine")

    outcome = supervise(start, {"script": script, **extra}, 120.0, lines.append)
    return outcome, lines


def test_a_crash_in_announced_work_restarts_the_engine_without_that_work() -> None:
    outcome, lines = _run("crash in work", keys=["variant-a", "variant-b"])
    assert outcome.error is None and outcome.result_json is not None
    result = json.loads(outcome.result_json)
    # The first engine died in variant-a; the second skipped it and then died in variant-b; the third finished.
    assert sorted(result["quarantine"]) == ["variant-a", "variant-b"]
    assert [r["key"] for r in outcome.restarts] == ["variant-a", "variant-b"]
    assert "crashed" in outcome.restarts[0]["reason"] and "SIGSEGV" in outcome.restarts[0]["reason"]
    assert result["restarts"] == outcome.restarts  # the last engine knows what went before, for its report
    assert any("went down in timing variant-a" in line for line in lines)


def test_work_past_its_deadline_is_killed_and_skipped() -> None:
    start = time.monotonic()
    outcome, _ = _run("hang in work", keys=["slow"], deadline_s=2)
    assert time.monotonic() - start < 60
    assert outcome.result_json is not None
    assert outcome.restarts[0]["key"] == "slow" and "deadline" in outcome.restarts[0]["reason"]


def test_work_the_run_cannot_go_on_without_ends_the_run_at_its_deadline() -> None:
    """The model's load and capture (``ends_run``): past its deadline no engine is started to skip
    it; the run fails with the error the work named, at the deadline."""
    start = time.monotonic()
    outcome, _ = _run("hang in work", keys=["model start"], deadline_s=2, ends_run="the budget ran out")
    assert time.monotonic() - start < 30
    assert outcome.result_json is None and not outcome.restarts
    assert outcome.error == "the budget ran out"


def test_a_crash_in_work_the_run_cannot_go_on_without_fails_the_run_without_a_restart() -> None:
    """A model whose compile crashes would crash every new engine too."""
    outcome, _ = _run("crash in work", keys=["target start"], ends_run="the budget ran out")
    assert outcome.result_json is None and not outcome.restarts
    assert "crashed" in (outcome.error or "") and "while timing target start" in (outcome.error or "")


def test_a_poisoned_device_is_reported_and_the_engine_replaced() -> None:
    outcome, _ = _run("poisoned in work", keys=["bad"])
    assert outcome.result_json is not None and json.loads(outcome.result_json)["quarantine"] == {
        "bad": "CUDA error: an illegal memory access"}


def test_a_crash_outside_announced_work_fails_the_run_without_a_restart() -> None:
    outcome, _ = _run("crash outside work")
    assert outcome.result_json is None and not outcome.restarts
    assert "crashed" in (outcome.error or "")


def test_restarts_are_bounded() -> None:
    outcome, _ = _run("crash in every work", keys=["k1", "k2", "k3", "k4"])
    assert outcome.result_json is None and len(outcome.restarts) == 2
    assert "went down 3 times" in (outcome.error or "") and "k3" in (outcome.error or "")


def test_the_watch_turns_a_sticky_error_into_the_end_of_the_process() -> None:
    sent: list[tuple[str, Any]] = []
    watch = WorkWatch(sent.append, "cpu", {"old": "crashed"})
    with pytest.raises(WorkerPoisoned) as poisoned, watch.watching("k", "timing k", 5.0):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    assert poisoned.value.key == "k" and "illegal memory access" in poisoned.value.reason
    with pytest.raises(ValueError), watch.watching("j", "timing j", 5.0):
        raise ValueError("an ordinary failure of the work")
    assert sent[-1] == ("end", "j")  # the process goes on: the work ended
    assert not isinstance(WorkerPoisoned("k", "l", "r"), Exception)  # no `except Exception` swallows it
    assert "brought the engine down" in (watch.quarantined("old") or "") and watch.quarantined("new") is None
    assert is_sticky_device_error("CUDA error: misaligned address") and not is_sticky_device_error("CUDA out of memory")


def test_a_quarantined_variant_is_neither_compiled_nor_timed() -> None:
    from kernelopt_bot.harness.kernel_service import KernelService, variant_key
    from kernelopt_bot.pack.format import LaunchConfig
    from tests.helpers import captured

    cap = captured("linear_epilogue.py")
    kernel = cap.artifact.kernels[0]
    bad = LaunchConfig({"XBLOCK": 4}, num_warps=2, num_stages=1)
    good = LaunchConfig({"XBLOCK": 8}, num_warps=2, num_stages=1)
    watch = WorkWatch(None, "cpu", {variant_key(kernel.source, bad): "the engine process crashed (SIGSEGV)"})
    service = KernelService("cpu", cap.recording, watch)
    bench = service.bench(kernel)
    compiled = bench.compile_all([(None, bad), (None, good)], deadline_s=None, threads=1)
    assert isinstance(compiled[0], str) and "brought the engine down" in compiled[0] and "SIGSEGV" in compiled[0]
    assert not isinstance(compiled[1], str)
    times = bench.time_compiled(compiled, bench.keys([(None, bad), (None, good)]), None, 3)
    assert times[0] == compiled[0]
    assert torch.is_tensor(cap.recording(kernel.graph, kernel.name).args[0])


def test_a_poisoned_device_is_found_behind_the_cleanup_that_raised_over_it() -> None:
    from kernelopt_bot.harness.failures import poisoned_in

    def cleanup_fails() -> None:
        try:
            raise WorkerPoisoned("k", "timing k", "CUDA error: an illegal memory access was encountered")
        finally:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (freeing memory)")

    with pytest.raises(RuntimeError) as raised:
        cleanup_fails()
    found = poisoned_in(raised.value)
    assert found is not None and found.key == "k"
    assert poisoned_in(ValueError("ordinary")) is None
