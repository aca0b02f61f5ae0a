"""What `kernelopt optimize` writes for a person: report.md's headline and tables, result.json's
LLM status, a Reproduce command that runs as printed, and a working tree left clean."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kernelopt_bot.folders import make_dirs
from kernelopt_bot.pipeline import reproduce_command, run_pipeline
from kernelopt_bot.report import render_report
from kernelopt_bot.result import KernelOutcome, Recommendation, RunResult
from tests.helpers import EXAMPLES, ROOT

GELU = str(EXAMPLES / "gelu.py")
EVENT = ROOT / "tests" / "github" / "fixtures" / "events" / "pull_request.json"
GIT_ENV = {"GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.invalid",
           "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.invalid"}


def user_env() -> dict[str, str]:
    """The environment of a user's shell: the installed ``kernelopt`` on PATH, nothing the test
    session set for itself (interpreter mode, the examples' size)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "KERNELOPT_EXAMPLE_SIZE")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def shell(command: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """Run a command line exactly as printed, through the shell, as a user pastes it."""
    return subprocess.run(command, shell=True, cwd=cwd, env=user_env(), capture_output=True, text=True,
                          timeout=timeout)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


def model_repo(root: Path, files: dict[str, str]) -> Path:
    """A git repository holding the gelu example (and ``files``), everything committed."""
    root.mkdir(parents=True)
    shutil.copy(GELU, root / "gelu.py")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "model")
    return root


def test_reproduce_command_prints_values_the_cli_parses() -> None:
    budget = {"compile_options": False, "gpu_seconds": None, "wall_seconds": 30.5, "candidates": 8}
    command = reproduce_command("models/a b.py", None, "fp32", budget, 1.03, {"base_url": "http://x/v1"})
    assert shlex.split(command) == ["kernelopt", "optimize", "models/a b.py", "--dtype", "fp32",
                                    "--budget", "compile_options=false", "--budget", "wall_seconds=30.5",
                                    "--llm-base-url", "http://x/v1"]  # defaults left out, no empty --llm-model


