"""End to end through the CLI: inspect's JSON contract, pin, and bench in separate processes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kernelopt_bot.harness.bench import bench
from kernelopt_bot.pack.format import KernelPack
from tests.helpers import EXAMPLES, bump_constant, captured, run_cli

LINEAR = str(EXAMPLES / "linear_epilogue.py")


@pytest.fixture(scope="module")
def inspected() -> dict:
    result = run_cli("inspect", LINEAR, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_inspect_json_contract(inspected: dict) -> None:
    assert set(inspected) >= {"target", "device", "kernels", "extern_calls"}
    assert inspected["target"] == LINEAR
    (kernel,) = inspected["kernels"]
    assert set(kernel) >= {"name", "kind", "sha256", "key", "source", "time_ms", "share"}
    assert kernel["kind"] == "persistent_reduction"
    import hashlib

    assert kernel["sha256"] == hashlib.sha256(kernel["source"].encode()).hexdigest()
    assert inspected["extern_calls"][0]["op"] == "extern_kernels.addmm"
    if inspected["device"] == "cpu":
        assert kernel["time_ms"] is None and kernel["share"] is None


def test_inspect_table() -> None:
    result = run_cli("inspect", str(EXAMPLES / "graph_break.py"))
    assert result.returncode == 0, result.stderr
    assert "2 Triton kernels in 2 graph(s)" in result.stdout
    # kernels named as a person reads them: the second graph said in words, not as a "g1:" label
    assert "triton_poi_fused_mul_sigmoid_0 (graph 1)" in result.stdout and "g1:" not in result.stdout


def test_pin_then_bench_shows_the_change(tmp_path: Path, inspected: dict) -> None:
    kernel = inspected["kernels"][0]
    changed = tmp_path / "kernel.py"
    changed.write_text(bump_constant(kernel["source"], "tl.full([1, 1], 1.0, tl.float32)",
                                     "tl.full([1, 1], 4.0, tl.float32)"))
    pack_path = tmp_path / "pack.json"
    result = run_cli("pin", LINEAR, "--kernel", kernel["name"], "--source", str(changed), "--out", str(pack_path))
    assert result.returncode == 0, result.stderr
    assert KernelPack.load(pack_path).entries[kernel["key"]].source is not None
    result = run_cli("bench", LINEAR, "--pack", str(pack_path), "--json", "--rounds", "2", "--reps", "3")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["applied"] == [kernel["name"]]
    assert data["max_abs_diff"] > 1e-3
    if data["device"] == "cpu":
        assert data["speedup"] is None and data["baseline_ms"] is None and not data["measured"]


def test_bench_with_an_empty_pack_matches_the_compiler() -> None:
    cap = captured("linear_epilogue.py")
    result = bench(LINEAR, KernelPack(), device=cap.target.device, rounds=2, reps=3)
    assert result.applied == [] and result.max_abs_diff == 0.0


def test_bench_pin_applies_with_caches_disabled() -> None:
    from kernelopt_bot.pack.format import LaunchConfig, PackEntry
    from kernelopt_bot.pack.runtime import running_environment

    cap = captured("linear_epilogue.py")
    kernel = cap.artifact.kernels[0]
    pack = KernelPack()
    pack.add(PackEntry(kernel.key, kernel.name, config=LaunchConfig({"XBLOCK": 2}, 2, 1),
                       guard=running_environment(cap.target.device)))
    result = bench(LINEAR, pack, device=cap.target.device, rounds=2, reps=3,
                   config={"force_disable_caches": True})
    assert result.applied == [kernel.name]
    assert result.max_abs_diff < 1e-5


def test_a_pack_whose_source_does_not_parse_says_why(tmp_path: Path) -> None:
    """The compiler wraps the cause under a heading line ("backend='inductor' raised:"); the
    error said only the heading."""
    from kernelopt_bot.pack.format import LaunchConfig, PackEntry
    from kernelopt_bot.pack.runtime import running_environment

    cap = captured("linear_epilogue.py")
    kernel = cap.artifact.kernels[0]
    pack = KernelPack(target=LINEAR)
    pack.add(PackEntry(kernel.key, kernel.name, source="def nope(:\n", config=LaunchConfig({"XBLOCK": 2}, 2, 1),
                       guard=running_environment(cap.target.device)))
    pack.save(tmp_path / "pack.json")
    result = run_cli("bench", LINEAR, "--pack", str(tmp_path / "pack.json"))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "does not run with" in result.stderr and "SyntaxError: invalid syntax" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bench", LINEAR, "--pack", "/nonexistent/pack.json"], "cannot read pack"),
        (["bench", LINEAR, "--pack", __file__], "not valid JSON"),
        (["bench", LINEAR, "--pack", __file__, "--inductor-config", "nope=1"], "known Inductor config"),
        (["pin", LINEAR, "--kernel", "triton_nope", "--config", '{"kwargs": {"XBLOCK": 2}}', "--out", "/tmp/x.json"], "no kernel"),
        (["pin", LINEAR, "--kernel", "x", "--config", "{bad", "--out", "/tmp/x.json"], "--config"),
        (["inspect", "no_such_file.py"], "no such file"),
    ],
)
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr


def test_modes_lists_every_compiler_option_and_measures_none_without_a_gpu() -> None:
    result = run_cli("modes", str(EXAMPLES / "gelu.py"), "--device", "cpu", "--json")
    assert result.returncode == 0, result.stderr
    recs = json.loads(result.stdout.strip().splitlines()[-1])
    assert recs[0]["option"] == "mode=max-autotune-no-cudagraphs" and len(recs) == 3
    assert all(r["speedup"] is None and not r["verified"] and "no CUDA device" in r["detail"] for r in recs)
    one = run_cli("modes", str(EXAMPLES / "gelu.py"), "--device", "cpu", "--option",
                  "coordinate_descent_tuning=True", "--json")
    assert [r["option"] for r in json.loads(one.stdout.strip().splitlines()[-1])] == ["coordinate_descent_tuning=True"]


def test_modes_rejects_an_unknown_option_with_exit_2() -> None:
    result = run_cli("modes", str(EXAMPLES / "gelu.py"), "--device", "cpu", "--option", "mode=fastest")
    assert result.returncode == 2
    assert "unknown option 'mode=fastest'" in result.stderr


def test_suite_reference_run_that_fails_is_unmeasured_and_logged(tmp_path: Path) -> None:
    from kernelopt_bot.suite import reference_speedup

    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no model here')\n")
    assert reference_speedup(broken, "fp32", "cpu", timeout_s=120, log_dir=tmp_path) is None
    assert "no model here" in (tmp_path / "reference.log").read_text()


def test_the_packed_arm_compiles_beside_the_baselines_not_after_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H200 arms compiled after others (from the cache those filled) ran a launch-bound
    network 5% faster than arms compiled with them: every arm of a bench starts before any waits."""
    from kernelopt_bot.harness import model_arms

    events: list[str] = []

    class _Arm:
        where, ready, closed, compiling, alive, start_error = "process", False, False, True, True, None

        def __init__(self, spec: Any, **_kwargs: Any) -> None:
            self.label, self.info = spec.label, {"applied": [], "skipped": []}
            events.append(f"start {self.label}")

        def wait_compiled(self) -> None:
            events.append(f"wait {self.label}")

        def start_replacement(self) -> None:  # none compiled cold here
            pass

        def wait_ready(self) -> dict[str, Any]:
            events.append(f"wait {self.label}")
            self.ready, self.compiling = True, False
            return self.info

        def request(self, *_message: Any, **_kwargs: Any) -> Any:
            return []

        def close(self) -> None:
            self.closed = True

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *_exc: object) -> None:
            self.close()

    monkeypatch.setattr(model_arms, "ArmProcess", _Arm)
    empty = KernelPack.from_json({"format": "kernelopt-pack", "version": 1, "entries": []})
    result = bench("m.py", empty, device="cuda", dtype="bf16", rounds=1)
    assert result is not None
    starts = [e for e in events if e.startswith("start")]
    assert len(starts) == 3 and events.index(starts[-1]) < min(i for i, e in enumerate(events) if e.startswith("wait"))


