"""A verified config goes back into the user's own kernel source as a patch `git apply` takes:
first in the @triton.autotune list, written as the file writes the others (issue 14)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernelopt_bot.launchers import capture_launches, load_launcher
from kernelopt_bot.source_patch import PatchError, autotune_patch, with_config_first
from tests.helpers import ROOT

ROW_SOFTMAX = ROOT / "tests" / "launchers" / "row_softmax.py"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)


def test_the_patch_applies_and_the_kernel_then_tries_the_new_config_first(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    target = repo / "kernels" / "row_softmax.py"
    target.write_text(ROW_SOFTMAX.read_text())
    assert _git(repo, "init", "-q").returncode == 0
    config = {"ROWS": 8, "num_warps": 2, "num_stages": 1}
    patch = autotune_patch(target, "row_softmax_kernel", config, root=repo)
    assert patch.startswith("--- a/kernels/row_softmax.py\n+++ b/kernels/row_softmax.py\n")
    added = [line for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["+        triton.Config({'ROWS': 8}, num_warps=2, num_stages=1),"]  # the list's own indent
    (tmp_path / "fix.patch").write_text(patch)
    check = _git(repo, "apply", "--check", str(tmp_path / "fix.patch"))
    assert check.returncode == 0, check.stderr
    assert _git(repo, "apply", str(tmp_path / "fix.patch")).returncode == 0
    (launch,) = capture_launches(load_launcher(str(target), None, "fp32"))
    assert launch.autotune_configs is not None and len(launch.autotune_configs) == 4
    assert {k: launch.autotune_configs[0][k] for k in config} == config
    assert launch.chosen == launch.autotune_configs[0]  # what the interpreter runs: the first


def test_an_inline_list_and_another_spelling_are_kept() -> None:
    source = ("from triton import Config, autotune, jit\n\n@autotune(configs=[Config({'B': 16}), Config({'B': 32})], key=[])\n"
              "@jit\ndef k(x, B: 'tl.constexpr'):\n    pass\n")
    patched = with_config_first(source, "k", {"B": 64, "num_warps": 4})
    assert "@autotune(configs=[Config({'B': 64}, num_warps=4), Config({'B': 16}), Config({'B': 32})], key=[])" in patched
    assert patched.replace("Config({'B': 64}, num_warps=4), ", "") == source


@pytest.mark.parametrize(("source", "message"), [
    ("def other():\n    pass\n", "no top-level function 'k'"),
    ("import triton\n@triton.jit\ndef k(x):\n    pass\n", "no @triton.autotune"),
    ("import triton\nC = []\n@triton.autotune(configs=C, key=[])\n@triton.jit\ndef k(x):\n    pass\n", "no @triton.autotune"),
    ("def k(:\n", "does not parse"),
])
def test_a_source_that_cannot_take_it_says_why(source: str, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        with_config_first(source, "k", {"B": 1})
