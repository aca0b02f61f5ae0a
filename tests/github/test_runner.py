"""The default runner calls the real engine; a job that raises never stops the others."""

from __future__ import annotations

import json
from pathlib import Path

from kernelopt_bot.config import parse_config
from kernelopt_bot.github.runner import DefaultRunner, TargetJob, load_outcomes, make_jobs, run_jobs
from kernelopt_bot.result import RunResult
from tests.github.fakes import FakeRunner


def test_default_runner_reaches_the_engine_without_raising(tmp_path: Path) -> None:
    """A target that fails to import comes back as a failed RunResult (the engine's contract)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "broken.py").write_text("raise ImportError('no such model here')\n")
    job = TargetJob(name="broken", entry="broken.py", dtype="fp32", device="cpu", budget={"candidates": 1})
    outcomes = run_jobs(DefaultRunner(repo), [job], tmp_path / "results")
    result = outcomes[0].result
    assert isinstance(result, RunResult) and result.status == "failed" and result.name == "broken"
    assert "no such model here" in (result.error or "")
    assert (tmp_path / "results" / "broken.fp32" / "result.json").is_file()


def test_make_jobs_applies_command_overrides() -> None:
    cfg = parse_config("targets:\n  - name: a\n    entry: a.py\n    dtypes: [bf16, fp32]\n    device: cuda\n"
                       "budget: {candidates: 9, tokens: 5}\ngamma: 1.1\n")
    jobs = make_jobs(cfg, cfg.targets, budget=3, gamma=1.2)
    assert [j.slug for j in jobs] == ["a.bf16", "a.fp32"]
    assert jobs[0].budget == {"candidates": 3, "tokens": 5} and jobs[0].gamma == 1.2 and jobs[0].device == "cuda"
    assert make_jobs(cfg, cfg.targets)[0].gamma == 1.1


def test_raising_runner_is_recorded_and_results_load_back(tmp_path: Path) -> None:
    jobs = [TargetJob(name=n, entry=f"{n}.py", dtype="fp32", device=None) for n in ("a", "b", "c")]
    runner = FakeRunner(plan={"b": "raise"})
    outcomes = run_jobs(runner, jobs, tmp_path)
    assert runner.calls == ["a.fp32", "b.fp32", "c.fp32"]
    assert [o.failed for o in outcomes] == [False, True, False]
    assert "RuntimeError: engine exploded on b" in (outcomes[1].result.error or "")
    loaded = load_outcomes([tmp_path])
    assert [o.job.slug for o in loaded] == ["a.fp32", "b.fp32", "c.fp32"]
    assert json.loads((tmp_path / "b.fp32" / "job.json").read_text())["entry"] == "b.py"


def test_default_runner_reproduce_command_names_the_entry_as_the_config_does(tmp_path: Path) -> None:
    """The PR body's command is for a maintainer's checkout, not the runner's absolute path."""
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    (repo / "models" / "broken.py").write_text("raise ImportError('not a model')\n")
    job = TargetJob(name="broken", entry="models/broken.py", dtype="bf16", device="cpu", budget={"candidates": 1})
    result = run_jobs(DefaultRunner(repo), [job], tmp_path / "results")[0].result
    assert result.reproduce.startswith("kernelopt optimize models/broken.py --dtype bf16 --device cpu")
    assert str(tmp_path) not in result.reproduce
    saved = json.loads((tmp_path / "results" / "broken.bf16" / "result.json").read_text())
    assert saved["reproduce"] == result.reproduce


def test_a_factory_entry_imports_from_the_repository_in_the_engine_only(tmp_path: Path) -> None:
    """``pkg.mod:factory`` is imported from the repository by the engine; the bot's own process
    (which may hold the LLM key) never puts the repository on its import path, where a file such
    as the repository's ``yaml.py`` would shadow what the bot imports."""
    import sys

    repo = tmp_path / "repo"
    (repo / "shop").mkdir(parents=True)
    (repo / "shop" / "__init__.py").write_text("")
    (repo / "shop" / "models.py").write_text(
        "import torch\n\ndef make():\n    return torch.nn.Linear(8, 8), (torch.randn(4, 8),)\n")
    job = TargetJob(name="linear", entry="shop.models:make", dtype="fp32", device="cpu",
                    budget={"candidates": 0, "compile_options": False})
    result = run_jobs(DefaultRunner(repo), [job], tmp_path / "results")[0].result
    assert result.status == "ok", result.error
    assert str(repo.resolve()) not in sys.path and "shop" not in sys.modules
