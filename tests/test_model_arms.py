"""The model_arms: baseline arms started once (optionally early) and reused; a failed start is not cached."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernelopt_bot.harness.arm_process import ArmError, ArmTimeout
from kernelopt_bot.harness.model_arms import ModelArms
from tests.helpers import EXAMPLES


def _broken_target(tmp_path: Path) -> Path:
    """A target whose model raises when it runs."""
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                      "        raise RuntimeError('cannot run')\n"
                      "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n")
    return broken


def test_prestart_returns_at_once_and_baselines_reuse_the_started_arm() -> None:
    with ModelArms(str(EXAMPLES / "gelu.py"), "cpu", "fp32") as model_arms:
        start = time.monotonic()
        model_arms.prestart()
        assert time.monotonic() - start < 2.0  # started, not waited for
        started = model_arms._baselines["baseline"]
        assert not started.ready
        baseline, repeat = model_arms.baselines()
        assert baseline is started and baseline.ready and repeat is None  # no noise arm without a GPU
        assert baseline.info["compile_s"] > 0.0  # its compile, for the options' estimates
        assert model_arms.baselines()[0] is baseline  # asked again: the same process
        assert len(baseline.request("outputs", 0)) == 1


def test_a_baseline_that_fails_to_start_is_reported_and_started_afresh_next_time(tmp_path: Path) -> None:
    broken = _broken_target(tmp_path)
    with ModelArms(str(broken), "cpu", "fp32", timeout_s=120) as model_arms:
        model_arms.prestart()
        with pytest.raises(ArmError, match="cannot run"):
            model_arms.baselines()
        assert "baseline" not in model_arms._baselines
        with pytest.raises(ArmError, match="cannot run"):
            model_arms.baselines()
        started = len(model_arms._baseline_failures)
        with pytest.raises(ArmError, match="cannot run"):  # the failure is the answer now: no third start
            model_arms.baselines()
        assert len(model_arms._baseline_failures) == started and "baseline" not in model_arms._baselines
        assert model_arms.prestart() is False and "baseline" not in model_arms._baselines  # nor a prestart


def test_closing_an_arm_that_is_still_compiling_kills_it_at_once(tmp_path: Path) -> None:
    """An arm reads its pipe only once compiled: asking it to quit would wait out the join
    (10 s) for every candidate that failed gate 2 while its arm compiled beside it."""
    slow = tmp_path / "slow.py"
    slow.write_text("import time\nimport torch\ntime.sleep(30)\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, x):\n        return x + 1\n"
                    "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n")
    model_arms = ModelArms(str(slow), "cpu", "fp32")
    arm = model_arms.candidate(None, wait=False)
    time.sleep(1.0)  # started, busy importing the target
    start = time.monotonic()
    arm.close()
    assert time.monotonic() - start < 5.0 and not arm.alive
    arm.close()  # closing twice is harmless


def test_arms_compile_side_by_side_and_settle_waits_for_all_before_anything_is_timed() -> None:
    """The compiler's options and the final arm compile at once; ``settle`` returns only when none
    compiles (each ready or failed), so a timed arm never shares the CPU with a compile."""
    with ModelArms(str(EXAMPLES / "gelu.py"), "cpu", "fp32") as model_arms:
        assert model_arms.room_for(3) == 3  # no GPU memory to plan on the CPU
        arms = [model_arms.candidate(None, label=f"arm{i}", wait=False) for i in range(2)]
        assert all(a.compiling for a in arms) and len(model_arms.compiling()) == 2
        model_arms.settle()
        assert model_arms.compiling() == [] and all(a.ready for a in arms)
        assert arms[0].wait_ready() is arms[0].info  # a second wait answers at once
        for arm in arms:
            arm.close()
        assert not any(a.compiling for a in arms)


def test_a_start_failure_seen_by_settle_stays_with_the_arm(tmp_path: Path) -> None:
    broken = _broken_target(tmp_path)
    with ModelArms(str(broken), "cpu", "fp32", timeout_s=120) as model_arms:
        arm = model_arms.candidate(None, wait=False)
        model_arms.settle()  # does not raise: the failure is the arm's owner's to report
        assert not arm.compiling and not arm.ready
        with pytest.raises(ArmError, match="cannot run"):
            arm.wait_ready()
        with pytest.raises(ArmError, match="cannot run"):  # the same error again, no second wait
            arm.wait_ready()


def test_the_memory_plan_starts_only_the_arms_the_gpu_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planning arithmetic, with the device's memory given (this machine has no GPU): an arm
    needs what the model holds (x1.5 while compiling) plus a context."""
    import torch

    from kernelopt_bot.harness import model_arms as arena_module

    free_mib = [60000.0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(free_mib[0] * 2**20), 140000 * 2**20))
    model_arms = ModelArms("model.py", "cuda", "fp32")
    assert model_arms.room_for(3) == 3  # nothing known yet about what an arm holds: no limit
    model_arms.arm_mb_hint = 770.0  # a small model: all three options at once, beside two baselines
    assert not model_arms.one_baseline and model_arms._baseline_labels() == ["baseline", "baseline-repeat"]
    free_mib[0] = 120000.0
    assert model_arms.room_for(3) == 3
    free_mib[0] = 3000.0
    per_arm = 770.0 * arena_module.ARM_HEADROOM + arena_module.CONTEXT_MB
    assert int((3000.0 - arena_module.RESERVE_MB) // per_arm) == 0
    assert model_arms.room_for(3) == 1  # nothing compiling: one goes ahead (an out-of-memory error is then reported)


def test_whether_three_arms_fit_counts_their_contexts_and_the_memory_others_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """``holds``: one arm at its peak, the others idle, each with a CUDA context, beside what the
    device's other users hold now (this process, another job): the memory in use that our ready,
    idle arms do not account for."""
    import torch

    from kernelopt_bot.harness import model_arms as arena_module

    total, free_mib = 80 * 1024.0, [80 * 1024.0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(free_mib[0] * 2**20), int(total * 2**20)))
    model_arms = ModelArms("model.py", "cuda", "fp32")
    assert model_arms.holds(3) is None  # nothing known of what an arm holds
    base = SimpleNamespace(ready=True, closed=False, alive=True, info={"gpu_mb": 25 * 1024.0, "idle_gpu_mb": 4 * 1024.0})
    model_arms._baselines["baseline"] = base  # type: ignore[assignment]
    context = arena_module.CONTEXT_MB
    free_mib[0] = total - context - 4 * 1024.0  # the ready baseline, idle
    assert model_arms.holds(3) is True  # 25 GiB at a time, two idle arms of 4, three contexts
    free_mib[0] -= 45 * 1024.0  # another job holds 45 GiB
    assert model_arms.holds(3) is False and model_arms.holds(2) is True
    # Three arms of 26 GiB that keep their peak fit 80 GiB with the reserve, without their contexts.
    base.info = {"gpu_mb": 26 * 1024.0}
    free_mib[0] = total - context - 26 * 1024.0
    assert total >= 3 * 26 * 1024.0 + arena_module.RESERVE_MB and model_arms.holds(3) is False


