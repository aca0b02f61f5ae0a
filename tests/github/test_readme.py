"""The Action's front page in README.md: what it shows is what the code does.

The config reference is generated from the pydantic models, the inputs and outputs are those of
action.yml, the workflow snippet uses only real inputs and outputs, the dry-run command runs as
printed, and the activation snippet names the pack paths that optimize and the bot really write.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from kernelopt_bot.config import KerneloptConfig
from kernelopt_bot.github.proposal import pack_file
from tests.github.conftest import Harness, git
from tests.helpers import user_env

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
EXAMPLE_EVENTS = ROOT / "examples" / "events"


def _block(name: str) -> str:
    match = re.search(rf"<!-- {name}:start[^>]*-->\n(.*?)\n<!-- {name}:end -->", README, re.S)
    assert match, f"README.md has no {name} block"
    return match.group(1)


def _fenced(text: str) -> str:
    match = re.search(r"```\w*\n(.*?)\n```", text, re.S)
    assert match
    return match.group(1)


def _table_keys(heading: str) -> set[str]:
    """The backticked names in the first column of the table under ``heading:``."""
    section = README.split(f"\n{heading}:\n", 1)[1].lstrip("\n")
    keys: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("|"):
            break
        keys.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return keys


def test_config_reference_is_generated_from_the_model() -> None:
    """The README's table is what `kernelopt config keys` prints (run as a user runs it)."""
    proc = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "config", "keys"], capture_output=True,
                          text=True, env=user_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    expected = proc.stdout.rstrip("\n")
    assert _block("config-reference") == expected, (
        "README.md's config reference is out of date; paste the output of `kernelopt config keys`:\n" + expected)


def test_every_config_key_has_a_row() -> None:
    """Every key the model accepts (nested ones too) is a row; a key without a description fails
    reference_table() itself."""
    rows = set(re.findall(r"^\| `([^`]+)` \|", _block("config-reference"), re.M))

    def keys(model: type, prefix: str) -> set[str]:
        out = set()
        for name, info in model.model_fields.items():
            if info.exclude:
                continue
            out.add(prefix + name)
            sub = {"targets": ("targets[].", "TargetConfig"), "budget": ("budget.", "BudgetConfig"),
                   "llm": ("llm.", "LLMConfig"), "publish": ("publish.", "PublishConfig")}.get(name)
            if sub and prefix == "":
                import kernelopt_bot.config as config

                out |= keys(getattr(config, sub[1]), sub[0])
        return out

    assert rows == keys(KerneloptConfig, "")


def test_every_action_input_and_output_is_documented() -> None:
    assert _table_keys("Inputs") == set(ACTION["inputs"])
    assert _table_keys("Outputs") == set(ACTION["outputs"])
    assert {"speedup", "verified-kernels", "pr-url", "report-path"} <= set(ACTION["outputs"])


def test_the_workflow_snippet_uses_the_action_pinned_and_only_real_inputs_and_outputs() -> None:
    snippet = _fenced(_block("action-snippet"))
    steps = yaml.safe_load(snippet)
    action_step = steps[0]
    assert re.fullmatch(r"<owner>/kernelopt-bot@<full 40-character commit SHA>", action_step["uses"])
    assert set(action_step["with"]) <= set(ACTION["inputs"])
    used = set(re.findall(r"steps\.kernelopt\.outputs\.([\w-]+)", snippet))
    assert used and used <= set(ACTION["outputs"])
    # Outputs reach the script through env, never spliced into it (the workflows' own rule).
    assert "${{" not in steps[1]["run"]


def test_the_activation_snippet_names_the_packs_optimize_and_the_bot_write() -> None:
    """Before: install("kernelopt/pack.json"), a path neither optimize nor the bot writes."""
    installs = re.findall(r'install\("([^"]+)"\)', README.split("### Using a pack in production", 1)[1])
    quick_out = re.search(r"kernelopt optimize \S+ --out (\S+)", README)
    assert quick_out
    assert f"{quick_out.group(1)}/pack.json" in installs  # optimize writes OUT/pack.json
    first_target = re.search(r"^targets:\n  - name: (\S+)", README, re.M)
    assert first_target
    assert pack_file(first_target.group(1)) in installs  # the follow-up PR adds kernelopt/packs/<name>.json


def _model_repo(root: Path, last_change: dict[str, str]) -> Path:
    """A repository with a .kernelopt.yml, and a last commit (the PR of the example payloads)."""
    (root / "models").mkdir(parents=True)
    (root / "models" / "mlp.py").write_text("import torch\n")
    (root / "README.md").write_text("models\n")
    (root / ".kernelopt.yml").write_text("targets:\n  - name: mlp\n    entry: models/mlp.py\n"
                                         "    paths: [\"models/**\"]\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    for rel, text in last_change.items():
        (root / rel).write_text(text)
    git(root, "commit", "-q", "-am", "the change")
    return root


def test_the_readme_dry_run_command_runs_as_printed(tmp_path: Path) -> None:
    """The README's command, run by bash from the repository root as printed, with REPO set to a
    repository (whose last commit touches no target, so no engine is needed)."""
    lines = _fenced(_block("dry-run")).splitlines()
    command = next(line for line in lines if line.startswith("kernelopt bot "))
    repo = _model_repo(tmp_path / "my-models", {"README.md": "models, documented\n"})
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**user_env(), "REPO": str(repo), "TMPDIR": str(tmpdir),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "no target is affected by the 1 changed file(s) of PR #1" in run.stderr
    publish = json.loads((tmpdir / "kernelopt-dry-run" / "publish.json").read_text())
    assert publish["dry_run"] is True and publish["repository"] == "your-org/your-repo"


def test_the_example_pull_request_payload_drives_a_whole_dry_run(harness: Harness, tmp_path: Path) -> None:
    """HEAD and HEAD~1 in the example payload are the checkout's last commit and its parent."""
    repo = _model_repo(tmp_path / "my-models", {"models/mlp.py": "import torch\n# faster\n"})
    head, base = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD~1")
    out = tmp_path / "dry"
    run = harness.bot("pull_request", EXAMPLE_EVENTS / "pull_request.json", repo, "--dry-run", out=out)
    assert run.code == 0, run.text
    assert harness.runner.calls == ["mlp.fp32"]  # git diff HEAD~1...HEAD: models/mlp.py
    publish = json.loads((out / "publish.json").read_text())
    assert publish["proposal"]["parent_sha"] == head and publish["proposal"]["base"] == "my-change"
    comment = (out / "comment.md").read_text()
    assert f"### kernelopt report for {head[:7]}" in comment and base not in comment
    assert "Triggered by PR #1 being opened." in comment


def test_the_example_comment_payload_drives_a_dry_run(harness: Harness, tmp_path: Path) -> None:
    repo = _model_repo(tmp_path / "my-models", {"models/mlp.py": "import torch\n# faster\n"})
    out = tmp_path / "dry"
    run = harness.bot("issue_comment", EXAMPLE_EVENTS / "issue_comment.json", repo, "--dry-run", out=out)
    assert run.code == 0, run.text
    assert harness.runner.calls == ["mlp.fp32"]
    job = json.loads((out / "results" / "mlp.fp32" / "job.json").read_text())
    assert job["budget"]["candidates"] == 4  # the payload's "/kernelopt run --budget 4"
    assert "ran 1 target run(s)" in (out / "replies" / "1.md").read_text()
