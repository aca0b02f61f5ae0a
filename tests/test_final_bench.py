"""The final benchmark keeps gate 4's measurement only when the pack is exactly what gate 4 timed."""

from __future__ import annotations

from typing import Any

from kernelopt_bot.final_bench import measured_in_this_run
from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry
from kernelopt_bot.result import KernelOutcome, RunResult

GATE4 = {"name": "performance", "passed": True, "reason": "1.2x",
         "numbers": {"baseline_ms": 1.2, "packed_ms": 1.0, "speedup": 1.2, "noise_floor": 0.003,
                     "arms": "process"}}


def _entry(name: str, gates: list[dict[str, Any]], accepted: int = 1) -> PackEntry:
    return PackEntry(f"key-{name}", name, config=LaunchConfig({"XBLOCK": 4}, 4, 1),
                     measured={"gates": gates, "accepted_candidates": accepted})


def _result(*outcomes: tuple[str, str]) -> RunResult:
    result = RunResult(target="t.py", name="t", device="cuda", dtype="bf16")
    result.kernels = [KernelOutcome(name, "reduction", status=status) for name, status in outcomes]
    return result


def _pack(*entries: PackEntry) -> KernelPack:
    pack = KernelPack(target="t.py")
    for entry in entries:
        pack.add(entry)
    return pack


def test_one_entry_accepted_in_this_run_keeps_gate_4s_numbers() -> None:
    numbers = measured_in_this_run(_pack(_entry("k0", [GATE4])), _result(("k0", "accepted")))
    assert numbers is not None and numbers["speedup"] == 1.2 and numbers["noise_floor"] == 0.003


def test_cached_entries_combinations_and_unmeasured_gates_are_benchmarked_again() -> None:
    assert measured_in_this_run(_pack(_entry("k0", [GATE4])), _result(("k0", "cached (verified)"))) is None
    two = _pack(_entry("k0", [GATE4]), _entry("k1", [GATE4]))
    assert measured_in_this_run(two, _result(("k0", "accepted"), ("k1", "accepted"))) is None
    failed = dict(GATE4, passed=False)
    assert measured_in_this_run(_pack(_entry("k0", [failed])), _result(("k0", "accepted"))) is None
    assert measured_in_this_run(_pack(_entry("k0", [])), _result(("k0", "accepted"))) is None
    best_of_two = _pack(_entry("k0", [GATE4], accepted=2))  # the larger of two noisy numbers
    assert measured_in_this_run(best_of_two, _result(("k0", "accepted"))) is None


def test_gate_4_in_the_engine_is_never_the_reported_number() -> None:
    """A trusted candidate's gate 4 ran on the engine's model with its kernel swapped in: the
    final benchmark measures the pack again in fresh processes (install, then a fresh compile)."""
    in_engine = {**GATE4, "numbers": {**GATE4["numbers"], "arms": "engine"}}
    assert measured_in_this_run(_pack(_entry("k0", [in_engine])), _result(("k0", "accepted"))) is None
    unlabelled = {**GATE4, "numbers": {k: v for k, v in GATE4["numbers"].items() if k != "arms"}}
    assert measured_in_this_run(_pack(_entry("k0", [unlabelled])), _result(("k0", "accepted"))) is None


def test_a_one_entry_packs_fresh_number_is_its_kernels_reported_speedup() -> None:
    from kernelopt_bot.final_bench import report_fresh_kernel_speedup

    pack, result = _pack(_entry("k0", [GATE4])), _result(("k0", "accepted"), ("k1", "no proposal"))
    result.kernels[0].speedup = 1.2
    report_fresh_kernel_speedup(pack, result, 1.1)
    entry = next(iter(pack.entries.values()))
    assert entry.measured["speedup"] == 1.1 and entry.measured["gates"] == [GATE4]  # gate 4's number kept there
    assert result.kernels[0].speedup == 1.1 and result.kernels[1].speedup is None


COLD = {"cache": {"hit": 0, "miss": 2, "bypass": 0, "unstored": 0}}
LOADED = {"cache": {"hit": 2, "miss": 0, "bypass": 0, "unstored": 0}}