def test_a_large_model_gets_one_baseline_and_two_arms_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 30 GB RMS norm on a 140 GB GPU: three copies would hold 3 x 28.7 GB plus contexts, over
    three times the model (issue 12), so one baseline (timed twice a round) and one other arm."""
    import torch

    from kernelopt_bot.harness import model_arms as arena_module

    free_mib = [40000.0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(free_mib[0] * 2**20), 140000 * 2**20))
    model_arms = ModelArms("model.py", "cuda", "fp32")
    model_arms.arm_mb_hint = 28674.0
    assert model_arms.one_baseline and model_arms._baseline_labels() == ["baseline"]
    per_arm = 28674.0 * arena_module.ARM_HEADROOM + arena_module.CONTEXT_MB
    assert per_arm > (40000.0 - arena_module.RESERVE_MB)
    assert model_arms.room_for(1) == 0 and model_arms.prestart() is False and model_arms._baselines == {}  # not beside the engine
    free_mib[0] = 139000.0  # the engine gave its memory back: room for three by memory, two by the plan
    assert model_arms.room_for(3) == arena_module.LARGE_MODEL_ARMS

    class Live:
        closed, compiling, ready, info = False, False, True, {}

    model_arms._baselines["baseline"] = Live()  # type: ignore[assignment]
    assert model_arms.room_for(3) == 1  # the baseline and one other arm
    model_arms._started.append(Live())  # type: ignore[arg-type]
    assert model_arms.room_for(1) == 0


def _fake_arms(events: list[tuple[str, str]], failing: tuple[str, ...] = ()) -> type:
    """An ArmProcess stand-in that records its starts and readiness; a label in ``failing`` fails
    its start (its error raised by ``wait_ready``, as an arm's)."""

    class FakeArm:
        def __init__(self, spec: Any, **_kw: Any) -> None:
            self.label, self.ready, self.closed, self.start_error = spec.label, False, False, None
            self.info = {"gpu_mb": 400.0, "idle_gpu_mb": 0.0}
            events.append(("start", spec.label))

        compiling = property(lambda self: not (self.ready or self.closed or self.start_error is not None))
        alive = property(lambda self: not self.closed and self.start_error is None)

        def wait_compiled(self) -> None:
            return None

        def start_replacement(self) -> None:
            return None

        def wait_ready(self) -> None:
            if self.label in failing:
                self.start_error = ArmError(f"{self.label}: cannot run")
                raise self.start_error
            if not self.ready:
                events.append(("ready", self.label))
                self.ready = True

        def close(self) -> None:
            self.closed = True

    return FakeArm


def _on_a_gpu(monkeypatch: pytest.MonkeyPatch, reserved_mib: float = 0.0) -> dict[str, int]:
    """An 80 GB device with 70 GB free, this process's allocator holding ``reserved_mib``: the
    returned bytes (``reserved``, ``allocated``) may be changed as the test goes on."""
    import torch

    held = {"reserved": int(reserved_mib * 2**20), "allocated": int(reserved_mib * 2**20)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (70000 * 2**20, 80000 * 2**20))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: held["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: held["allocated"])
    return held


def test_a_baseline_left_unstarted_behind_anothers_failed_start_is_started_not_a_key_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The repeat still compiles and the budget holds no more beside it: the first waits for it,
    and where it fails the first is still started and the repeat's failure is the answer."""
    from kernelopt_bot.harness import model_arms as arena_module

    _on_a_gpu(monkeypatch, reserved_mib=200.0)
    events: list[tuple[str, str]] = []
    FakeArm = _fake_arms(events, failing=("baseline-repeat",))
    monkeypatch.setattr(arena_module, "ArmProcess", FakeArm)
    model_arms = ModelArms("model.py", "cuda", "fp32")
    model_arms.arm_mb_hint, model_arms.memory_factor = 400.0, 3.0
    model_arms._one_baseline = False
    model_arms._baselines["baseline-repeat"] = FakeArm(SimpleNamespace(label="baseline-repeat"))
    assert model_arms.room_for(1) == 0  # (1200 - 200 - 600) // 600
    with pytest.raises(ArmError, match="baseline-repeat: cannot run"):
        model_arms.baselines()
    assert ("start", "baseline") in events and model_arms._baselines["baseline"].ready


def test_the_budget_never_leaves_a_large_model_without_an_arm_when_none_compiles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A large model's room has no floor of its own (its cap is the plan's), but the budget alone
    never stops the run: with nothing compiling and the device holding one, one arm starts."""
    _on_a_gpu(monkeypatch, reserved_mib=60000.0)
    model_arms = ModelArms("model.py", "cuda", "fp32")
    model_arms.arm_mb_hint = 28674.0
    model_arms._one_baseline = True
    assert model_arms.room_for(1) == 1  # no budget: the device's 70 GB hold one
    model_arms.memory_factor = 3.0
    assert model_arms._fit(1, 0.0, within_budget=True) == 0  # 3 x 28.7 GB less this process's 60 GB
    assert model_arms.room_for(1) == 1


def test_the_runs_memory_budget_starts_arms_one_after_another_where_it_holds_no_more(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``memory_factor`` (the run's ``gpu_memory_factor``): the run's memory beyond the contexts, at
    most that many models. A compiling arm counts 1.5 models, a ready one what it keeps idle, this
    process what its allocator holds (and what its search is about to). Baselines that do not fit
    together compile one after the other; without a budget the device's free memory alone rules."""
    from kernelopt_bot.harness import model_arms as arena_module

    held = _on_a_gpu(monkeypatch)
    events: list[tuple[str, str]] = []
    FakeArm = _fake_arms(events)
    monkeypatch.setattr(arena_module, "ArmProcess", FakeArm)
    model_arms = ModelArms("model.py", "cuda", "fp32")
    model_arms.arm_mb_hint = 400.0
    assert model_arms.room_for(3) == 3  # no budget: the device's 70 GB hold all three
    model_arms.memory_factor = 3.0
    assert model_arms.room_for(3) == 2  # three models hold two compiles of one and a half
    assert model_arms.prestart(beside_mb=800.0) is False and events == []  # not beside a search of two models
    assert model_arms.prestart(beside_mb=500.0) is False  # beside one of a model and a quarter: one of the two
    assert events == [("start", "baseline")]
    held["reserved"] = held["allocated"] = 200 * 2**20  # this process holds half a model
    assert model_arms.room_for(1) == 0  # the first still compiles: the repeat waits for it
    baseline, repeat = model_arms.baselines()
    assert events == [("start", "baseline"), ("ready", "baseline"),
                      ("start", "baseline-repeat"), ("ready", "baseline-repeat")]
    assert baseline.ready and repeat is not None and repeat.ready
    assert model_arms.room_for(3) == 1  # idle, the baselines hold nothing: (1200 - 200) // 600
    model_arms._baselines["baseline"].info = {"gpu_mb": 40.0, "idle_gpu_mb": 0.0}  # a 40 MiB network
    assert model_arms.room_for(3) == 3  # three models would be 120 MiB: the budget is never under 1 GiB
    model_arms._baselines["baseline"].info = {"gpu_mb": 400.0, "idle_gpu_mb": 0.0}
    model_arms.memory_factor = None
    assert model_arms.room_for(3) == 3


def test_an_arm_reports_the_launch_config_each_of_its_kernels_settled_on() -> None:
    """A compiler option's arm autotunes its own kernels: it reports the configs they settled on,
    and an option is shown only where they differ from the default compile's (the evidence of
    what the tuner did not find when an option beats the pack)."""
    from kernelopt_bot.compile_options import config_changes

    with ModelArms(str(EXAMPLES / "softmax.py"), "cpu", "fp32") as model_arms:
        baseline, _ = model_arms.baselines()
        configs = baseline.info["configs"]
        assert configs and all(name.startswith("triton_") for name in configs)
        assert all("num_warps=" in config and "num_stages=" in config for config in configs.values())
        with model_arms.candidate(None, label="again") as again:  # the same compile settles the same way
            assert again.info["configs"] == configs
            assert config_changes(baseline, again) == {}
        name, config = next(iter(configs.items()))

        other = SimpleNamespace(info={"configs": {name: "XBLOCK=1, num_warps=32, num_stages=1",
                                                  "triton_poi_new_9": config}})
        assert config_changes(baseline, other) == {name: "XBLOCK=1, num_warps=32, num_stages=1",
                                                   "triton_poi_new_9": config}


def test_an_arms_compile_ends_within_its_limit_of_its_start_however_many_waits(tmp_path: Path) -> None:
    """The limit counts from the arm's start, not from each wait: an option's arm waited for
    after other arms had been waited for got both waits (on the H200 an option phase given 41 s
    took 58 s and pushed the run 25 s past its wall budget). Here the arm, 5 s to compile, is
    waited for 4 s after its start and is killed about 1 s later."""
    slow = tmp_path / "slow.py"
    slow.write_text("import time\nimport torch\ntime.sleep(60)\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, x):\n        return x + 1\n"
                    "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n")
    with ModelArms(str(slow), "cpu", "fp32", timeout_s=5.0) as model_arms:
        arm = model_arms.candidate(None, label="option", wait=False)
        time.sleep(4.0)
        start = time.monotonic()
        with pytest.raises(ArmError, match="no answer to start within 5 s"):
            arm.wait_ready()
        assert time.monotonic() - start < 3.0


def test_an_arm_stopped_at_the_phases_deadline_says_the_budget_stopped_it(tmp_path: Path) -> None:
    """An option's arm whose limit is what the wall budget left (``end_by``) and not its own is
    stopped as the budget's doing (``ArmTimeout.budget``), so the option is reported not measured
    rather than failed (tiny_vit bf16 on the H200: max-autotune "failed" at its phase's end).
    One started at its own limit is a timeout too, but not the budget's."""
    slow = tmp_path / "slow.py"
    slow.write_text("import time\nimport torch\ntime.sleep(60)\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, x):\n        return x + 1\n"
                    "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n")
    with ModelArms(str(slow), "cpu", "fp32", timeout_s=30.0) as model_arms:
        model_arms.end_by = time.monotonic() + 2.0
        arm = model_arms.candidate(None, label="option", wait=False)
        with pytest.raises(ArmTimeout, match="still compiling when the 2 s the wall budget left it ran out") as stopped:
            arm.wait_ready()
        assert stopped.value.budget
        model_arms.end_by = None
        model_arms.timeout_s = 2.0
        arm = model_arms.candidate(None, label="option", wait=False)
        with pytest.raises(ArmTimeout, match="no answer to start within 2 s") as killed:
            arm.wait_ready()
        assert not killed.value.budget


# --- warm loads: every arm of a comparison starts alike (from the compiler's cache) ---

_COUNTING_TARGET = """import os
import time
import torch
# Each load of this file leaves a mark of its own in the compiler's cache folder (writable in every
# arm): once FAIL_AFTER loads came before it, it raises, as a target that broke between two starts would.
marks = os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "loads")
os.makedirs(marks, exist_ok=True)
before = len(os.listdir(marks))
open(os.path.join(marks, f"{os.getpid()}-{time.time_ns()}"), "w").close()
if before >= FAIL_AFTER:
    raise RuntimeError("the target broke after its first start")
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x * 2.0 + 1.0).sum(dim=-1)
def get_inputs():
    return [torch.randn(4, 32)]
def get_init_inputs():
    return []
"""


def _counting_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_after: int = 99) -> tuple[Path, Path]:
    """A small model, a compiler cache of its own (cold at first), and the folder counting its loads."""
    cache = tmp_path / "inductor-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    target = tmp_path / "counted.py"
    target.write_text(_COUNTING_TARGET.replace("FAIL_AFTER", str(fail_after)))
    return target, cache / "loads"


