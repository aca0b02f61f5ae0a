"""The PR flow for a kernel target (issue 14): a PR changes a hand-written Triton kernel file; the
follow-up PR changes that file (the verified launch config written where the kernel is launched),
not a pack. The publish stage rebuilds the change from the checked fields of the result, only
for files the trusted config names for the target.

The runner here is the real engine on the CPU (``run_pipeline`` with ``untimed_patch``: gates 1-3 in
the interpreter, the edit made from the real capture); only gate 4's verdict and number, which
need a GPU, are the fixture's: the publish stage sees what a GPU run writes.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kernelopt_bot.github.runner import TargetJob
from kernelopt_bot.pipeline import run_pipeline
from kernelopt_bot.result import RunResult
from tests.github.conftest import Harness, git

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = (ROOT / "tests" / "kernel_targets" / "liger_swiglu_launcher.py").read_text()

CONFIG = """\
targets:
  - name: swiglu
    kind: triton
    entry: kernels/swiglu_target.py
    paths: ["kernels/**"]
  - name: notriton
    kind: helion
    entry: kernels/other_target.py
publish:
  draft: true
"""


def _liger_swiglu() -> str:
    spec = importlib.util.find_spec("liger_kernel.ops.swiglu")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).read_text()


@dataclass
class CpuEngineRunner:
    """The real pipeline on the CPU; a kernel that passed gates 1-3 is reported as a GPU run
    would report it after gate 4 (``speedup``)."""

    repo: Path
    speedup: float = 1.11
    calls: list[str] = field(default_factory=list)

    def run(self, job: TargetJob, out_dir: Path) -> RunResult:
        self.calls.append(job.slug)
        result = run_pipeline(str(self.repo / job.entry), device="cpu", dtype=job.dtype, out_dir=out_dir,
                              budget={"candidates_per_kernel": 1}, shown_as=job.entry, untimed_patch=True)
        for kernel in result.kernels:
            if kernel.status.startswith("passed gates 1-3"):
                kernel.status, kernel.speedup = "accepted", self.speedup
        result.baseline_ms, result.optimized_ms, result.speedup = 0.2, 0.2 / self.speedup, self.speedup
        result.save(out_dir / "result.json")
        return result


@pytest.fixture
def kernel_repo(tmp_path: Path) -> tuple[Path, str, str]:
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    (repo / ".kernelopt.yml").write_text(CONFIG)
    (repo / "kernels" / "swiglu_target.py").write_text(LAUNCHER)
    (repo / "kernels" / "liger_swiglu.py").write_text(_liger_swiglu())
    (repo / "kernels" / "other_target.py").write_text("def launch(x):\n    return x\n\n\ndef get_inputs():\n    return []\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    base = git(repo, "rev-parse", "HEAD")
    text = (repo / "kernels" / "liger_swiglu.py").read_text()
    (repo / "kernels" / "liger_swiglu.py").write_text(text.replace("# SwiGLU", "# SwiGLU (tuned)", 1) + "\n")
    git(repo, "commit", "-q", "-am", "touch the kernel")
    return repo, base, git(repo, "rev-parse", "HEAD")


def test_a_pr_changing_a_triton_kernel_gets_a_follow_up_pr_that_edits_the_kernel(
        harness: Harness, kernel_repo: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    repo, base, head = kernel_repo
    harness.runner = CpuEngineRunner(repo)  # type: ignore[assignment]
    monkeypatch.setattr("kernelopt_bot.github.cli.RUNNER_FACTORY", lambda root: harness.runner)
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    run = harness.bot("pull_request", ev, repo, "--dry-run", out=out)
    assert run.code == 0, run.text
    assert harness.runner.calls == ["swiglu.fp32"]  # the kernel file is in swiglu's paths; notriton not affected
    publish = json.loads((out / "publish.json").read_text())
    prop = publish["proposal"]
    assert prop["files"] == ["kernels/liger_swiglu.py"]  # the kernel's own source, no pack
    assert prop["title"] == "kernelopt: verified kernels for #1 (1.11x on swiglu)"
    assert prop["commit_message"].startswith("kernelopt: kernel configs for #1")
    new = (out / "files" / "kernels" / "liger_swiglu.py").read_text()
    assert "# kernelopt: num_stages=2 for this shape" in new and "== (4, 96, 128) else 3)," in new
    body = (out / "pr_body.md").read_text()
    assert "## Kernel source changes" in body and "```diff\n--- a/kernels/liger_swiglu.py" in body
    assert "## Activation" not in body and "pack is installed" not in body
    # The diff in the PR body is the change: it applies to the PR's head and leaves the file importable.
    diff = re.search(r"```diff\n(.*?)\n```", body, re.S)
    assert diff is not None
    (harness.tmp / "body.patch").write_text(diff.group(1) + "\n")
    applied = subprocess.run(["git", "apply", str(harness.tmp / "body.patch")], cwd=repo, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert (repo / "kernels" / "liger_swiglu.py").read_text() == new


def test_an_edit_to_a_file_the_config_does_not_name_is_not_published(
        harness: Harness, kernel_repo: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The run stage is PR code: a result claiming an edit of a workflow file or a file outside
    the target's paths gets nothing written, and the report says why."""
    repo, base, head = kernel_repo
    runner = CpuEngineRunner(repo)
    original_run = runner.run

    def forged(job: TargetJob, out_dir: Path) -> RunResult:
        result = original_run(job, out_dir)
        for target in ("../.github/workflows/ci.py", "../setup.py"):
            result.source_edits.append({**result.source_edits[0], "file": target})
        result.save(out_dir / "result.json")
        return result

    runner.run = forged  # type: ignore[method-assign]
    monkeypatch.setattr("kernelopt_bot.github.cli.RUNNER_FACTORY", lambda root: runner)
    out = harness.tmp / "dry"
    ev = harness.event("pull_request", pull_request__base__sha=base, pull_request__head__sha=head)
    run = harness.bot("pull_request", ev, repo, "--dry-run", out=out)
    assert run.code == 0, run.text
    prop = json.loads((out / "publish.json").read_text())["proposal"]
    assert prop["files"] == ["kernels/liger_swiglu.py"]
    comment = (out / "comment.md").read_text()
    assert ".github/workflows/ci.py is not the target" in comment and "setup.py is not the target" in comment