def test_the_printed_reproduce_command_runs_and_leaves_the_tree_clean(tmp_path: Path) -> None:
    """A user runs `kernelopt optimize` in their repository, then pastes the report's Reproduce
    line: both exit 0, and ``git status`` shows nothing new (kernelopt-out/ and .kernelopt/ hold
    a .gitignore)."""
    repo = model_repo(tmp_path / "repo", {})
    first = shell("kernelopt optimize gelu.py --budget candidates=0 --budget compile_options=false", repo)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    result = json.loads((repo / "kernelopt-out" / "gelu" / "result.json").read_text())
    command = result["reproduce"]
    assert "compile_options=false" in command and command in (repo / "kernelopt-out" / "gelu" / "report.md").read_text()
    again = shell(command, repo)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert (repo / "kernelopt-out" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (repo / ".kernelopt" / ".gitignore").is_file()


def test_only_folders_kernelopt_creates_get_a_gitignore(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    make_dirs(tmp_path / "mine" / "out" / "gelu")
    assert (tmp_path / "mine" / "out" / ".gitignore").read_text().endswith("*\n")
    assert not (tmp_path / "mine" / ".gitignore").exists()  # the user's folder stays as it was
    assert not (tmp_path / "mine" / "out" / "gelu" / ".gitignore").exists()  # one is enough
    make_dirs(tmp_path / "mine")
    assert not (tmp_path / "mine" / ".gitignore").exists()


def test_the_bot_leaves_the_tree_clean(tmp_path: Path) -> None:
    """`kernelopt bot --dry-run` from the repository root with its default --out and store."""
    config = ("targets:\n  - name: gelu\n    entry: gelu.py\n    paths: ['*.py']\n"
              "budget: {wall_seconds: 1, compile_options: false}\n")  # search nothing: quick
    repo = model_repo(tmp_path / "repo", {".kernelopt.yml": config})
    base = git(repo, "rev-parse", "HEAD").strip()
    with (repo / "gelu.py").open("a") as f:
        f.write("# a change\n")
    git(repo, "commit", "-q", "-am", "change")
    event = json.loads(EVENT.read_text())
    event["pull_request"]["base"]["sha"] = base
    event["pull_request"]["head"]["sha"] = git(repo, "rev-parse", "HEAD").strip()
    (tmp_path / "event.json").write_text(json.dumps(event))
    run = shell(f"kernelopt bot --event-name pull_request --event-path {tmp_path / 'event.json'} --dry-run", repo)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (repo / "kernelopt-out" / "results").is_dir()
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_an_unreachable_llm_endpoint_is_in_the_result_and_the_headline(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_LLM_MAX_RETRIES", "0")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nothing listens there
    result = run_pipeline(GELU, out_dir=tmp_path / "out", store_path=tmp_path / "db",
                          budget={"candidates_per_kernel": 0, "compile_options": False},
                          llm={"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"})
    assert result.status == "ok", result.error
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["llm_status"] == "unavailable" and saved["llm_error"]
    headline = (tmp_path / "out" / "report.md").read_text().split("## Kernels")[0]
    assert "LLM agents unavailable: tuner only" in headline


def test_no_llm_endpoint_is_not_reported_as_unavailable(tmp_path: Path) -> None:
    result = run_pipeline(GELU, out_dir=tmp_path / "out", store_path=tmp_path / "db", budget={"candidates": 0})
    assert result.llm_status == "not configured" and result.llm_headline == ""
    assert "LLM" not in (tmp_path / "out" / "report.md").read_text()


def _measured_result() -> RunResult:
    result = RunResult(target="m.py", name="m", device="cuda", dtype="fp32", baseline_ms=2.0, optimized_ms=1.6,
                       speedup=1.25, noise_floor=0.004, pack_entries=1, reproduce="kernelopt optimize m.py")
    result.kernels = [KernelOutcome("triton_poi_fused_0", "pointwise", 0.7, 1.4, 3, "accepted", 1.2, "config"),
                      KernelOutcome("triton_red_fused_1", "reduction", 0.3, 0.6, 2, "rejected by correctness")]
    result.recommendations = [Recommendation("mode=max-autotune-no-cudagraphs", 1.08, True, "1.08x > 1.03"),
                              Recommendation("coordinate_descent_tuning=True", 1.01, False, "below 1.03")]
    result.usage = {"limits": {"candidates": 8, "tokens": 200000, "gpu_s": None, "wall_s": 110.0, "cost": None},
                    "used": {"candidates": 5, "tokens": 0, "gpu_s": 61.25, "wall_s": 98.42, "cost": 0.0,
                             "prompt_tokens": 0, "completion_tokens": 0, "llm_calls": 0},
                    "by_purpose": {}, "exhausted": None}
    return result


def test_the_headline_comes_first_then_the_tables() -> None:
    report = render_report(_measured_result())
    headline, _, rest = report.partition("## Kernels")
    assert "**1.250x** end to end" in headline
    assert "**Verified kernels:** 1 of 2" in headline
    assert "`mode=max-autotune-no-cudagraphs` is **1.080x** faster" in headline
    assert headline.index("Speedup") < headline.index("Verified kernels") < headline.index("Compiler option")
    assert "| `triton_poi_fused_0` |" in rest


def test_the_report_names_kernels_and_steps_without_graph_labels() -> None:
    result = _measured_result()
    result.kernels[1].name = "g1:triton_red_fused_1"
    result.phases = {"searching g0:triton_poi_fused_0": 3.0, "searching g1:triton_red_fused_1": 2.0}
    report = render_report(result)
    assert "g0:" not in report and "g1:" not in report
    assert "| searching triton\\_poi\\_fused\\_0 |" in report and "triton_red_fused_1 (graph 1)" in report


def test_budget_and_usage_are_a_table_not_a_dict() -> None:
    report = render_report(_measured_result())
    budget = report.split("## Budget")[1].split("##")[0]
    assert "{" not in budget and "'" not in budget
    assert "| wall seconds | 110 | 98.4 |" in budget
    assert "| GPU seconds | no limit | 61.2 |" in budget
    assert "LLM tokens" not in budget  # no LLM agents asked for: their resources are noise


def test_host_latency_and_device_memory_are_reported_when_measured() -> None:
    result = _measured_result()
    assert "host-inclusive latency" not in render_report(result)  # not measured: no row
    result.latency_ms = {"baseline": 3.1, "optimized": 2.2, "noise_floor": 0.01}
    result.processes = {"started": 6, "sandboxes": 0, "peak_gpu_mb": 900.0, "device_peak_mb": 3000.0,
                        "model_gpu_mb": 1200.0}
    result.phases = {"searching": 12.0}
    report = render_report(result)
    assert "| host-inclusive latency of a call, `torch.compile` -> with pack | 3.1" in report
    assert "on the device (every process): 3000 MiB (2.5x what the compiled model alone holds)" in report


def test_each_kernel_shows_how_near_the_copy_roofline_the_compilers_kernel_runs() -> None:
    """Where no candidate was faster, the reader needs to know whether anything was left: a
    memory-bound kernel at 93% of the device's copy bandwidth has little more to give."""
    result = _measured_result()
    result.kernels[1].roofline_fraction = 0.934
    report = render_report(result)
    assert "| of copy roofline |" in report
    assert "| `triton_red_fused_1` | reduction | 30.0% | 0.6000 | 93.4% | 2 |" in report
    assert "| `triton_poi_fused_0` | pointwise | 70.0% | 1.4000 | - | 3 |" in report
    again = RunResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.kernels[1].roofline_fraction == 0.934


def test_the_best_option_with_the_pack_is_its_own_headline_and_not_the_recommended_option() -> None:
    """Issue 13: the pack over the user's settings, and the best verified setting plus the pack."""
    result = _measured_result()
    result.recommendations.append(Recommendation("mode=max-autotune-no-cudagraphs + pack", 1.31, True,
                                                 "1 of 1 pack entries applied; 1.31x > 1.03"))
    assert result.best_recommendation is not None
    assert result.best_recommendation.option == "mode=max-autotune-no-cudagraphs"  # an option alone
    assert result.best_verified_speedup == 1.31
    headline = render_report(result).partition("## Kernels")[0]
    lines = headline.splitlines()
    option = next(i for i, line in enumerate(lines) if line.startswith("- **Compiler option:**"))
    assert lines[option + 1] == ("- **Option and pack together:** `mode=max-autotune-no-cudagraphs + pack`: "
                                 "**1.310x** over `torch.compile (default)` (verified)")
    result.recommendations[-1] = Recommendation("mode=max-autotune-no-cudagraphs + pack", None, False,
                                                "not measured: the wall-time budget ran out")
    assert result.best_verified_speedup == 1.25  # the pack's own
    assert "- **Option and pack together:** not measured: the wall-time budget ran out" in render_report(result)
    result.recommendations.pop()
    assert "Option and pack together" not in render_report(result)


def test_the_configs_an_option_settled_on_are_listed_where_they_differ() -> None:
    """Where an option beats the pack, its compile's configs show what the tuner did not find."""
    result = _measured_result()
    assert "settled on" not in render_report(result)
    result.recommendations[0] = Recommendation(
        result.recommendations[0].option, 1.33, True, "1.33x > 1.03",
        configs={"triton_red_fused_amax_0": "R0_BLOCK=8, XBLOCK=64, num_warps=8, num_stages=1"})
    report = render_report(result)
    assert "Launch configs each option's compile settled on, where the default compile's differ:" in report
    assert (f"- `{result.recommendations[0].option}`, `triton_red_fused_amax_0`: R0\\_BLOCK=8, XBLOCK=64, "
            "num\\_warps=8") in report
    again = RunResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.recommendations[0].configs == result.recommendations[0].configs


def test_what_a_run_verified_counts_at_least_one_on_a_gpu() -> None:
    result = _measured_result()
    result.speedup, result.recommendations = 1.0, []
    assert result.best_verified_speedup == 1.0
    result.device, result.speedup = "cpu", None
    assert result.best_verified_speedup is None
    failed = _measured_result()
    failed.status, failed.speedup = "failed", None  # its verified option does not count: the run failed
    assert failed.best_verified_speedup is None


def test_an_option_not_measured_says_so_once_in_the_headline() -> None:
    """A small CNN on the H200: every option ran out of time after its compile, and the headline
    read "not measured: not measured: ..."."""
    result = _measured_result()
    result.recommendations = [Recommendation("mode=max-autotune-no-cudagraphs", None, False,
                                             "not measured: the wall-time budget ran out after its compile")]
    assert ("- **Compiler option:** not measured: the wall-time budget ran out after its compile\n"
            in render_report(result))
    result.recommendations = [Recommendation("mode=max-autotune-no-cudagraphs", None, False,
                                             "failed: out of memory")]
    assert "- **Compiler option:** not measured: failed: out of memory\n" in render_report(result)


def test_each_options_compile_and_timing_seconds_are_in_its_row() -> None:
    """How long each option's arm took to compile, and its check and rounds, where it did (what
    the estimates are checked against); a dash where it did not."""
    result = _measured_result()
    result.recommendations[0] = Recommendation("mode=max-autotune-no-cudagraphs", 1.08, True, "1.08x > 1.03",
                                               compile_s=41.6, timed_s=12.4, compile_estimate_s=36.5)
    report = render_report(result)
    assert "| option | speedup | verified | compile (estimate) | check and rounds |" in report
    rows = [line for line in report.splitlines() if line.startswith("| `mode=max-autotune") or
            line.startswith("| `coordinate_descent")]
    assert rows[0].endswith("| 42 s (36 s) | 12 s |") and rows[1].endswith("| - | - |")


def test_the_headline_speaks_for_the_first_option_that_started() -> None:
    """On a launch-bound model CUDA graphs leads the options: where it started and failed while
    max-autotune never started, the headline says what happened to CUDA graphs, not that
    max-autotune's compile would not have fit."""
    from kernelopt_bot.result import PASSED_OVER

    result = _measured_result()
    result.recommendations = [
        Recommendation("mode=max-autotune-no-cudagraphs", None, False, f"{PASSED_OVER} 46 s), check and timing"),
        Recommendation("coordinate_descent_tuning=True", None, False, "not measured: the wall-time budget ran out"),
        Recommendation("mode=reduce-overhead (CUDA graphs)", None, False, "failed: CUDA graphs capture failed")]
    assert result.option_outcome is result.recommendations[2]
    assert "- **Compiler option:** not measured: failed: CUDA graphs capture failed\n" in render_report(result)
    result.recommendations = result.recommendations[:2]  # none started: the first one speaks
    assert result.option_outcome is result.recommendations[0]