def _arms_that_run_out_of_memory(monkeypatch: pytest.MonkeyPatch, failing: set[str], always: bool = False,
                                 gpu_mb: float | None = None, timing_fails: set[str] = frozenset(),
                                 idle_mb: float | None = None) -> list[str]:
    """Fake model arms whose first start of each label in ``failing`` (``always``: every start) ends
    out of memory, as the third 14 GB arm of ``rms_norm_large`` did on an 80 GB H100; ``gpu_mb``:
    what each says it holds when ready, on an 80 GiB device; ``timing_fails``: labels whose first
    timing request runs out of memory. The events say what started, timed and closed."""
    from kernelopt_bot.harness import memory, model_arms
    from kernelopt_bot.harness.arm_process import ArmError, ArmRaised

    events: list[str] = []
    short_when_timing = set(timing_fails)
    monkeypatch.setattr(memory, "device_memory", lambda _device: (70 * 2**30, 80 * 2**30))

    class _Arm:
        where, ready, closed, compiling, alive = "process", False, False, True, True

        def __init__(self, spec: Any, **_kwargs: Any) -> None:
            self.label, self.info = spec.label, {"applied": [], "skipped": []}
            if gpu_mb is not None:
                self.info["gpu_mb"] = gpu_mb
            if idle_mb is not None:
                self.info["idle_gpu_mb"] = idle_mb
            self.fails = self.label in failing  # this start fails, every time it is asked (as a real arm's does)
            self.start_error: ArmError | None = None
            if not always:
                failing.discard(self.label)
            events.append(f"start {self.label}")

        def wait_compiled(self) -> None:  # a failed start is kept, as a real arm keeps it
            if self.fails and self.start_error is None:
                self.compiling = self.alive = False
                self.start_error = ArmError(f"{self.label}: OutOfMemoryError: CUDA out of memory. "
                                            "Tried to allocate 7.00 GiB")

        def start_replacement(self) -> None:
            pass

        def wait_ready(self) -> dict[str, Any]:
            self.wait_compiled()
            self.compiling = False
            if self.start_error is not None:
                raise self.start_error
            self.ready = True
            return self.info

        def request(self, *message: Any, **_kwargs: Any) -> Any:
            if not self.alive:  # as a real arm whose request raised: it has ended
                raise ArmError(f"{self.label}: process is gone")
            if message[0] == "time":
                events.append(f"time {self.label}")
                if self.label in short_when_timing:
                    short_when_timing.discard(self.label)
                    self.alive = False
                    raise ArmRaised(self.label, "OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB")
            return []

        def close(self) -> None:
            if not self.closed:
                events.append(f"close {self.label}")
            self.closed = True

    monkeypatch.setattr(model_arms, "ArmProcess", _Arm)
    return events


