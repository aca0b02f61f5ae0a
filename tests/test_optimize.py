"""`kernelopt optimize` end to end on the CPU interpreter: files, store, cache, budgets, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry
from kernelopt_bot.pack.runtime import running_environment
from kernelopt_bot.pipeline import run_pipeline
from kernelopt_bot.result import RunResult
from kernelopt_bot.store import Store
from tests.helpers import EXAMPLES, captured, run_cli

GELU = str(EXAMPLES / "gelu.py")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("optimize")
    out, db = root / "out", root / "store.db"
    result = run_cli("optimize", GELU, "--out", str(out), "--store", str(db), "--budget", "candidates=2")
    assert result.returncode == 0, result.stderr + result.stdout
    return out, db


def test_writes_report_result_and_pack(first_run: tuple[Path, Path]) -> None:
    out, _ = first_run
    result = RunResult.load(out / "result.json")
    assert result.status == "ok" and result.error is None
    assert result.kernels and result.kernels[0].name.startswith("triton_poi_fused_gelu")
    assert result.kernels[0].candidates >= 1
    assert KernelPack.load(out / "pack.json") is not None
    report = (out / "report.md").read_text()
    assert "## Kernels" in report and "kernelopt optimize" in report
    # every step timed, and the steps account for the run (nothing long happens outside them)
    assert {"loading the target", "compiling and capturing", "end-to-end benchmark"} <= set(result.phases)
    assert any(step.startswith("searching g0:triton_poi_fused_gelu") for step in result.phases)
    assert result.seconds is not None and sum(result.phases.values()) <= result.seconds + 0.1
    assert sum(result.phases.values()) >= 0.8 * result.seconds
    assert "Where the time went" in report
    # the processes the run started: the engine and its model arms; the tuner's candidates are
    # trusted, so their gates ran in the engine and no sandbox was started
    processes = json.loads((out / "result.json").read_text())["processes"]
    assert processes["started"] >= 1 and processes["sandboxes"] == 0
    assert 1 <= processes["long_lived"] <= processes["started"]
    assert f"Processes started: {processes['started']} " in report
    if result.device == "cpu":
        assert processes["peak_gpu_mb"] is None
        assert processes["baseline_compile_s"] is None  # no baseline arm: nothing to time end to end
    else:  # the default compile in an arm of its own, beside the options' (their estimates' evidence)
        assert processes["baseline_compile_s"] > 0
    if result.device == "cpu":
        assert result.speedup is None and "not measured" in report
        assert len(KernelPack.load(out / "pack.json")) == 0  # nothing passes gate 4 without a GPU
        assert processes["started"] == 1  # and an empty pack has no end-to-end benchmark to start arms for
        # its candidates passed gates 1-3 and were not timed: not "no candidate accepted", which reads as rejected
        assert result.kernels[0].status == "passed gates 1-3 (not timed: no GPU)", result.kernels[0].detail


def test_store_records_runs_and_candidates(first_run: tuple[Path, Path]) -> None:
    _, db = first_run
    with Store(db) as store:
        runs = store.runs.recent()
        assert runs and runs[0]["status"] == "ok"
        candidates = store.runs.candidates(runs[0]["id"])
        assert candidates and all("status" in c for c in candidates)
        assert store.memory.recall("pointwise")


def test_verified_cache_is_reused_by_the_next_run(first_run: tuple[Path, Path], tmp_path: Path) -> None:
    """A kernel verified before (same key, GPU, versions) is not searched again; its entry is packed."""
    _, db = first_run
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    env = running_environment(cap.target.device)
    entry = PackEntry(kernel.key, kernel.name, config=LaunchConfig({"XBLOCK": 64}, 4, 1), guard=env,
                      measured={"speedup": 1.2})
    with Store(db) as store:
        store.cache.record_verified(kernel.key, env.gpu, env.compute_capability, env.torch, env.triton, entry, 1.2, None)
    result = run_pipeline(GELU, dtype="fp32", out_dir=tmp_path, store_path=db)
    outcome = result.kernels[0]
    assert outcome.status == "cached (verified)" and outcome.candidates == 0
    pack = KernelPack.load(tmp_path / "pack.json")
    assert kernel.key in pack.entries
    with Store(db) as store:
        assert store.cache.invalidate(kernel.key) >= 1


def test_budget_zero_searches_nothing(tmp_path: Path) -> None:
    result = run_pipeline(GELU, out_dir=tmp_path, store_path=tmp_path / "db", budget={"candidates": 0})
    assert result.status == "ok"
    assert result.kernels[0].status == "not searched (budget)"
    assert result.usage["used"]["candidates"] == 0


def test_failing_target_is_a_result_not_a_crash(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    result = run_pipeline(str(bad), out_dir=tmp_path / "out", store_path=tmp_path / "db")
    assert result.status == "failed" and "missing get_inputs" in (result.error or "")
    assert (tmp_path / "out" / "report.md").read_text().count("failed") >= 1
    assert json.loads((tmp_path / "out" / "result.json").read_text())["status"] == "failed"


def test_a_failed_run_keeps_the_pack_an_earlier_run_verified(tmp_path: Path) -> None:
    """Run again after the model file broke, a run's empty pack replaced the one a GPU run had
    verified in the same folder: it is moved to previous/ and the error says so."""
    out = tmp_path / "out"
    out.mkdir()
    earlier = KernelPack(target="model.py", created_by="kernelopt optimize")
    earlier.add(PackEntry("k" * 64, "triton_per_fused_0", config=LaunchConfig({"XBLOCK": 1, "R0_BLOCK": 1024}, 8, 1)))
    earlier.save(out / "pack.json")
    (out / "report.md").write_text("# the earlier report\n")
    saved = (out / "pack.json").read_bytes()
    model = tmp_path / "model.py"
    model.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x)\n        return x\n")
    result = run_cli("optimize", str(model), "--out", str(out), "--store", str(tmp_path / "s.db"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the earlier run's pack, 1 entry, was kept in previous/" in result.stderr + result.stdout
    assert (out / "previous" / "pack.json").read_bytes() == saved
    assert (out / "previous" / "report.md").read_text() == "# the earlier report\n"
    assert len(KernelPack.load(out / "pack.json")) == 0
    again = run_cli("optimize", str(model), "--out", str(out), "--store", str(tmp_path / "s.db"))
    assert again.returncode == 2 and (out / "previous" / "pack.json").read_bytes() == saved  # an empty pack moves nothing


@pytest.mark.parametrize("returned", ["None", "3", "x.sum().item()"])
def test_a_model_that_returns_no_tensor_is_bad_input(tmp_path: Path, returned: str) -> None:
    """Gate 3 would compare nothing: any kernel would pass it. It read "captured no graph", exit 0."""
    model = tmp_path / "model.py"
    model.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                     f"        y = torch.relu(x)\n        return {returned}\n\n\n"
                     "def get_inputs():\n    return [torch.randn(8, 8)]\n\n\n"
                     "def get_init_inputs():\n    return []\n")
    result = run_cli("optimize", str(model), "--out", str(tmp_path / "out"), "--store", str(tmp_path / "s.db"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "with no tensor in it and no buffer" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["optimize", GELU, "--budget", "nope=1"], "unknown key"),
    (["optimize", GELU, "--budget", "candidates=-1"], "non-negative"),
    (["optimize", GELU, "--budget", "rounds=0"], "at least 1"),  # checked by the run plan
    (["optimize", GELU, "--budget", "kernels=null"], "null is not allowed"),
    (["optimize", "missing.py"], "no such file"),
    (["optimize", GELU, "--inductor-config", "not_an_inductor_key=1"], "unknown Inductor config key"),
    (["optimize", GELU, "--inductor-config", "no_equals_sign"], "expected KEY=VALUE"),
    (["optimize", GELU, "--inductor-config", "coordinate_descent_tuning=maybe"],
     'coordinate_descent_tuning="maybe" (expected true or false)'),
    (["optimize", GELU, "--mode", "fastest"], "Invalid value for '--mode'"),
])
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2 and message in result.stderr


LSTM_MODEL = '''
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def get_inputs():
    return [torch.randn(2, 5, 8)]


def get_init_inputs():
    return []
'''


def test_a_model_without_triton_kernels_says_there_was_nothing_to_search(tmp_path: Path) -> None:
    """Dynamo does not trace an nn.LSTM (torch.compile captures no graph and runs it eagerly): the
    run succeeds and says why nothing was searched, in the terminal and the report, instead of an
    empty table; on the CPU it starts no model arm for an end-to-end benchmark that has nothing
    to compare (it took 19 s for nothing). ``inspect`` says the same, not that every op became a
    Triton kernel (it did, before: an empty list of library calls read as all Triton)."""
    model = tmp_path / "lstm.py"
    model.write_text(LSTM_MODEL)
    result = run_cli("optimize", str(model), "--out", str(tmp_path / "out"), "--store", str(tmp_path / "s.db"))
    assert result.returncode == 0, result.stderr + result.stdout
    said = " ".join(result.stdout.split())  # the terminal wraps long lines
    assert "torch.compile captured no graph" in said and "nothing to search" in said
    report = (tmp_path / "out" / "report.md").read_text()
    assert "captured no graph" in report and "| kernel | kind |" not in report
    run = RunResult.load(tmp_path / "out" / "result.json")
    assert run.status == "ok" and run.kernels == [] and run.graphs == 0
    inspected = run_cli("inspect", str(model))
    assert inspected.returncode == 0, inspected.stderr + inspected.stdout
    shown = " ".join(inspected.stdout.split())
    assert "captured no graph" in shown and "every op became a Triton kernel" not in shown
    if run.device == "cpu":
        assert run.phases.get("end-to-end benchmark", 0.0) < 5.0
        assert json.loads((tmp_path / "out" / "result.json").read_text())["processes"]["started"] == 1


def test_a_model_whose_every_op_is_a_library_call_says_so(tmp_path: Path) -> None:
    """A plain matmul compiles to one graph and no Triton kernel (Inductor keeps the library's
    GEMM): the run says that, not that nothing was traced."""
    result = run_cli("optimize", "benchmarks/level1/matmul.py", "--out", str(tmp_path / "out"),
                     "--store", str(tmp_path / "s.db"))
    assert result.returncode == 0, result.stderr + result.stdout
    run = RunResult.load(tmp_path / "out" / "result.json")
    assert run.status == "ok" and run.kernels == [] and run.graphs == 1
    said = " ".join(result.stdout.split())
    assert "The compiled model has no Triton kernels" in said and "library calls" in said
    assert run.library_calls == 1


VIEW_MODEL = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x.view(x.shape[0], -1)
def get_inputs():
    return [torch.randn(8, 4, 16)]
def get_init_inputs():
    return []
'''


def test_a_model_that_only_views_its_input_says_it_computes_nothing(tmp_path: Path) -> None:
    """A view compiles to a graph with neither a Triton kernel nor a library call: neither
    optimize nor inspect says the ops went to libraries or became Triton kernels."""
    model = tmp_path / "view.py"
    model.write_text(VIEW_MODEL)
    result = run_cli("optimize", str(model), "--out", str(tmp_path / "out"), "--store", str(tmp_path / "s.db"))
    assert result.returncode == 0, result.stderr + result.stdout
    run = RunResult.load(tmp_path / "out" / "result.json")
    assert run.kernels == [] and run.graphs == 1 and run.library_calls == 0
    said = " ".join(result.stdout.split())
    assert "computes nothing" in said and "library calls (cuBLAS" not in said
    inspected = run_cli("inspect", str(model))
    assert inspected.returncode == 0, inspected.stderr + inspected.stdout
    shown = " ".join(inspected.stdout.split())
    assert "nothing to compute" in shown and "every op became a Triton kernel" not in shown