def test_an_arm_that_compiled_cold_is_replaced_by_one_that_loads_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold compile fills the cache; its replacement loads from it (what every other arm of the
    comparison does), answers for the arm, and its start counts both starts."""
    from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec, compiled_cold

    target, loads = _counting_target(tmp_path, monkeypatch)
    with ArmProcess(ArmSpec("baseline", str(target), "cpu", "fp32"), warm_load=True) as arm:
        info = arm.wait_ready()
        assert len(list(loads.iterdir())) == 2  # the cold start and its replacement
        replaced = info["warm_load"]
        assert replaced["cold_cache"]["miss"] >= 1 and replaced["replacement_cold"] is False
        assert info["cache"]["miss"] == 0 and info["cache"]["hit"] >= 1 and not compiled_cold(info)
        assert info["compile_s"] == pytest.approx(replaced["cold_compile_s"] + replaced["load_s"], abs=0.02)
        # where each start's seconds went: parts of its start, the rest the process's own start
        for phases, whole in ((info["start_phases_s"], replaced["load_s"]),
                              (replaced["cold_start_phases_s"], replaced["cold_compile_s"])):
            assert set(phases) == {"import", "target", "setup", "first_call"} and min(phases.values()) >= 0
            assert sum(phases.values()) <= whole + 0.05
        parts = info["setup_parts_s"]  # the setup's own parts add up to it
        assert set(parts) == {"compiler", "driver", "settings", "pack", "inputs", "hooks"} and min(parts.values()) >= 0
        assert sum(parts.values()) == pytest.approx(info["start_phases_s"]["setup"], abs=0.03)
        assert len(arm.request("outputs", 0)) == 1  # the replacement serves
    assert not arm.alive
    # A later arm of the same model loads from the cache at once: not replaced.
    with ArmProcess(ArmSpec("candidate", str(target), "cpu", "fp32"), warm_load=True) as again:
        assert "warm_load" not in again.wait_ready() and again.info["cache"]["hit"] >= 1
    assert len(list(loads.iterdir())) == 3


def test_a_graph_the_cache_could_not_store_is_not_a_cold_start() -> None:
    """A replacement would compile it again: only graphs stored in the cache make a start cold."""
    from kernelopt_bot.harness.arm_process import compiled_cold

    assert compiled_cold({"cache": {"hit": 0, "miss": 2, "bypass": 0, "unstored": 1}})
    assert not compiled_cold({"cache": {"hit": 0, "miss": 1, "bypass": 0, "unstored": 1}})
    assert not compiled_cold({"cache": {"hit": 0, "miss": 0, "bypass": 3}})
    assert not compiled_cold({"cache": {"miss": True}}) and not compiled_cold({}) and not compiled_cold(None)


def test_without_warm_loads_a_cold_arm_answers_as_it_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec, compiled_cold

    target, loads = _counting_target(tmp_path, monkeypatch)
    with ArmProcess(ArmSpec("baseline", str(target), "cpu", "fp32")) as arm:
        assert compiled_cold(arm.wait_ready()) and "warm_load" not in arm.info
    assert len(list(loads.iterdir())) == 1
    assert ModelArms(str(target), "cpu", "fp32").warm_load is False  # off unless asked: it costs a start


def test_a_replacement_that_fails_is_the_arms_failed_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cold process is stopped before its replacement starts (never two copies of a model on
    the GPU): the replacement's failure is the arm's start failure, asked twice alike, and ours
    (never a verdict): the model compiled and ran in the cold process, so a load we added that
    raises (here the target on its second import) says nothing of the option or the pack. The
    replacement's own error is kept in the message."""
    from kernelopt_bot.harness.arm_process import ArmOursFailed, ArmProcess, ArmSpec

    target, loads = _counting_target(tmp_path, monkeypatch, fail_after=1)
    with ArmProcess(ArmSpec("option", str(target), "cpu", "fp32"), warm_load=True) as arm:
        with pytest.raises(ArmOursFailed, match=r"compiled and ran; its replacement raised while loading .*"
                                                r"broke after its first start"):
            arm.wait_ready()
        with pytest.raises(ArmOursFailed, match="broke"):
            arm.wait_ready()
        assert not arm.compiling and not arm.ready
    assert len(list(loads.iterdir())) == 2


