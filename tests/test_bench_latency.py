"""The end-to-end comparison reports GPU time and host-inclusive latency side by side."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from kernelopt_bot.harness import bench
from kernelopt_bot.harness.bench import compare_arms
from kernelopt_bot.harness.timing import Timing, time_model
from tests.helpers import ROOT


class _Arm:
    """An arm answering as a model arm does on a GPU: ``(gpu_ms, host_ms)`` per timing request;
    ``jitter`` moves its host latency up in odd rounds (seeds) and down in even ones."""

    where = "process"

    def __init__(self, gpu_ms: float, host_ms: float, jitter: float = 0.0) -> None:
        self.gpu_ms, self.host_ms, self.jitter, self.calls = gpu_ms, host_ms, jitter, 0
        self.info: dict[str, Any] = {"applied": [], "skipped": []}
        self.ready = True

    def request(self, op: str, *args: Any, **_kwargs: Any) -> Any:
        if op == "outputs":
            return [torch.ones(4)]
        self.calls += 1
        wobble = self.jitter if args[0] % 2 else -self.jitter
        return (self.gpu_ms, self.host_ms * (1.0 + wobble))


@pytest.fixture(autouse=True)
def _outputs_compared_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The arms' outputs are compared on the CPU: this machine has no CUDA to compare them on."""
    real = bench._max_abs_diff
    monkeypatch.setattr(bench, "_max_abs_diff", lambda a, b, _device="cpu": real(a, b, "cpu"))


def test_host_latency_is_summarised_beside_gpu_time() -> None:
    result = compare_arms(_Arm(1.0, 3.0), _Arm(0.5, 1.0), _Arm(1.0, 3.0, jitter=0.02), target="t",
                          device="cuda", dtype="fp32", rounds=4)
    assert result.speedup == 2.0 and result.noise_floor == 0.0
    assert result.baseline_host_ms == 3.0 and result.packed_host_ms == 1.0
    assert abs(result.host_noise_floor - 0.02 / 0.98) < 1e-9  # the repeat's jitter, relative
    rounds = result.to_json()["rounds"]
    assert rounds[0]["baseline_host_ms"] == 3.0 and rounds[0]["packed_host_ms"] == 1.0


def test_one_baseline_is_timed_twice_a_round_for_the_noise_floor() -> None:
    """A model too large for two baseline processes: the one baseline answers both baseline
    turns of every round, and the result says where its noise floor came from."""
    base = _Arm(1.0, 3.0)
    result = compare_arms(base, _Arm(0.5, 1.0), None, target="t", device="cuda", dtype="fp32", rounds=4)
    # 2: the warm-up's passes (steady from the second)
    assert base.calls == 2 + 2 * 4 * bench.PASSES_PER_ROUND and result.speedup == 2.0 and result.warmup_passes == 2
    assert result.noise_floor == 0.0 and result.host_noise_floor == 0.0
    assert "one baseline process" in result.noise_from and "one baseline" in result.to_json()["noise_from"]


class _SharedDevice:
    """Arms of one model on one machine whose state every timing request moves, whichever arm
    asks: ``answer(requests so far, the arm's GPU scale)`` is a request's (GPU ms, host ms)."""

    def __init__(self, answer: Callable[[int, float], tuple[float, float | None]]) -> None:
        self.requests, self.answer = 0, answer

    def arm(self, gpu_scale: float = 1.0) -> Any:
        device = self

        class _OnTheDevice(_Arm):
            def request(self, op: str, *args: Any, **kwargs: Any) -> Any:
                if op == "outputs":
                    return [torch.ones(4)]
                device.requests += 1
                return device.answer(device.requests, gpu_scale)

        return _OnTheDevice(1.0, 0.0)


def _drifting_device() -> _SharedDevice:
    """A device that slows down steadily: every timing request makes the next one 1% slower
    (clocks dropping as the GPU heats)."""
    return _SharedDevice(lambda n, _scale: (1.0 + 0.01 * n, None))


