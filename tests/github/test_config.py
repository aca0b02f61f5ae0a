"""``.kernelopt.yml`` validation: good files load, bad ones fail with one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_bot.config import load_config, parse_config
from kernelopt_bot.errors import BadInputError

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
    from kernelopt_bot.pipeline import DEFAULT_BUDGET

    assert set(BudgetConfig.model_fields) == set(DEFAULT_BUDGET)