class _Arm:
    def __init__(self, info: dict[str, Any]) -> None:
        self.info, self.warm_load = info, True

    def __enter__(self) -> _Arm:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def wait_ready(self) -> dict[str, Any]:
        return self.info


class _Arms:
    def __init__(self, final: dict[str, Any], baseline: dict[str, Any]) -> None:
        self.final, self.baseline = _Arm(final), _Arm(baseline)

    def baselines(self) -> tuple[_Arm, _Arm]:
        return self.baseline, _Arm(self.baseline.info)

    def candidate(self, pack: Any, **kwargs: Any) -> _Arm:
        return self.final

    def settle(self) -> None:
        pass


def test_a_final_benchmark_whose_arms_started_unlike_says_which_way_it_leans(monkeypatch: Any) -> None:
    """The number a run reports comes from fresh processes; where the pack's arm and the baseline
    did not start alike (one compiled cold, one loaded), result.json and the report say so."""
    from types import SimpleNamespace

    from kernelopt_bot import final_bench
    from kernelopt_bot.harness import bench
    from kernelopt_bot.report import render_report
    from kernelopt_bot.verify import model

    measured = SimpleNamespace(baseline_ms=1.0, packed_ms=0.9, speedup=1.11, noise_floor=0.01, step_split_ms={},
                               baseline_host_ms=1.1, packed_host_ms=1.0, host_noise_floor=0.01, host_speedup=1.1)
    monkeypatch.setattr(bench, "compare_arms", lambda *a, **k: measured)
    monkeypatch.setattr(model, "check_model", lambda *a, **k: SimpleNamespace(passed=True))
    target = SimpleNamespace(spec="t.py", device="cuda", train=False)
    for final, baseline, lean in ((COLD, LOADED, "slow"), (LOADED, COLD, "fast"), (LOADED, LOADED, None)):
        pack = _pack(_entry("k0", [GATE4]), _entry("k1", [GATE4]))  # two entries: measured afresh
        result = _result(("k0", "accepted"), ("k1", "accepted"))
        final_bench.benchmark_pack(SimpleNamespace(model_arms=_Arms(final, baseline)), target, pack, result, 3)
        assert result.speedup == 1.11
        if lean is None:
            assert result.started_unlike is None
            assert "not started alike" not in render_report(result)
        else:
            assert result.started_unlike is not None and f"a few percent {lean}" in result.started_unlike
            again = RunResult.from_json(result.to_json())
            assert again.started_unlike == result.started_unlike
            assert "| arms of this benchmark | not started alike: the pack's arm was " in render_report(result)


def test_a_headline_taken_from_gate_4_keeps_its_note_on_how_the_arms_started() -> None:
    from kernelopt_bot.final_bench import take_gate4_numbers

    note = "timed as it compiled, against baselines loaded from the compiler's cache, which may read ..."
    gate4 = {**GATE4, "numbers": {**GATE4["numbers"], "started_unlike": note}}
    result = _result(("k0", "accepted"))
    assert take_gate4_numbers(_pack(_entry("k0", [gate4])), result) and result.started_unlike == note
    result = _result(("k0", "accepted"))
    assert take_gate4_numbers(_pack(_entry("k0", [GATE4])), result) and result.started_unlike is None


def _measured(speedup: float, noise: float = 0.009) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(baseline_ms=0.0545, packed_ms=0.0545 / speedup, speedup=speedup, noise_floor=noise,
                           step_split_ms={}, baseline_host_ms=0.094, packed_host_ms=0.094, host_noise_floor=0.02,
                           host_speedup=1.0)


def _fresh_benchmark(monkeypatch: Any, speedups: list[float]) -> tuple[list[Any], _Arms]:
    """compare_arms answering ``speedups`` in turn; returns the packs it was asked to measure."""
    from types import SimpleNamespace

    from kernelopt_bot.harness import bench
    from kernelopt_bot.verify import model

    asked: list[Any] = []
    answers = iter(speedups)
    monkeypatch.setattr(bench, "compare_arms", lambda *a, **k: _measured(next(answers)))
    monkeypatch.setattr(model, "check_model", lambda *a, **k: SimpleNamespace(passed=True))

    class _Recording(_Arms):
        def candidate(self, pack: Any, **kwargs: Any) -> _Arm:
            asked.append(sorted(e.kernel_name for e in pack.entries.values()))
            return self.final

    return asked, _Recording(LOADED, LOADED)