@pytest.mark.parametrize("passes", [1, 4])
def test_mirrored_passes_cancel_a_drift_of_the_device(monkeypatch: pytest.MonkeyPatch, passes: int) -> None:
    """Timed one arm after the other, a drift reads as the arms differing (the baseline against
    itself off by 2% a round); in mirrored passes every arm has the same median under it."""
    monkeypatch.setattr(bench, "PASSES_PER_ROUND", passes)
    device = _drifting_device()
    arms = [device.arm(), device.arm(), device.arm()]
    arms[0].info["cache"] = {"hit": 1, "miss": 0, "bypass": 0}  # how each started, as a model arm says
    arms[1].info.update(cache={"hit": 1, "miss": 0, "bypass": 0}, warm_load={"cold_compile_s": 9.0, "load_s": 3.0,
                        "cold_start_phases_s": {"import": 2.0, "target": 1.0, "setup": 0.1, "first_call": 6.0}},
                        start_phases_s={"import": 2.0, "target": 0.5, "setup": 0.1, "first_call": 0.5})
    arms[2].info["cache"] = {"hit": 0, "miss": 1, "bypass": 0}
    result = compare_arms(*arms, target="t", device="cuda", dtype="fp32", rounds=3)
    assert device.requests == 3 * result.warmup_passes + 3 * 3 * passes
    if passes == 1:
        assert result.noise_floor is not None and result.noise_floor > 0.005  # about 1% a round
    else:
        # the passes paired in time: the drift cancels to second order (0.01% against 1%)
        assert result.noise_floor is not None and result.noise_floor < 5e-4
        assert result.speedup is not None and abs(result.speedup - 1.0) < 5e-4