def test_no_replacement_starts_without_time_for_its_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec

    target, loads = _counting_target(tmp_path, monkeypatch)
    with ArmProcess(ArmSpec("option", str(target), "cpu", "fp32"), start_timeout_s=600, warm_load=True,
                    load_s=10_000.0) as arm:  # a load longer than the start's whole limit
        note = arm.wait_ready()["warm_load"]
        assert note.startswith("not replaced:") and "its load needs 10000" in note
        assert len(arm.request("outputs", 0)) == 1  # the cold arm answers
    assert len(list(loads.iterdir())) == 1


def _logged_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The arms' starts in order, as events: "start <label>" (a first start), "replace <label>" (a
    cold start's replacement, spawned only once the cold process is gone: never two copies) and
    "ready <label>" (a start's ready message)."""
    from kernelopt_bot.harness import arm_process

    events: list[str] = []
    spawn, await_start = arm_process.ArmProcess._spawn, arm_process.ArmProcess._await_start

    def logged_spawn(self: Any) -> Any:
        replacing = hasattr(self, "_proc")
        if replacing:
            assert not self._proc.alive()
        events.append(("replace " if replacing else "start ") + self.spec.label)
        return spawn(self)

    def logged_await(self: Any, doing: str) -> Any:
        payload = await_start(self, doing)
        events.append(f"ready {self.spec.label}")
        return payload

    monkeypatch.setattr(arm_process.ArmProcess, "_spawn", logged_spawn)
    monkeypatch.setattr(arm_process.ArmProcess, "_await_start", logged_await)
    return events


def test_settle_starts_the_replacements_once_every_first_start_is_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two arms compile cold side by side; settle lets both first starts finish, then starts both
    replacements (none beside another arm's compile), then waits for them; the baseline started
    after loads from the cache and is not replaced, and what a replacement adds is then planned
    from the baseline's own load."""

    target, loads = _counting_target(tmp_path, monkeypatch)
    events = _logged_starts(monkeypatch)
    with ModelArms(str(target), "cpu", "fp32", warm_load=True) as model_arms:
        assert model_arms.warm_load_s() == 10.0  # no baseline yet: the default
        # Two settings, two cache entries: both compile cold however their starts interleave.
        arms = [model_arms.candidate(None, label="arm0", wait=False),
                model_arms.candidate(None, label="arm1", config={"max_fusion_size": 63}, wait=False)]
        model_arms.settle()
        assert all(arm.ready and isinstance(arm.info["warm_load"], dict) for arm in arms)
        assert events[:2] == ["start arm0", "start arm1"] and sorted(events[2:4]) == ["ready arm0", "ready arm1"]
        assert events[4:6] == ["replace arm0", "replace arm1"]  # both replacements, after both first starts
        assert sorted(events[6:]) == ["ready arm0", "ready arm1"] and len(list(loads.iterdir())) == 4
        baseline, _ = model_arms.baselines()  # loads from the cache arm0 filled: not replaced
        assert "warm_load" not in baseline.info
        assert model_arms.warm_load_s() == pytest.approx(max(10.0, baseline.info["compile_s"]))
    assert ModelArms(str(target), "cpu", "fp32", warm_load=False).warm_load_s() == 0.0


def test_baselines_let_every_compiling_arms_first_start_in_before_any_replacement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate arm still compiling when the baselines are asked for (an early arm, the final
    arm beside the options): its first start and the baseline's both finish before either cold
    one's replacement starts, so no load runs beside a compile."""

    target, loads = _counting_target(tmp_path, monkeypatch)
    events = _logged_starts(monkeypatch)
    with ModelArms(str(target), "cpu", "fp32", warm_load=True) as model_arms:
        early = model_arms.candidate(None, label="early", config={"max_fusion_size": 63}, wait=False)
        baseline, repeat = model_arms.baselines()  # cold too: nothing was compiled before
        assert repeat is None  # on the CPU only one baseline
        firsts = [i for i, e in enumerate(events) if e.startswith(("start", "ready"))]
        replaced = [i for i, e in enumerate(events) if e.startswith("replace")]
        assert replaced and max(firsts[:4]) < min(replaced), events
        assert {e for e in events[:4]} == {"start early", "start baseline", "ready early", "ready baseline"}
        assert isinstance(baseline.info["warm_load"], dict)
        early.wait_ready()
        assert isinstance(early.info["warm_load"], dict)
        early.close()
    assert len(list(loads.iterdir())) == 4


def test_a_cold_arm_whose_time_ran_out_before_its_replacement_answers_as_it_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other arms' first starts may take a cold arm's time before its replacement is due: it
    is then kept (not stopped) and answers, saying so, instead of a healthy compile being lost."""
    from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec

    target, loads = _counting_target(tmp_path, monkeypatch)
    with ArmProcess(ArmSpec("option", str(target), "cpu", "fp32"), start_timeout_s=600, warm_load=True) as arm:
        arm.wait_compiled()
        assert not arm.ready and arm.compiling  # cold: a replacement is due
        arm._start_deadline = time.monotonic() + 5.0  # what the wave's other compiles left it
        arm.start_replacement()
        assert arm.ready and "its load needs 10" in arm.info["warm_load"]
        assert len(arm.request("outputs", 0)) == 1
    assert len(list(loads.iterdir())) == 1


def test_a_replacement_that_dies_is_our_failure_not_a_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model compiled; the load we added dying (killed, say, by the machine) says nothing of
    the model or its pack."""
    from kernelopt_bot.harness.arm_process import ArmOursFailed, ArmProcess, ArmSpec, failed_on_our_side

    target, _ = _counting_target(tmp_path, monkeypatch)
    source = target.read_text().replace(
        'if before >= 99:\n    raise RuntimeError("the target broke after its first start")',
        "if before >= 1:\n    os._exit(137)")
    assert "os._exit(137)" in source
    target.write_text(source)
    with ArmProcess(ArmSpec("option", str(target), "cpu", "fp32"), warm_load=True) as arm:
        with pytest.raises(ArmOursFailed, match=r"its replacement failed to load from the compiler.s cache") as failed:
            arm.wait_ready()
        assert failed_on_our_side(failed.value)
        with pytest.raises(ArmOursFailed):
            arm.wait_ready()


def test_an_arm_closed_between_its_starts_starts_nothing_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt_bot.harness.arm_process import ArmProcess, ArmSpec

    target, loads = _counting_target(tmp_path, monkeypatch)
    arm = ArmProcess(ArmSpec("option", str(target), "cpu", "fp32"), warm_load=True)
    arm.wait_compiled()  # compiled cold, its replacement due
    cold = arm._proc
    start = time.monotonic()
    arm.close()
    assert time.monotonic() - start < 5.0 and not cold.alive()  # the idle cold start quit when asked
    for step in (arm.wait_compiled, arm.start_replacement, arm.wait_ready):
        with pytest.raises(ArmError, match="closed"):
            step()
    assert len(list(loads.iterdir())) == 1


COLD = {"cache": {"hit": 0, "miss": 2, "bypass": 0, "unstored": 0}}
LOADED = {"cache": {"hit": 2, "miss": 0, "bypass": 0, "unstored": 0}}


def test_arms_started_unlike_are_named_whichever_way_they_lean() -> None:
    """Where the arm and its baseline did not start alike (one process compiled a graph, the other
    loaded every graph from the compiler's cache), the verdict's note says which way the
    comparison leans and whose replacement was not made; arms that started alike, or do not say,
    get no note."""
    from kernelopt_bot.harness.arm_process import effective_start, started_unlike

    not_replaced = {**COLD, "warm_load": "not replaced: 3 s of its start's limit left, its load needs 10"}
    slow = started_unlike(not_replaced, LOADED)
    assert slow and "timed as it compiled" in slow and "slow" in slow
    assert slow.endswith(f"(the arm: {not_replaced['warm_load']})")
    fast = started_unlike(LOADED, not_replaced)  # the baseline was the one left cold
    assert fast and "loaded from the compiler's cache" in fast and "a few percent fast" in fast
    assert fast.endswith(f"(the baseline: {not_replaced['warm_load']})")
    assert started_unlike(COLD, LOADED) and started_unlike(LOADED, COLD)  # no replacement asked: no reason given
    assert started_unlike(not_replaced, COLD) is None and started_unlike(LOADED, LOADED) is None  # alike
    replaced = {**LOADED, "warm_load": {"cold_compile_s": 20.0, "load_s": 4.0, "replacement_cold": False}}
    assert effective_start(replaced) == "loaded" and started_unlike(replaced, LOADED) is None
    again = {**COLD, "warm_load": {"cold_compile_s": 20.0, "load_s": 4.0, "replacement_cold": True}}
    assert effective_start(again) == "compiled" and started_unlike(again, LOADED)  # its replacement compiled again
    # A process that compiled graphs the cache cannot hold, or did not store, compiled all the same
    unstored = {"cache": {"hit": 0, "miss": 1, "bypass": 0, "unstored": 1}}
    bypassed = {"cache": {"hit": 0, "miss": 0, "bypass": 2}}
    assert effective_start(unstored) == effective_start(bypassed) == "compiled"
    assert started_unlike(COLD, unstored) is None and started_unlike(bypassed, COLD) is None
    assert effective_start({"cache": {"hit": 1, "miss": "2"}}) is None  # not counts: not said
    assert effective_start({"cache": {}}) is None  # no graph at all
    assert started_unlike(None, None) is None and started_unlike({"applied": []}, LOADED) is None  # not said


def test_arms_started_unlike_are_named_only_where_the_run_asked_for_alike_starts() -> None:
    """A run that does not replace cold arms (a model that is not launch-bound) times every
    compiler option, cold, against baselines loaded from the engine's compile: no note there."""
    from kernelopt_bot.harness.arm_process import unlike_where_asked

    cold, loaded = SimpleNamespace(info=COLD, warm_load=False), SimpleNamespace(info=LOADED, warm_load=False)
    assert unlike_where_asked(cold, loaded) is None
    assert unlike_where_asked(SimpleNamespace(info=COLD, warm_load=True), loaded)
    assert unlike_where_asked(cold, SimpleNamespace(info=LOADED, warm_load=True))
    assert unlike_where_asked(SimpleNamespace(info=COLD), SimpleNamespace(info=LOADED)) is None  # an engine arm


def test_a_replacement_that_compiled_again_does_not_read_as_replaced() -> None:
    from kernelopt_bot.harness.arm_process import how_started

    again = {**COLD, "warm_load": {"cold_compile_s": 20.0, "load_s": 4.0, "replacement_cold": True}}
    assert how_started(again) == "compiled"
    assert how_started({**LOADED, "warm_load": {"replacement_cold": False}}) == "replaced"
    # A graph the cache cannot hold is compiled by every process: "compiled", as effective_start says;
    # an arm that counted no graph at all says nothing
    assert how_started({"cache": {"hit": 0, "miss": 0, "bypass": 1, "unstored": 0}}) == "compiled"
    assert how_started({"cache": {"hit": 0, "miss": 0, "bypass": 0, "unstored": 0}}) is None


def test_an_option_timed_against_baselines_started_otherwise_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a launch-bound model arms started unlike read a few percent apart: an option measured so
    keeps its verdict, passed or not, and the report says which way the comparison leaned."""
    from kernelopt_bot import compile_options
    from kernelopt_bot.harness.bench import BenchResult, RoundResult

    def compared(speedup: float) -> Any:
        def compare(*args: Any, **kwargs: Any) -> BenchResult:
            rounds = [RoundResult(seed, 1.0, 1.0 / speedup, 1.0) for seed in range(10)]
            return BenchResult("t", "cuda", "bf16", 1.0, 1.0 / speedup, speedup, 0.01, rounds=rounds,
                               rounds_planned=10)
        return compare

    monkeypatch.setattr(compile_options, "check_model", lambda *a: SimpleNamespace(passed=True))
    note = "not replaced: 3 s of its start's limit left, its load needs 10"
    option = compile_options.COMPILE_OPTIONS[0]
    cases = [(COLD | {"warm_load": note}, LOADED, "slow"), (LOADED, COLD, "fast"), (LOADED, LOADED, None)]
    for arm_info, baseline_info, lean in cases:
        for speedup, verified in ((0.97, False), (1.2, True)):
            monkeypatch.setattr(compile_options, "compare_arms", compared(speedup))
            arm = SimpleNamespace(info=arm_info, wait_ready=lambda: None, warm_load=True)
            found = compile_options._measure(option, arm, SimpleNamespace(spec="t"),  # type: ignore[arg-type]
                                             SimpleNamespace(info=baseline_info, warm_load=True), None, "cuda", "bf16",
                                             gamma=1.03, rounds=10, reps=20, time_left=None)
            assert found.verified is verified
            if lean is None:
                assert "started" not in found.detail and "cache" not in found.detail
            else:
                assert f"a few percent {lean}" in found.detail
            assert (note in found.detail) is (lean == "slow")


def test_configs_unlike_tells_not_said_from_none_unlike() -> None:
    from kernelopt_bot.harness.arm_process import configs_unlike

    a = {"configs": {"k0": "XBLOCK=8", "k1": "XBLOCK=16", "only_a": "XBLOCK=1"}}
    b = {"configs": {"k0": "XBLOCK=8", "k1": "XBLOCK=32"}}
    assert configs_unlike(a, b) == ["k1"] and configs_unlike(a, a) == []
    assert configs_unlike(a, {}) is None and configs_unlike({"configs": ["k0"]}, b) is None  # not a map: not said


def test_gate_4_on_process_arms_started_unlike_says_which_way_it_leans(monkeypatch: pytest.MonkeyPatch) -> None:
    """An untrusted candidate's gate 4 runs on process arms: where its arm and the baseline did not
    start alike the verdict says so; the engine's own arms share one process and get no note."""
    from kernelopt_bot.harness.timing import StepClock
    from kernelopt_bot.verify import cascade
    from kernelopt_bot.verify.verdict import GateResult

    monkeypatch.setattr(cascade, "check_model", lambda *a, **k: GateResult.ok("model"))
    monkeypatch.setattr(cascade, "check_performance", lambda *a, **k: GateResult.ok("performance", "1.10x"))
    fake = SimpleNamespace(
        options=cascade.VerifyOptions(), device="cuda", model_arms=SimpleNamespace(settle=lambda: None),
        capture=SimpleNamespace(target=SimpleNamespace(spec="t.py", dtype="bf16", train=False)),
        _roofline_gbps=lambda: None, _launches=lambda kernel: 1)
    kernel = SimpleNamespace(name="k")
    for where, arm_info, lean in (("process", COLD, "slow"), ("process", LOADED, None), ("engine", COLD, None)):
        arm = SimpleNamespace(where=where, info=arm_info, warm_load=where == "process")
        gates = cascade.Cascade._judge_on_arms(fake, kernel, {}, SimpleNamespace(info=LOADED), arm,  # type: ignore[arg-type]
                                               None, StepClock({}), None)
        perf = gates[-1]
        assert perf.passed and perf.reason.startswith("1.10x")
        if lean:  # said in the verdict, and kept with its numbers for a headline taken from them
            assert f"a few percent {lean}" in perf.reason and perf.reason.endswith(f"({perf.numbers['started_unlike']})")
        else:
            assert perf.reason == "1.10x" and "started_unlike" not in perf.numbers