def _engine_gate4(speedup: float) -> dict[str, Any]:
    return {**GATE4, "numbers": {**GATE4["numbers"], "arms": "engine", "speedup": speedup}}


def test_a_pack_the_fresh_benchmark_finds_short_of_gamma_is_not_delivered(monkeypatch: Any) -> None:
    """Gate 4 timed the candidate on the engine's model at 1.047x; fresh processes measure the
    pack at 0.985x (an H100's instance norm, 12-07). The compiler's kernel stays: an empty pack,
    1.0x reported from the baseline as measured, and the kernel's row says why."""
    from types import SimpleNamespace

    from kernelopt_bot import final_bench
    from kernelopt_bot.report import render_report

    asked, arms = _fresh_benchmark(monkeypatch, [0.985])
    pack = _pack(_entry("k0", [_engine_gate4(1.047)], accepted=3))
    result = _result(("k0", "accepted"))
    target = SimpleNamespace(spec="t.py", device="cuda", train=False)
    withdrawn: list[list[str]] = []
    delivered = final_bench.benchmark_pack(SimpleNamespace(model_arms=arms), target, pack, result, 3, gamma=1.03,
                                           withdraw=withdrawn.append)
    assert asked == [["k0"]] and len(delivered) == 0
    assert withdrawn == [["key-k0"]]  # the verified cache forgets it (by the pack's kernel key)
    assert (result.speedup, result.baseline_ms, result.optimized_ms) == (1.0, 0.0545, 0.0545)
    row = result.kernels[0]
    assert row.status == "dropped" and row.speedup == 0.985 and result.verified_kernels == 0
    assert "0.985x" in row.detail and "below gamma 1.03" in row.detail
    report = render_report(result)
    assert "below gamma 1.03" in report and "**1.000x**" in report
    # the publish stage, which trusts nothing the run stage wrote, takes the row as it is
    import json

    from kernelopt_bot.github.trusted import validate_result

    checked = validate_result(json.dumps(result.to_json()), name="t", dtype="bf16")
    assert [k.status for k in checked.kernels] == ["dropped"]


def test_a_fresh_measurement_within_the_noise_floor_does_not_hold_a_pack_up() -> None:
    from kernelopt_bot.final_bench import short_of_gamma

    assert short_of_gamma(1.04, 0.05, 1.03) is not None  # above gamma, but not beyond its noise
    assert short_of_gamma(1.04, 0.01, 1.03) is None
    assert short_of_gamma(1.02, 0.001, 1.03) is not None
    assert short_of_gamma(None, None, 1.03) is None  # nothing timed (the CPU interpreter): no verdict


def test_a_combined_pack_short_of_gamma_is_cut_to_its_best_entry_and_measured_again(monkeypatch: Any) -> None:
    from types import SimpleNamespace

    from kernelopt_bot import final_bench

    asked, arms = _fresh_benchmark(monkeypatch, [1.01, 1.08])
    best, other = _entry("k0", [_engine_gate4(1.09)]), _entry("k1", [_engine_gate4(1.04)])
    best.measured["speedup"], other.measured["speedup"] = 1.09, 1.04
    result = _result(("k0", "accepted"), ("k1", "accepted"))
    target = SimpleNamespace(spec="t.py", device="cuda", train=False)
    withdrawn: list[list[str]] = []
    delivered = final_bench.benchmark_pack(SimpleNamespace(model_arms=arms), target, _pack(best, other), result, 3,
                                           withdraw=withdrawn.append)
    assert asked == [["k0", "k1"], ["k0"]]
    assert withdrawn == []  # cut from a combination, not found wanting on its own: still verified
    assert list(e.kernel_name for e in delivered.entries.values()) == ["k0"] and result.speedup == 1.08
    assert [k.status for k in result.kernels] == ["accepted", "dropped"]
    assert "combined pack measured 1.010x" in result.kernels[1].detail
