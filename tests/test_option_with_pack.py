"""The best verified compiler option with the run's pack on top (issue 13 item 3): what is
measured, and what is reported instead of a number when it cannot be. The measurement itself
(gates 3 and 4 on a real arm) runs on the GPU (tests/gpu/test_gpu_optimize.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kernelopt_bot.compile_options import MIN_OPTION_S, measure_with_pack
from kernelopt_bot.harness.arm_process import ArmError, ArmTimeout
from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry
from kernelopt_bot.result import Recommendation, RunResult

BEST = Recommendation("mode=max-autotune-no-cudagraphs", 1.2, True, "1.2x > 1.03")


def _pack() -> KernelPack:
    pack = KernelPack()
    pack.add(PackEntry("a" * 64, "triton_per_fused__softmax_0", config=LaunchConfig({"XBLOCK": 4})))
    return pack


class _Arm:
    def __init__(self, applied: list[str], fails: ArmError | None = None) -> None:
        self.info = {"applied": applied}
        self.fails = fails
        self.closed = False

    def wait_ready(self) -> None:
        if self.fails is not None:
            raise self.fails

    def close(self) -> None:
        self.closed = True


class _Arena:
    device, dtype, timeout_s, mode, config = "cuda", "fp32", 600.0, None, {}
    end_by: float | None = None

    def __init__(self, arm: _Arm | None = None) -> None:
        self.arm = arm
        self.started: list[dict[str, Any]] = []

    def prestart(self) -> bool:
        return True

    def baselines(self) -> tuple[None, None]:
        return None, None

    def candidate(self, pack: KernelPack | None, **kwargs: Any) -> _Arm:
        assert self.arm is not None, "no arm may start"
        self.started.append({"pack": pack, **kwargs})
        return self.arm

    def settle(self) -> None:
        pass

    def room_for(self, wanted: int) -> int:
        return wanted


def test_nothing_to_measure_without_a_known_option_or_a_pack() -> None:
    arena = _Arena()
    assert measure_with_pack(arena, None, Recommendation("an option of no one's", 1.5, True), _pack(),  # type: ignore[arg-type]
                             gamma=1.03) is None
    assert measure_with_pack(arena, None, BEST, KernelPack(), gamma=1.03) is None  # type: ignore[arg-type]
    assert arena.started == []


def test_without_the_time_for_a_compile_it_is_reported_not_measured() -> None:
    arena = _Arena()
    found = measure_with_pack(arena, None, BEST, _pack(), gamma=1.03,  # type: ignore[arg-type]
                              time_left=lambda: MIN_OPTION_S - 1)
    assert found == Recommendation("mode=max-autotune-no-cudagraphs + pack", None, False,
                                   "not measured: the wall-time budget ran out")
    assert arena.started == []


def test_the_arm_compiles_the_option_with_the_pack_and_a_pack_that_applies_to_nothing_is_no_figure() -> None:
    arm = _Arm(applied=[])
    arena = _Arena(arm)
    found = measure_with_pack(arena, None, BEST, _pack(), gamma=1.03)  # type: ignore[arg-type]
    (started,) = arena.started
    assert started["mode"] == "max-autotune-no-cudagraphs" and len(started["pack"]) == 1
    assert found is not None and found.speedup is None and not found.verified
    assert "the pack applies to none of the kernels this option compiles" in found.detail
    assert arm.closed


def test_an_arm_that_does_not_compile_is_the_options_failure_and_one_we_stopped_is_not_measured() -> None:
    arm = _Arm(applied=[], fails=ArmError("the model raised: boom"))
    found = measure_with_pack(_Arena(arm), None, BEST, _pack(), gamma=1.03, time_left=lambda: 60.0)  # type: ignore[arg-type]
    assert found is not None and found.detail.startswith("failed: ") and "boom" in found.detail
    assert arm.closed
    # Stopped at the phase's deadline (what the wall budget left it), with time left to time it
    # had it compiled: the budget's doing, not the option's.
    arm = _Arm(applied=[], fails=ArmTimeout("still compiling when the 40 s ... ran out (stopped)", budget=True))
    found = measure_with_pack(_Arena(arm), None, BEST, _pack(), gamma=1.03, time_left=lambda: 60.0)  # type: ignore[arg-type]
    assert found is not None and found.detail == "not measured: the wall-time budget ran out while it compiled (stopped)"
    assert arm.closed
    # Killed at the arm's own limit: ours too, never "failed"
    arm = _Arm(applied=[], fails=ArmTimeout("arm: no answer to start within 600 s (killed)"))
    found = measure_with_pack(_Arena(arm), None, BEST, _pack(), gamma=1.03, time_left=lambda: 60.0)  # type: ignore[arg-type]
    assert found is not None and found.detail == "not measured: arm: no answer to start within 600 s (killed)"
    assert arm.closed


def test_compiled_with_no_time_left_to_check_and_time_it_is_not_measured() -> None:
    arm = _Arm(applied=["triton_per_fused__softmax_0"])
    left = iter([60.0, 5.0])  # enough to start the compile; not enough after it for gate 3 and the rounds
    found = measure_with_pack(_Arena(arm), None, BEST, _pack(), gamma=1.03, time_left=lambda: next(left))  # type: ignore[arg-type]
    assert found == Recommendation("mode=max-autotune-no-cudagraphs + pack", None, False,
                                   "not measured: the wall-time budget ran out after its compile")
    assert arm.closed


def test_the_option_with_the_pack_reports_no_configs_of_its_own() -> None:
    """Its kernels' configs are the pack's where it applied: not what the option's compile chose."""
    arm = _Arm(applied=["triton_per_fused__softmax_0"])
    arm.info["configs"] = {"triton_per_fused__softmax_0": "XBLOCK=4, num_warps=8, num_stages=1"}
    left = iter([60.0, 5.0])
    found = measure_with_pack(_Arena(arm), None, BEST, _pack(), gamma=1.03, time_left=lambda: next(left))  # type: ignore[arg-type]
    assert found is not None and found.configs == {}


def test_an_error_measuring_it_never_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's own results are measured before this figure: whatever goes wrong in it is
    reported in its place, and the run stays ok."""
    from kernelopt_bot import compile_options
    from kernelopt_bot.schedule import OptionSteps

    def broken(*_a: Any, **_k: Any) -> Recommendation:
        raise RuntimeError("the arm's pipe closed")

    monkeypatch.setattr(compile_options, "measure_with_pack", broken)
    result = RunResult(target="m.py", name="m", device="cuda", dtype="fp32", speedup=1.2,
                       recommendations=[BEST])
    budget = SimpleNamespace(max_wall_s=110.0, elapsed_s=lambda: 50.0)
    logged: list[str] = []
    steps = OptionSteps(_Arena(), SimpleNamespace(device="cuda"), budget, 1.03, 10, 20.0, compile_s=0.0,
                        template_s=0.0, model_ms=None, candidate_s=lambda trusted: 10.0, log=logged.append)
    steps.with_pack(_pack(), result)
    assert result.status == "ok" and result.option_with_pack == Recommendation(
        "mode=max-autotune-no-cudagraphs + pack", None, False, "not measured: RuntimeError: the arm's pipe closed")
    assert logged[0] == "measuring the best option with the pack"