@pytest.mark.parametrize("failing", ["baseline-repeat", "packed", "baseline", "baseline baseline-repeat"])
def test_a_bench_whose_third_arm_does_not_fit_times_one_baseline_twice(monkeypatch: pytest.MonkeyPatch,
                                                                       failing: str) -> None:
    """Out of memory at an arm's start is the device's size, not the bench's verdict: the repeat
    baseline gives its memory back, the packed arm starts (again) in it, and the one baseline is
    timed twice per round for the noise floor."""
    events = _arms_that_run_out_of_memory(monkeypatch, set(failing.split()))
    empty = KernelPack.from_json({"format": "kernelopt-pack", "version": 1, "entries": []})
    result = bench("m.py", empty, device="cuda", dtype="fp32", rounds=1)
    assert result.noise_from.startswith("the one baseline process")
    assert "close baseline-repeat" in events
    for label in ("packed", "baseline"):  # the arm that ran short starts once more, in the memory given back
        assert events.count(f"start {label}") == (2 if label in failing.split() else 1)
    assert events.count("start baseline-repeat") == 1  # not started again: the device does not hold it


def test_a_bench_of_a_model_three_arms_do_not_hold_times_one_baseline_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """All three arms start before any says what it holds; once the baseline says 28 GB (the RMS
    norm over 7.5 GB tensors), three do not fit an 80 GB device for the rounds: the repeat gives
    its memory back before anything is timed, instead of the third arm running short in round one."""
    events = _arms_that_run_out_of_memory(monkeypatch, set(), gpu_mb=28 * 1024)
    empty = KernelPack.from_json({"format": "kernelopt-pack", "version": 1, "entries": []})
    said: list[str] = []
    result = bench("m.py", empty, device="cuda", dtype="fp32", rounds=1, say=said.append)
    assert result.noise_from.startswith("the one baseline process")
    # a person watching sees each arm's memory, why one baseline, and each step's seconds
    assert "baseline arm ready: 28.0 GiB at its peak" in said
    assert any(line.startswith("three arms of this model do not fit") for line in said)
    assert [line.split(" (")[0] for line in said[-3:]] == ["outputs compared before timing", "round 1 of 1",
                                                           "outputs compared after timing"]
    first_timed = min(i for i, e in enumerate(events) if e.startswith("time"))
    assert events.index("close baseline-repeat") < first_timed
    assert "time baseline-repeat" not in events