def _host_switching_device() -> _SharedDevice:
    """A host that switches between a fast and a slow state every five requests, whichever arm
    asks (the H100 of 12-05d: 0.87 and 1.6 ms a call); an arm's GPU scale is its kernels' share
    of the call (the host latency is the same in every arm)."""
    def answer(n: int, scale: float) -> tuple[float, float]:
        slow = 1.8 if (n // 5) % 3 == 0 else 1.0
        return (scale * slow, 2.0 * slow)
    return _SharedDevice(answer)


def test_the_host_latency_is_paired_by_pass_as_the_gpu_time_is() -> None:
    """The host's state changes between runs of requests; within a pass the arms mostly share it.
    The GPU speedup reads the kernels' 10%, the host latency's none, and both baselines agree."""
    device = _host_switching_device()
    result = compare_arms(device.arm(1.0), device.arm(0.9), device.arm(1.0), target="t", device="cuda",
                          dtype="fp32", rounds=10)
    assert result.speedup == pytest.approx(1 / 0.9) and result.noise_floor == pytest.approx(0.0)
    assert result.host_speedup == pytest.approx(1.0) and result.host_noise_floor == pytest.approx(0.0)
    rounds = result.to_json()["rounds"]
    assert all(len(r["packed_host_passes_ms"]) == bench.PASSES_PER_ROUND for r in rounds)
    assert {x for r in rounds for x in r["baseline_host_passes_ms"]} == {2.0, 3.6}  # both states were timed


def test_pass_orders_mirror_the_rounds_rotation() -> None:
    turns = ["A", "B", "C"]
    assert bench.pass_orders(turns, 0) == [["A", "B", "C"], ["C", "B", "A"]] * (bench.PASSES_PER_ROUND // 2)
    assert bench.pass_orders(turns, 1)[:2] == [["B", "C", "A"], ["A", "C", "B"]]


def test_without_host_latency_only_gpu_time_is_summarised() -> None:
    class _GpuOnly(_Arm):
        def request(self, op: str, *args: Any, **kwargs: Any) -> Any:
            answer = super().request(op, *args, **kwargs)
            return answer if op == "outputs" else (answer[0], None)

    result = compare_arms(_GpuOnly(1.0, 0.0), _GpuOnly(0.8, 0.0), _GpuOnly(1.0, 0.0), target="t",
                          device="cuda", dtype="fp32", rounds=2)
    assert result.speedup == 1.25 and result.baseline_host_ms is None and result.host_noise_floor is None


def test_a_model_timed_on_the_cpu_answers_nothing() -> None:
    calls = []
    timing = time_model("cpu", lambda: calls.append(1), reps=5)
    assert not timing.measured and timing.reply() is None and calls == [1]
    assert Timing(2.0, [2.0], host_ms=3.0).reply() == (2.0, 3.0)


def test_the_device_watch_measures_nothing_without_cuda() -> None:
    from kernelopt_bot.harness.device_watch import DeviceMemoryWatch

    with DeviceMemoryWatch("cpu") as watch:
        pass
    assert watch.peak_mb is None


def test_the_device_peak_is_split_by_the_runs_phase() -> None:
    """Which phase holds the memory (the engine's capture, the search, the arms of the final
    benchmark) is what a plan to cut the peak needs; readings outside a phase count overall only."""
    from kernelopt_bot.harness.device_watch import DeviceMemoryWatch
    from kernelopt_bot.harness.timing import StepClock

    clock = StepClock()
    watch = DeviceMemoryWatch("cuda", phase=lambda: clock.current)
    watch.record(100.0)
    clock.begin("searching")
    watch.record(300.0, 120.0)
    watch.record(200.0, 150.0)
    clock.begin("end-to-end benchmark")
    watch.record(500.0)
    clock.stop()
    watch.record(50.0)
    assert watch.peak_mb == 500.0
    assert watch.peaks_by_phase == {"searching": 300.0, "end-to-end benchmark": 500.0}
    assert watch.engine_peaks_by_phase == {"searching": 150.0}


def test_the_processes_line_puts_the_device_peak_beside_the_models_own_memory() -> None:
    from kernelopt_bot.pipeline import _processes_line

    line = _processes_line({"started": 5, "sandboxes": 1, "peak_gpu_mb": 900.0, "device_peak_mb": 3000.0,
                            "model_gpu_mb": 1000.0})
    assert "processes started: 5" in line and "3000 MiB on the device" in line and "(3.0x)" in line
    phases = _processes_line({"started": 5, "sandboxes": 0, "peak_gpu_mb": 900.0, "device_peak_mb": 3000.0,
                              "device_peak_mb_by_phase": {"searching": 1200.4, "end-to-end benchmark": 3000.0},
                              "engine_peak_mb_by_phase": {"searching": 800.0}})
    assert "searching 1200 MiB (800), end-to-end benchmark 3000 MiB" in phases
    cpu = _processes_line({"started": 2, "sandboxes": 0, "peak_gpu_mb": None})
    assert "not measured in the engine" in cpu and "device" not in cpu
    split = _processes_line({"started": 8, "sandboxes": 0, "long_lived": 4, "peak_gpu_mb": None})
    assert "processes started: 8 (the engine and its children; 0 sandbox(es)), 4 serving the whole run " \
           "and 4 for one job each;" in split


def test_the_device_peak_says_how_many_processes_held_a_cuda_context_then() -> None:
    """A small model's peak is mostly CUDA contexts (17x the MLP on the H100): the watch measures
    the engine's context while it is alone on the device (never above the cap), counts what is
    beyond the contexts of the processes alive at every reading, and keeps the largest, which a
    phase with fewer processes can hold though the overall peak is elsewhere (the search's 4.7x
    against the options' 2.3x on the H100, 12-07)."""
    from kernelopt_bot.harness.device_watch import DeviceMemoryWatch
    from kernelopt_bot.pipeline import _processes_line

    running = [1]
    phase = ["loading"]
    watch = DeviceMemoryWatch("cuda", processes=lambda: running[0], context_mb=600.0, phase=lambda: phase[0])
    watch.record(500.0, 0.0)  # the engine alone, before anything ran
    watch.record(930.0, 400.0)  # still alone, its libraries loaded: its context is 530 MiB
    assert watch.context_measured and watch.context_mb == 530.0
    watch.record(900.0, 400.0)  # a smaller reading does not shrink it
    assert watch.context_mb == 530.0
    running[0], phase[0] = 3, "searching"
    watch.record(3000.0, 1300.0)  # 1410 beyond three contexts
    running[0], phase[0] = 6, "options"
    watch.record(3800.0, 100.0)  # the overall peak, 620 beyond six
    running[0] = 5
    watch.record(2000.0)  # more processes, less memory: not the peak
    assert watch.peak_mb == 3800.0 and watch.processes_at_peak == 6
    assert watch.peak_beyond_mb == 3000.0 - 3 * 530.0 and watch.processes_at_peak_beyond == 3
    assert watch.phase_at_peak_beyond == "searching"
    line = _processes_line({"started": 6, "sandboxes": 0, "peak_gpu_mb": 100.0, "device_peak_mb": 3800.0,
                            "model_gpu_mb": 200.0, "device_peak_processes": 6, "context_mb": 530.0,
                            "context_measured": True, "beyond_contexts_mb": 1410.0,
                            "beyond_contexts_processes": 3, "beyond_contexts_phase": "searching"})
    assert "(19.0x)" in line and "6 process(es) on the GPU at that peak" in line
    assert ("beyond the CUDA contexts of the processes alive at each reading (530 MiB each, measured in the "
            "engine), at most 1410 MiB (7.0x the model), with 3 process(es) on the GPU (searching)") in line


def test_a_context_is_never_taken_larger_than_the_cap() -> None:
    """Another user of the device at the first reading would make the engine's context look large,
    and every reading's figure beyond the contexts small: the cap holds."""
    from kernelopt_bot.harness.device_watch import DeviceMemoryWatch

    watch = DeviceMemoryWatch("cuda", processes=lambda: 1, context_mb=600.0)
    watch.record(9000.0, 0.0)
    assert watch.context_mb == 600.0 and watch.peak_beyond_mb == 8400.0
    late = DeviceMemoryWatch("cuda", processes=lambda: 2, context_mb=600.0)
    late.record(1500.0, 100.0)  # not alone: nothing measured, the cap stands
    assert not late.context_measured and late.context_mb == 600.0


def test_the_running_children_are_counted_by_name(tmp_path: Path) -> None:
    """What the device watch counts: isolated children alive now, a name left out on request."""
    from kernelopt_bot.harness.isolation import processes_alive, spawn_isolated

    before = processes_alive()
    beat = str(tmp_path / "beat")
    child = spawn_isolated("tests.isolation_probe.heartbeat", beat, writable=[str(tmp_path)], name="kernelopt-test-count")
    try:
        assert processes_alive() == before + 1
        assert processes_alive(excluding=("kernelopt-test-count",)) == before
    finally:
        child.close()
    assert processes_alive() == before


def test_the_processes_that_serve_the_whole_run_are_told_from_one_measurement_arms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12 asks for at most 4 long-lived processes a run: the engine, the compile process and
    the two baseline arms serve the whole run; an option's arm and the final benchmark's are
    fresh processes for one measurement each (the trusted way the reported number is measured),
    and a sandbox runs one untrusted candidate's job."""
    from kernelopt_bot.harness import isolation
    from kernelopt_bot.pipeline import _process_counts

    started = {"kernelopt-compile": 1, "kernelopt-baseline": 1, "kernelopt-baseline-repeat": 1, "kernelopt-final": 1,
               "kernelopt-mode=max-autotune-no-cudagraphs": 1, "kernelopt-coordinate_descent_tuning=True": 1,
               "kernelopt-sandbox": 3}
    monkeypatch.setattr(isolation, "_started", started)
    counts = _process_counts("cpu")
    assert counts["started"] == 10 and counts["long_lived"] == 4 and counts["sandboxes"] == 3


class _SettlingArm(_Arm):
    """An arm whose first timing requests come back slow by ``factors`` (something else had the
    machine, more at first, less later), then steady."""

    def __init__(self, gpu_ms: float, factors: list[float]) -> None:
        super().__init__(gpu_ms, gpu_ms)
        self.factors = factors

    def request(self, op: str, *args: Any, **kwargs: Any) -> Any:
        reply = super().request(op, *args, **kwargs)
        if op == "time" and self.calls <= len(self.factors):
            factor = self.factors[self.calls - 1]
            return (reply[0] * factor, reply[1] * factor)
        return reply


def test_the_rounds_start_once_every_arm_times_steadily() -> None:
    """A disturbance at the start lasts through the warm-up, not into the rounds: the baseline
    against itself then reads 0, where three disturbed rounds of ten read 50%."""
    base, packed, repeat = _SettlingArm(1.0, [1.6, 1.3, 1.2]), _SettlingArm(0.5, [1.5, 1.2]), _SettlingArm(1.0, [])
    result = compare_arms(base, packed, repeat, target="t", device="cuda", dtype="fp32", rounds=4)
    assert result.warmup_passes == 5  # base slow in passes 1-3, steady in 4 and 5
    assert result.noise_floor == 0.0 and result.speedup == 2.0


def test_the_warm_up_ends_after_its_time_even_if_an_arm_never_settles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "WARMUP_MAX_S", 0.0)
    base = _SettlingArm(1.0, [1.5, 1.2, 1.4, 1.1] * 10)
    result = compare_arms(base, _Arm(0.5, 0.5), _Arm(1.0, 1.0), target="t", device="cuda", dtype="fp32", rounds=2)
    assert result.warmup_passes == 1 and result.speedup is not None


def test_each_rounds_passes_are_kept_for_the_noise_table(tmp_path: Path) -> None:
    """The per-pass times reach the JSON, and scripts/noise_table.py recomputes from them the
    harness's floor and the one of the rounds' medians it used before."""
    device = _drifting_device()
    arms = [device.arm(), device.arm(), device.arm()]
    arms[0].info["cache"] = {"hit": 1, "miss": 0, "bypass": 0}  # how each started, as a model arm says
    arms[1].info.update(cache={"hit": 1, "miss": 0, "bypass": 0}, warm_load={"cold_compile_s": 9.0, "load_s": 3.0,
                        "cold_start_phases_s": {"import": 2.0, "target": 1.0, "setup": 0.1, "first_call": 6.0}},
                        start_phases_s={"import": 2.0, "target": 0.5, "setup": 0.1, "first_call": 0.5},
                        setup_parts_s={"compiler": 0.0, "driver": 0.0, "settings": 0.0, "pack": 0.1, "inputs": 0.0,
                                       "hooks": 0.0})
    arms[2].info["cache"] = {"hit": 0, "miss": 1, "bypass": 0}
    # each arm's autotuned configs: the repeat settled one kernel otherwise; the packed arm's other
    # config is its pack's own kernel's, which does not count
    arms[0].info["configs"] = {"k_red": "XBLOCK=8, num_warps=4", "k_pw": "XBLOCK=512, num_warps=4"}
    arms[1].info.update(configs={"k_red": "XBLOCK=8, num_warps=4", "k_pw": "XBLOCK=256, num_warps=2"},
                        applied=["k_pw"])
    arms[2].info["configs"] = {"k_red": "XBLOCK=16, num_warps=8", "k_pw": "XBLOCK=512, num_warps=4"}
    result = compare_arms(*arms, target="t", device="cuda", dtype="fp32", rounds=3)
    assert result.arm_starts["baseline-repeat"]["configs_unlike_baseline"] == ["k_red"]
    assert result.arm_starts["packed"]["configs_unlike_baseline"] == []
    rounds = result.to_json()["rounds"]
    assert all(len(r[f"{arm}_passes_ms"]) == bench.PASSES_PER_ROUND
               for r in rounds for arm in ("baseline", "packed", "baseline_repeat"))
    # in pass order: under the drift every arm's passes grow
    assert rounds[0]["baseline_passes_ms"] == sorted(rounds[0]["baseline_passes_ms"])
    path = tmp_path / "noise_drift.json"
    path.write_text(json.dumps(result.to_json()))
    table = subprocess.run([sys.executable, str(ROOT / "scripts" / "noise_table.py"), str(path)], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
    assert table.returncode == 0, table.stderr
    line = table.stdout.splitlines()[2]  # the noise table's one row (the start table follows)
    assert line.startswith("| drift |"), table.stdout
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == f"{100 * result.noise_floor:.2f}%"  # as the harness wrote it
    assert cells[4] == cells[3]  # recomputed from the stored passes: the same estimator
    assert float(cells[4][:-1]) < 0.1  # paired passes in mirrored order cancel a linear drift to second order
    assert cells[5] == "0.00%"  # the medians, as before 12-05: mirrored passes cancel a linear drift exactly
    assert float(cells[6][:-1]) < 0.1  # one A/A through the paired median
    assert cells[10] == str(result.pass_reps)  # the calls each pass made
    assert cells[11] == "loaded / replaced / compiled"  # arms that compare must start alike: these did not
    assert cells[12] == "0 / 1"  # kernels autotuned otherwise than the baseline (packed / repeat)
    # where the packed arm's start went, and the cold start it replaced; the others did not say
    assert ("| drift | packed | replaced | 2.0 + 0.5 + 0.1 + 0.5 | 0.0 + 0.0 + 0.0 + 0.1 + 0.0 + 0.0 | 2.0 + 1.0 + 0.1 + 6.0 |"
            in table.stdout.splitlines())
    assert not [row for row in table.stdout.splitlines() if row.startswith(("| drift | baseline |", "| drift | baseline-repeat |"))]


class _CountingArm(_Arm):
    """Counts the model calls its "time" requests would make in an arm: the pass's timed calls,
    ``time_model``'s two warm-up calls and as many host-latency calls as timed ones."""

    def __init__(self, call_ms: float = 1.0) -> None:
        super().__init__(call_ms, call_ms)
        self.model_calls = 0

    def request(self, op: str, *args: Any, **kwargs: Any) -> Any:
        if op == "time":
            self.model_calls += 2 * args[1] + 2
        return super().request(op, *args, **kwargs)


def test_the_planned_time_of_a_comparison_counts_the_calls_it_makes() -> None:
    """Options are started and checked only with the time their comparison takes
    (:func:`bench.compare_seconds`): its count of model calls is the harness's own."""
    arms = [_CountingArm() for _ in range(3)]
    compare_arms(*arms, target="t", device="cuda", dtype="fp32", rounds=10, reps=20)
    calls = sum(a.model_calls for a in arms)
    warm_up = sum(2 * bench._pass_reps(20) + 2 for _ in range(3)) * 2  # two steady warm-up passes an arm
    per_ms = (bench.compare_seconds(1.0, 10, 20) - bench.compare_seconds(0.0, 10, 20)) * 1000.0
    assert per_ms == pytest.approx(calls - warm_up)  # the rounds' calls; warm-up is WARMUP_MAX_S at most
    # a 20 ms call (an fp32 GEMM-bound model) takes half a minute to compare, not 10 s
    assert 25.0 < bench.compare_seconds(20.0, 10, 20) < 35.0


def test_a_slow_models_comparison_takes_fewer_rounds_that_fit_its_time() -> None:
    """A 1 ms model keeps its ten rounds; a 31 ms one (whose ten took 47 s on the H200, and left its
    compiler options no time) takes as many as fit COMPARE_WITHIN_S, never fewer than MIN_ROUNDS;
    a plan that asked for fewer keeps them. The plan fits its rounds once, for the whole run."""
    from kernelopt_bot.plan import RunPlan

    assert bench.rounds_within(1.0, 10) == 10
    assert bench.rounds_within(None, 10) == bench.rounds_within(0.0, 10) == 10
    fitted = bench.rounds_within(12.0, 10)
    assert bench.MIN_ROUNDS < fitted < 10
    assert bench.compare_seconds(12.0, fitted, 20) <= bench.COMPARE_WITHIN_S < bench.compare_seconds(12.0, fitted + 1, 20)
    assert bench.rounds_within(31.0, 10) == bench.MIN_ROUNDS
    assert bench.rounds_within(31.0, 2) == 2
    plan = RunPlan.parse(None)
    assert plan.for_model(1.0) is plan
    assert plan.for_model(31.0).rounds == bench.MIN_ROUNDS
    assert plan.for_model(31.0).verify_options().rounds == bench.MIN_ROUNDS
    # a training step's comparison also times its halves: it fits fewer rounds
    assert bench.compare_seconds(5.0, 10, 20, split_step=True) > 2 * bench.compare_seconds(5.0, 10, 20) - bench.WARMUP_MAX_S
    assert plan.for_model(5.0, train=True).rounds < plan.for_model(5.0).rounds


class _ClockedArm(_Arm):
    """An arm on a test clock: each timing request takes ``step_s`` of it; the seeds its outputs
    were asked for are kept."""

    def __init__(self, now: list[float], step_s: float, gpu_ms: float) -> None:
        super().__init__(gpu_ms, gpu_ms)
        self.now, self.step_s, self.output_seeds = now, step_s, []

    def request(self, op: str, *args: Any, **kwargs: Any) -> Any:
        if op == "outputs":
            self.output_seeds.append(args[0])
        else:
            self.now[0] += self.step_s
        return super().request(op, *args, **kwargs)


def test_a_comparison_stops_before_a_round_that_would_end_past_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once MIN_ROUNDS are timed, no round starts that would end past ``end_by`` (as long as the
    last took: an option's rounds on the H200 once took 36 s where 10 were planned); the result
    has the rounds it timed, says how many were asked for, and re-checks the outputs on the last
    round it timed. Without a deadline every round runs."""
    now = [0.0]
    monkeypatch.setattr(bench, "time", SimpleNamespace(monotonic=lambda: now[0]))
    base, packed, repeat = (_ClockedArm(now, 0.1, ms) for ms in (1.0, 0.5, 1.0))
    # A round is 4 passes of 3 arms, 1.2 s; the warm-up 2 passes, 0.6 s. Three rounds end at 4.2 s,
    # a fourth would end at 5.4 s: past 5.0, so it does not start (it would have at 4.2 s < 5.0).
    result = compare_arms(base, packed, repeat, target="t", device="cuda", dtype="fp32", rounds=10, end_by=5.0)
    assert len(result.rounds) == bench.MIN_ROUNDS and result.rounds_planned == 10
    assert [r.seed for r in result.rounds] == [bench.SEED_BASE + i for i in range(bench.MIN_ROUNDS)]
    assert base.output_seeds[-1] == packed.output_seeds[-1] == bench.SEED_BASE + bench.MIN_ROUNDS - 1
    assert result.speedup == 2.0 and result.noise_floor == 0.0
    # Past the deadline before the first round: the fewest rounds still run, so there is a figure
    result = compare_arms(*(_ClockedArm(now, 0.1, 1.0) for _ in range(3)), target="t", device="cuda",
                          dtype="fp32", rounds=10, end_by=now[0] - 1.0)
    assert len(result.rounds) == bench.MIN_ROUNDS
    result = compare_arms(*(_ClockedArm(now, 0.1, 1.0) for _ in range(3)), target="t", device="cuda",
                          dtype="fp32", rounds=10, end_by=None)
    assert len(result.rounds) == result.rounds_planned == 10


@pytest.mark.parametrize(("call_ms", "pass_reps"), [(0.5, 24), (1.0, 12), (4.0, 5), (None, 5), (float("nan"), 5)])
def test_a_fast_models_passes_make_more_calls(call_ms: float | None, pass_reps: int) -> None:
    """A pass lasts at least MIN_PASS_MS where calls are cheap (a launch-bound network's 5-call
    passes jittered by 4% on the H200), up to MAX_PASS_REPS; a slow model keeps its share of
    ``reps``. The comparison takes the count from the warm-up's time a call, and plans by it."""
    assert bench._pass_reps(20, call_ms) == pass_reps
    if call_ms is not None and call_ms == call_ms:
        arms = [_CountingArm(call_ms) for _ in range(3)]
        result = compare_arms(*arms, target="t", device="cuda", dtype="fp32", rounds=3, reps=20)
        assert result.pass_reps == pass_reps and result.to_json()["pass_reps"] == pass_reps
        warm_up = 3 * result.warmup_passes * (2 * bench._pass_reps(20) + 2)
        per_call = (bench.compare_seconds(call_ms, 3, 20) - bench.compare_seconds(0.0, 3, 20)) * 1000.0 / call_ms
        assert per_call == pytest.approx(sum(a.model_calls for a in arms) - warm_up)


class _WhereArm(_Arm):
    """Records the cores the asking thread may run on while it is asked to time."""

    def __init__(self, where: str) -> None:
        super().__init__(1.0, 1.0)
        self.where = where
        self.cores: list[set[int]] = []

    def request(self, op: str, *args: Any, **kwargs: Any) -> Any:
        if op == "time":
            self.cores.append(os.sched_getaffinity(0))
        return super().request(op, *args, **kwargs)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux's CPU affinity")
@pytest.mark.parametrize("where", ["process", "engine"])
def test_the_asking_thread_times_on_the_arms_core_only_for_process_arms(where: str) -> None:
    """Arms in processes time on one core (harness.cpu_pin), and the thread asking them runs there
    while it compares them, then gets its cores back; an arm in this process is not pinned (its
    work, and any thread pool it starts, would keep that one core)."""
    from kernelopt_bot.harness.cpu_pin import timing_core

    cores = os.sched_getaffinity(0)
    arms = [_WhereArm(where) for _ in range(3)]
    compare_arms(*arms, target="t", device="cuda", dtype="fp32", rounds=3)
    expected = {timing_core()} if where == "process" else cores
    assert all(seen == expected for arm in arms for seen in arm.cores) and os.sched_getaffinity(0) == cores


def test_the_memory_sampler_waits_while_arms_are_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of ours runs while arms are timed (issue 12): the engine's device-memory sampler,
    which asks the driver five times a second, skips its turns during a comparison's rounds and
    samples again after them. The comparison marks exactly its timed rounds."""
    import threading
    import time

    from kernelopt_bot.harness import quiet
    from kernelopt_bot.harness.device_watch import DeviceMemoryWatch

    samples: list[bool] = []
    sampled = threading.Event()

    def sample(_self: DeviceMemoryWatch) -> None:
        samples.append(quiet.timing_now())
        sampled.set()

    monkeypatch.setattr(DeviceMemoryWatch, "sample", sample)

    class _SlowArm(_Arm):
        def __init__(self) -> None:
            super().__init__(1.0, 1.0)
            self.timing: list[bool] = []

        def request(self, op: str, *args: Any, **kwargs: Any) -> Any:
            self.timing.append(quiet.timing_now())
            if op == "time":
                time.sleep(0.01)  # long enough for the sampler to have had turns
            return super().request(op, *args, **kwargs)

    arms = [_SlowArm() for _ in range(3)]
    with DeviceMemoryWatch("cuda", interval_s=0.005):
        compare_arms(*arms, target="t", device="cuda", dtype="fp32", rounds=3)
        sampled.clear()
        assert sampled.wait(5.0)  # sampling again after the rounds
    assert not any(samples)  # never a sample while timing
    assert all(arms[0].timing[1:-1]) and not arms[0].timing[0] and not arms[0].timing[-1]  # outputs before, after
    assert not quiet.timing_now()


def test_the_bench_summary_says_which_arms_were_restarted_from_the_cache(capsys: pytest.CaptureFixture[str]) -> None:
    """A user who sees a bench take longer on a cold cache is told why, and told where an arm
    could not be restarted (its numbers then carry a cold start)."""
    from kernelopt_bot.cli import render

    result = compare_arms(_Arm(1.0, 1.0), _Arm(0.9, 0.9), _Arm(1.0, 1.0), target="t", device="cuda", dtype="fp32",
                          rounds=2)
    render.bench_pack("t [cuda, fp32]", "pack.json", 1, result)
    out = " ".join(capsys.readouterr().out.split())
    assert "restarted" not in out  # every arm loaded: nothing to say
    # the times are medians, the speedups paired by pass: the summary says which is which
    assert "baseline 1.0000 ms, packed 0.9000 ms (medians), speedup 1.111x (median of the passes' paired ratios)" in out
    assert "host-inclusive latency of a call: 1.0000 ms -> 0.9000 ms, 1.111x, noise floor 0.00%" in out
    result.arm_starts = {"baseline": {"warm_load": {"cold_compile_s": 9.0, "load_s": 3.0}},
                         "packed": {"warm_load": {"cold_compile_s": 9.5, "load_s": 3.1}},
                         "baseline-repeat": {"warm_load": "not replaced: 4 s of its start's limit left, its load needs 10"}}
    render.bench_pack("t [cuda, fp32]", "pack.json", 1, result)
    out = " ".join(capsys.readouterr().out.split())
    assert "baseline, packed: compiled the model cold, then restarted from the compiler's cache" in out
    assert "baseline-repeat: timed as it compiled (not replaced: 4 s of its start's limit left" in out
    assert "autotuned" not in out
    result.arm_starts["baseline-repeat"]["configs_unlike_baseline"] = ["k1", "k2", "k3", "k4"]
    render.bench_pack("t [cuda, fp32]", "pack.json", 1, result)
    out = " ".join(capsys.readouterr().out.split())
    assert "baseline-repeat: its compile autotuned 4 kernel(s) to other launch configs than the baseline's " \
           "(k1, k2, k3 and 1 more)" in out