def test_a_target_whose_entry_is_not_its_stated_kind_fails_with_the_reason(tmp_path: Path) -> None:
    from kernelopt_bot.github.runner import DefaultRunner

    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    (repo / "kernels" / "t.py").write_text(LAUNCHER)
    job = TargetJob(name="t", entry="kernels/t.py", dtype="fp32", device="cpu", kind="helion")
    result = DefaultRunner(repo).run(job, tmp_path / "out")
    assert result.status == "failed" and result.error_kind == "bad input"
    assert result.error == "kernels/t.py is a triton target, not the helion target the config says"


def test_forged_source_edits_are_rejected_by_the_publish_stage() -> None:
    from kernelopt_bot.github.trusted import UntrustedResultError, validate_result

    good = {"file": "k.py", "kind": "launch", "kernel": "k", "config": {"num_warps": 8}, "note": "ok", "line": 3,
            "arg_names": ["x", "n"], "values": {"n": 64}, "grid": [4]}
    base = {"schema": "kernelopt-result/1", "target": "k.py", "name": "k", "device": "cuda", "dtype": "fp32"}
    assert validate_result(json.dumps({**base, "source_edits": [good]}), name="k", dtype="fp32").source_edits == [good]
    for forged in ({"note": "x\nimport os"}, {"kernel": "k; import os"}, {"config": {"num_warps": "8)\nos.system('x'"}},
                   {"config": {"BLOCK": 64}}, {"values": {"n": "os"}}, {"file": "/etc/x.py"}, {"kind": "shell"},
                   {"arg_names": ["a b"]}):
        with pytest.raises(UntrustedResultError):
            validate_result(json.dumps({**base, "source_edits": [{**good, **forged}]}), name="k", dtype="fp32")