def test_a_repeat_that_ran_short_compiling_beside_the_others_starts_again_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 30 GB RMS norm on the H100: three arms compiling at once do not fit, three taking turns
    do (an idle arm of a large model holds nothing). The repeat that ran short starts once more
    when nothing compiles, and the noise floor is between two processes again."""
    events = _arms_that_run_out_of_memory(monkeypatch, {"baseline-repeat"}, gpu_mb=28 * 1024, idle_mb=0.0)
    empty = KernelPack.from_json({"format": "kernelopt-pack", "version": 1, "entries": []})
    result = bench("m.py", empty, device="cuda", dtype="fp32", rounds=1)
    assert result.noise_from is None or not result.noise_from.startswith("the one baseline process")
    assert events.count("start baseline-repeat") == 2 and "time baseline-repeat" in events
    # where an idle arm keeps its peak, three do not fit: one baseline, timed twice
    events = _arms_that_run_out_of_memory(monkeypatch, {"baseline-repeat"}, gpu_mb=28 * 1024)
    result = bench("m.py", empty, device="cuda", dtype="fp32", rounds=1)
    assert result.noise_from.startswith("the one baseline process") and events.count("start baseline-repeat") == 1


def test_baselines_asked_again_after_both_ran_short_start_the_first_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both baselines out of memory on the first ask (raised: nothing to compare with); the next ask
    (the final benchmark, gate 4) starts the first alone instead of failing on the one already gone."""
    from kernelopt_bot.harness.arm_process import ArmError
    from kernelopt_bot.harness.model_arms import ModelArms

    events = _arms_that_run_out_of_memory(monkeypatch, {"baseline", "baseline-repeat"})
    with ModelArms("m.py", "cuda", "fp32") as arms:
        arms.prestart()  # as a run starts them; the first ask waits for their compile
        with pytest.raises(ArmError, match="out of memory"):
            arms.baselines()
        base, repeat = arms.baselines()
    assert base.ready and repeat is None and events.count("start baseline") == 2


def test_a_bench_of_a_model_three_arms_hold_keeps_its_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _arms_that_run_out_of_memory(monkeypatch, set(), gpu_mb=8 * 1024)
    empty = KernelPack.from_json({"format": "kernelopt-pack", "version": 1, "entries": []})
    result = bench("m.py", empty, device="cuda", dtype="fp32", rounds=1)
    assert result.noise_from is None or not result.noise_from.startswith("the one baseline process")
    assert "time baseline-repeat" in events


def test_out_of_memory_while_timing_is_measured_again_with_one_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The repeat running short in a timed round is the device's size: its end gives its memory
    back and the rounds run again, the one baseline timed twice. An arm whose request raised has
    ended, so where the baseline or the packed arm ran short the error is raised, not retried on a
    dead arm."""
    from kernelopt_bot.harness.arm_process import ArmRaised

    events = _arms_that_run_out_of_memory(monkeypatch, set(), timing_fails={"baseline-repeat"})
    empty = KernelPack.from_json({"format": "kernelopt-pack", "version": 1, "entries": []})
    result = bench("m.py", empty, device="cuda", dtype="fp32", rounds=1)
    assert result.noise_from.startswith("the one baseline process")
    closed = events.index("close baseline-repeat")
    assert "time packed" in events[closed:] and "time baseline-repeat" not in events[closed:]
    _arms_that_run_out_of_memory(monkeypatch, set(), timing_fails={"packed"})
    with pytest.raises(ArmRaised, match="out of memory"):
        bench("m.py", empty, device="cuda", dtype="fp32", rounds=1)


def test_a_packed_arm_out_of_memory_is_not_said_to_be_the_packs_fault() -> None:
    from kernelopt_bot.cli.bench_command import _packed_arm_fails_as_bad_input
    from kernelopt_bot.errors import BadInputError, KerneloptError
    from kernelopt_bot.harness.arm_process import ArmRaised

    what = "p.json does not run with m.py"
    with pytest.raises(KerneloptError) as caught, _packed_arm_fails_as_bad_input(what):
        raise ArmRaised("packed", "OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB | trace")
    assert not isinstance(caught.value, BadInputError) and caught.value.exit_code == 1
    assert "out of memory" in str(caught.value) and "not a fault of the pack" in str(caught.value)
    with pytest.raises(BadInputError, match=re.escape(f"{what}: KeyError")), _packed_arm_fails_as_bad_input(what):
        raise ArmRaised("packed", "KeyError: 'XBLOCK' | trace")


def test_a_bench_whose_baseline_does_not_fit_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a baseline there is nothing to compare against: the error is raised, not hidden."""
    from kernelopt_bot.harness.arm_process import ArmError

    _arms_that_run_out_of_memory(monkeypatch, {"baseline"}, always=True)
    empty = KernelPack.from_json({"format": "kernelopt-pack", "version": 1, "entries": []})
    with pytest.raises(ArmError, match="out of memory"):
        bench("m.py", empty, device="cuda", dtype="fp32", rounds=1)
