"""``.kernelopt.yml`` validation: good files load, bad ones fail with one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_bot.config import load_config, parse_config
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.github import cli as bot_cli
from tests.helpers import user_env

GOOD = """\
targets:
  - name: mlp
    entry: models/mlp.py
    dtypes: [fp32, bf16]
    device: cuda
    paths: ["models/**"]
  - name: attn
    entry: pkg.a:factory
budget: {candidates: 8, tokens: 1000, gpu_seconds: 60, wall_seconds: 600}
gamma: 1.05
llm: {base_url: "https://llm.example/v1", model: m, api_key_env: MY_KEY}
publish: {draft: false, labels: [perf], reviewers: [carol], max_open_proposals: 2}
ignore: [attn]
"""


def test_good_config_loads(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models/mlp.py").write_text("")
    (tmp_path / ".kernelopt.yml").write_text(GOOD)
    cfg = load_config(tmp_path / ".kernelopt.yml")
    assert [t.name for t in cfg.active_targets()] == ["mlp"]
    assert cfg.gamma == 1.05 and cfg.budget.candidates == 8 and cfg.publish.max_open_proposals == 2
    assert cfg.target_lines == {"mlp": 2, "attn": 7}
    # the engine is told where the key is, never the key
    assert cfg.llm is not None and cfg.llm.as_dict() == {"base_url": "https://llm.example/v1", "model": "m",
                                                         "api_key_env": "MY_KEY"}
    assert cfg.budget.as_dict() == {"candidates": 8, "tokens": 1000, "gpu_seconds": 60, "wall_seconds": 600}


def test_defaults() -> None:
    cfg = parse_config("targets:\n  - name: a\n    entry: a.py\n")
    assert cfg.gamma == 1.03 and cfg.targets[0].dtypes == ["fp32"] and cfg.targets[0].device == "auto"
    assert cfg.publish.draft is True and cfg.llm is None
    assert cfg.budget.as_dict() == {}  # the engine's defaults


@pytest.mark.parametrize(("text", "message"), [
    ("targets:\n - name: a\n   entry: a.py\n - name: b\n   entry: b.py\n   dtypes: [fp64]\n",
     ".kernelopt.yml: targets[1].dtypes[0]: 'fp64' is not one of fp32, bf16, fp16"),
    ("targets:\n - name: a\n   entry: a.py\n   device: tpu\n",
     ".kernelopt.yml: targets[0].device: 'tpu' is not one of cuda, cpu, auto"),
    ("targets:\n - name: a\n   entry: a.py\nllm: {base_url: 'https://x/v1', model: m, api_key: sk-live-123}\n",
     ".kernelopt.yml: llm.api_key: a literal key does not belong in the file"),
    ("targets:\n - name: a\n   entry: a.py\nllm: {base_url: 'https://x/v1', model: m, api_key_env: sk-live-123}\n",
     ".kernelopt.yml: llm.api_key_env: must name an environment variable"),
    ("targets:\n - name: a\n   entry: a.py\nllm: {base_url: 'https://x/v1', model: m, api_key_env: KERNELOPT_LLM_APIKEY}\n",
     ".kernelopt.yml: llm.api_key_env: 'KERNELOPT_LLM_APIKEY' is not named like a secret"),
    ("targets:\n - name: a\n   entry: a.py\nllm: {base_url: 'https://u:p@x/v1', model: m}\n",
     ".kernelopt.yml: llm.base_url: must not carry credentials"),
    ("targets:\n - name: a\n   entry: a.py\ngamma: 0.9\n",
     ".kernelopt.yml: gamma: input should be greater than or equal to 1"),
    ("targets:\n - name: a\n   entry: a.py\n - name: a\n   entry: b.py\n",
     ".kernelopt.yml: targets[1].name: 'a' is used by two targets"),
    ("targets:\n - name: a\n   entry: a.py\nignore: [zz]\n", ".kernelopt.yml: ignore[0]: 'zz' is not a target name"),
    ("targets:\n - name: '../x'\n   entry: a.py\n", ".kernelopt.yml: targets[0].name: '../x' is not a valid target name"),
    ("targets:\n - name: a\n   entri: a.py\n", ".kernelopt.yml: targets[0].entri: is not a known setting"),
    ("targets:\n - name: a\n   entry: /etc/passwd.py\n", ".kernelopt.yml: targets[0].entry: '/etc/passwd.py' must be"),
    ("targets:\n - name: a\n   entry: rm -rf\n", ".kernelopt.yml: targets[0].entry: 'rm -rf' is neither a .py file nor package.module:factory"),
    ("targets:\n - name: a\n   entry: a.py\n   paths: ['../x']\n", ".kernelopt.yml: targets[0].paths[0]: '../x' must be a glob"),
    ("targets:\n - name: a\n   entry: a.py\npublish: {reviewers: ['no way']}\n",
     ".kernelopt.yml: publish.reviewers[0]: 'no way' is not a GitHub login"),
    ("targets: [\n", ".kernelopt.yml: line 2: not valid YAML"),
    ("", ".kernelopt.yml: the file is empty"),
    ("- a\n", ".kernelopt.yml: expected a mapping at the top level"),
    ("gamma: 1.1\n", ".kernelopt.yml: targets: is required"),
])
def test_errors_are_one_line_with_the_field_path(text: str, message: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_config(text)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_every_error_at_once_one_line_each_with_did_you_mean() -> None:
    """Before: the first error and "(and 4 more)", no suggestion for a misspelt key."""
    text = ("target: []\n"
            "targets:\n - name: a\n   entri: a.py\n   dtypes: [fp64]\n"
            "budget: {candidate: 3, wall_seconds: -1}\n"
            "publsh: {draft: true}\n")
    with pytest.raises(BadInputError) as info:
        parse_config(text)
    lines = str(info.value).splitlines()
    assert sorted(lines) == sorted([
        ".kernelopt.yml: target: is not a known setting; did you mean 'targets'?",
        ".kernelopt.yml: targets[0].entri: is not a known setting; did you mean 'entry'?",
        ".kernelopt.yml: targets[0].dtypes[0]: 'fp64' is not one of fp32, bf16, fp16",
        ".kernelopt.yml: budget.candidate: is not a known setting; did you mean 'candidates'?",
        ".kernelopt.yml: budget.wall_seconds: input should be greater than 0",
        ".kernelopt.yml: publsh: is not a known setting; did you mean 'publish'?",
    ]), lines  # "targets[0].entry: is required" is what the typo explains: not repeated


def test_unknown_key_without_a_close_match_gets_no_guess() -> None:
    with pytest.raises(BadInputError) as info:
        parse_config("targets:\n - name: a\n   entry: a.py\nzzz: 1\n")
    assert str(info.value) == ".kernelopt.yml: zzz: is not a known setting"


def test_every_missing_entry_file_is_named(tmp_path: Path) -> None:
    (tmp_path / ".kernelopt.yml").write_text("targets:\n  - name: a\n    entry: a.py\n  - name: b\n    entry: b.py\n")
    with pytest.raises(BadInputError) as info:
        load_config(tmp_path / ".kernelopt.yml")
    assert [line.split(": ")[1] for line in str(info.value).splitlines()] == ["targets[0].entry", "targets[1].entry"]


def test_missing_entry_file_and_missing_config(tmp_path: Path) -> None:
    (tmp_path / ".kernelopt.yml").write_text("targets:\n  - name: a\n    entry: nope.py\n")
    with pytest.raises(BadInputError, match=r"targets\[0\].entry: 'nope.py' does not exist"):
        load_config(tmp_path / ".kernelopt.yml")
    with pytest.raises(BadInputError, match="no such file"):
        load_config(tmp_path / "absent.yml")


def test_config_error_exits_2_through_the_bot(harness, repo_dir: Path) -> None:
    (repo_dir / ".kernelopt.yml").write_text("targets:\n  - name: a\n    entry: a.py\n    dtypes: [fp64]\n")
    run = harness.bot("pull_request", harness.event("pull_request"), repo_dir, "--dry-run")
    assert run.code == 2
    assert "targets[0].dtypes[0]: 'fp64' is not one of fp32, bf16, fp16" in run.text


def test_budget_accepts_every_engine_budget_key() -> None:
    """The config file can set everything `kernelopt optimize --budget` can."""
    from kernelopt_bot.config import BudgetConfig
    from kernelopt_bot.plan import DEFAULT_BUDGET

    assert set(BudgetConfig.model_fields) == set(DEFAULT_BUDGET)


def test_bot_checks_entries_under_the_repo_root_not_the_config_folder(harness, repo_dir: Path, tmp_path: Path) -> None:
    """``--config`` outside the repository: its entries are paths in ``--repo-root`` (before: the
    config file's folder, so every entry "did not exist")."""
    elsewhere = tmp_path / "settings"
    elsewhere.mkdir()
    config = elsewhere / "kernelopt.yml"
    config.write_text((repo_dir / ".kernelopt.yml").read_text())
    (repo_dir / ".kernelopt.yml").unlink()
    run = harness.invoke(bot_cli.bot, ["--event-name", "pull_request", "--event-path", str(harness.event("pull_request")),
                                       "--config", str(config), "--repo-root", str(repo_dir), "--dry-run",
                                       "--out", str(tmp_path / "dry")])
    assert run.code == 0, run.text
    assert harness.runner.calls  # no git history: every target counts as affected, and they ran


def test_an_entry_missing_from_the_repo_root_is_still_refused(harness, repo_dir: Path, tmp_path: Path) -> None:
    (repo_dir / "models" / "mlp.py").unlink()
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mlp.py").write_text("")  # next to a config copied to tmp_path: not the repository
    config = tmp_path / "kernelopt.yml"
    config.write_text((repo_dir / ".kernelopt.yml").read_text())
    run = harness.invoke(bot_cli.bot, ["--event-name", "pull_request", "--event-path", str(harness.event("pull_request")),
                                       "--config", str(config), "--repo-root", str(repo_dir), "--dry-run",
                                       "--out", str(tmp_path / "dry")])
    assert run.code == 2
    assert f"targets[0].entry: 'models/mlp.py' does not exist under {repo_dir.resolve()}" in run.text


def test_bot_prints_every_config_error_on_its_own_line(tmp_path: Path) -> None:
    """As a user runs it: a subprocess ``kernelopt bot`` with a config holding two mistakes."""
    import json
    import subprocess
    import sys

    from tests.github.conftest import EVENTS, write_repo

    repo = write_repo(tmp_path / "repo")
    (repo / ".kernelopt.yml").write_text("targets:\n  - name: a\n    entry: a.py\n    dtype: [fp32]\ngama: 1.1\n")
    event = tmp_path / "event.json"
    event.write_text(json.dumps(json.loads((EVENTS / "pull_request.json").read_text())))
    run = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "bot", "--event-name", "pull_request",
                          "--event-path", str(event), "--repo-root", str(repo), "--dry-run",
                          "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=tmp_path, env=user_env(), timeout=300)
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines()[-2:] == [
        "error: .kernelopt.yml: targets[0].dtype: is not a known setting; did you mean 'dtypes'?",
        "error: .kernelopt.yml: gama: is not a known setting; did you mean 'gamma'?",
    ], run.stderr
