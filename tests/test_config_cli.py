"""``kernelopt config check`` and ``kernelopt config keys``, run as a user runs them."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import run_cli


def test_check_lists_the_runs_of_a_valid_config(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mlp.py").write_text("")
    config = tmp_path / ".kernelopt.yml"
    config.write_text("targets:\n  - name: mlp\n    entry: models/mlp.py\n    mode: train\n    dtypes: [fp32, bf16]\n"
                      "  - name: norm\n    entry: pkg.norms:make\n")
    proc = run_cli("config", "check", str(config))
    assert proc.returncode == 0, proc.stderr
    assert f"{config}: valid; 2 target(s), 3 run(s) per sweep" in proc.stdout
    assert "mlp: models/mlp.py (inferred kind, training step) in fp32, bf16" in proc.stdout


def test_check_names_the_bad_key_its_line_and_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.yml"
    config.write_text("targets:\n  - name: mlp\n    entry: pkg.m:f\n    mdoe: train\n")
    proc = run_cli("config", "check", str(config))
    assert proc.returncode == 2
    assert "targets[0].mdoe: is not a known setting; did you mean 'mode'?" in proc.stderr
    per_target = tmp_path / "per_target.yml"  # a key of the whole file, put under a target
    per_target.write_text("targets:\n  - name: mlp\n    entry: pkg.m:f\n    budget: {wall_seconds: 60}\n")
    proc = run_cli("config", "check", str(per_target))
    assert proc.returncode == 2
    assert ("targets[0].budget: is not a known setting; 'budget' is set once for every target, at the top level "
            "of the file") in proc.stderr
    missing = tmp_path / "missing.yml"
    missing.write_text("targets:\n  - name: mlp\n    entry: models/none.py\n")
    proc = run_cli("config", "check", str(missing))
    assert proc.returncode == 2 and "'models/none.py' does not exist under" in proc.stderr


def test_keys_prints_every_key() -> None:
    proc = run_cli("config", "keys")
    assert proc.returncode == 0, proc.stderr
    assert "| `targets[].mode` | one of `inference`, `train` | `inference` |" in proc.stdout


def test_optimize_refuses_a_key_variable_not_named_like_a_secret() -> None:
    """Such a name would pass the scrub into the processes that run model code."""
    proc = run_cli("optimize", "examples/gelu.py", "--llm-base-url", "http://127.0.0.1:9/v1",
                   "--llm-api-key-env", "KERNELOPT_LLM_APIKEY")
    assert proc.returncode == 2
    assert "--llm-api-key-env: 'KERNELOPT_LLM_APIKEY' is not named like a secret" in proc.stderr


def test_check_refuses_what_the_cli_refuses_and_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    """The file's values are taken as YAML typed them, as the CLI's flags are: ``true`` is not a
    count (``--budget candidates=true`` exits 2 too); and bytes that are not UTF-8 are the file's
    fault, said so, not an internal error."""
    typed = tmp_path / "typed.yml"
    typed.write_text("targets:\n  - name: mlp\n    entry: pkg.m:f\nbudget: {candidates: true}\n")
    proc = run_cli("config", "check", str(typed))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "budget.candidates" in proc.stderr and "integer" in proc.stderr
    latin = tmp_path / "latin.yml"
    latin.write_bytes("targets:\n  - name: caf\xe9\n    entry: pkg.m:f\n".encode("latin-1"))
    proc = run_cli("config", "check", str(latin))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not UTF-8 text" in proc.stderr and "internal error" not in proc.stderr
