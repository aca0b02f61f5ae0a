"""Standalone Triton kernels as targets (issue 14, first part): a launcher file is loaded, run once,
and every kernel launch it makes is recorded (kernel, grid, constexprs, launch options, the
autotune list and the config it ran); ``kernelopt inspect`` shows them; ``optimize`` says plainly
that it does not take them yet; bad launcher files are bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from kernelopt_bot.errors import TargetError
from kernelopt_bot.launchers import capture_launches, load_launcher
from kernelopt_bot.pipeline import WALL_MARGIN_S
from kernelopt_bot.target_kinds import target_kind
from tests.helpers import EXAMPLES, ROOT, run_cli

ROW_SOFTMAX = ROOT / "tests" / "launchers" / "row_softmax.py"


def test_a_launcher_file_is_told_from_a_module_file_without_running_it() -> None:
    assert target_kind(str(ROW_SOFTMAX)) == "triton"
    assert target_kind(str(EXAMPLES / "softmax.py")) == "module"
    assert target_kind("no/such/file.py") == "module"


def test_the_launches_are_recorded_as_they_were_about_to_run() -> None:
    target = load_launcher(str(ROW_SOFTMAX), None, "fp32")
    (launch,) = capture_launches(target)
    assert launch.name == "row_softmax_kernel" and launch.file == str(ROW_SOFTMAX)
    assert launch.arg_names == ["x_ptr", "out_ptr", "n_rows", "n_cols", "BLOCK", "ROWS"]
    assert launch.constexprs["BLOCK"] == 64 and launch.args[2:] == (6, 40)
    assert launch.autotune_configs is not None and [c["ROWS"] for c in launch.autotune_configs] == [1, 2, 4]
    assert launch.chosen is not None and launch.grid == (-(-6 // launch.chosen["ROWS"]),)
    assert "tl.max(x, axis=1)" in launch.source
    x = target.make_inputs(0)[0]
    assert torch.equal(launch.args[0], x)  # the input as it was given
    assert launch.args[0].data_ptr() != x.data_ptr()  # a copy: what the launcher does next cannot change it
    assert target.reference is not None


def test_inspect_lists_a_launchers_kernels_as_a_user_runs_it() -> None:
    run = run_cli("inspect", str(ROW_SOFTMAX), "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["kind"] == "triton" and doc["reference"] is True
    (launch,) = doc["launches"]
    assert launch["name"] == "row_softmax_kernel" and len(launch["autotune_configs"]) == 3
    assert launch["args"][0] == {"tensor": [6, 40], "dtype": "float32", "stride": [40, 1]}


def test_optimize_puts_a_launchers_configs_through_the_gates_and_its_reproduce_line_runs(tmp_path: Path) -> None:
    """On the CPU: the chosen config's neighbours that the autotune list lacks pass gates
    1-3 in the interpreter; with no GPU nothing is timed, so nothing is accepted and no patch is
    written (a patch carries only measured speedups)."""
    import shlex
    import subprocess
    import sys

    from tests.helpers import user_env

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "row_softmax.py").write_text(ROW_SOFTMAX.read_text())
    run = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "optimize", "row_softmax.py"], cwd=repo,
                         env=user_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    out = repo / "kernelopt-out" / "row_softmax"
    result = json.loads((out / "result.json").read_text())
    (kernel,) = result["kernels"]
    assert kernel["name"] == "row_softmax_kernel" and kernel["candidates"] == 3
    # passed, not timed: not "no candidate accepted", which reads as rejected (as a module's kernel says it)
    assert kernel["status"] == "passed gates 1-3 (not timed: no GPU)"
    assert kernel["detail"] == "passed gates 1-3; performance not measured"
    assert kernel["strategies"] == {"config": {"gated": 3, "accepted": 0, "chosen": 0}}
    assert result["patch_path"] is None and not (out / "patch.diff").exists()
    log = (out / "run.log").read_text()
    assert "config ROWS=1, num_warps=8" in log  # a neighbour of the chosen config the list lacks
    assert "config ROWS=2, num_warps=4:" not in log  # already in the list: no deliverable candidate
    argv = shlex.split(result["reproduce"])
    assert argv[:3] == ["kernelopt", "optimize", "row_softmax.py"]
    again = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", *argv[1:]], cwd=repo, env=user_env(),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]


def test_a_command_for_modules_says_what_a_launcher_is_for(tmp_path: Path) -> None:
    pack = tmp_path / "empty.json"
    pack.write_text('{"format": "kernelopt-pack", "version": 1, "entries": []}')
    run = run_cli("bench", str(ROW_SOFTMAX), "--pack", str(pack))
    assert run.returncode == 2 and "its result is a patch; give --patch" in run.stdout + run.stderr
    run = run_cli("modes", str(ROW_SOFTMAX))
    assert run.returncode == 2 and "`kernelopt bench --patch` take it; this command takes PyTorch modules" in run.stderr


@pytest.mark.parametrize(("body", "message"), [
    ("def launch(x):\n    return x * 2\n", "launched no @triton.jit kernel"),
    ("def launch(x):\n    raise ValueError('bad shapes')\n", "launch(*get_inputs()) failed: ValueError: bad shapes"),
])
def test_a_launcher_that_launches_nothing_or_fails_is_bad_input(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad_launcher.py"
    path.write_text(f"import torch\n\n{body}\n\ndef get_inputs():\n    return [torch.randn(4)]\n")
    with pytest.raises(TargetError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        capture_launches(load_launcher(str(path), None, "fp32"))
    for command in ("inspect", "optimize"):
        run = run_cli(command, str(path), "--out" if command == "optimize" else "--json",
                      *([str(tmp_path / "out")] if command == "optimize" else []))
        assert run.returncode == 2 and message in run.stdout + run.stderr, (command, run.stderr[-1000:])


def test_a_launcher_file_without_get_inputs_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "no_inputs.py"
    path.write_text("def launch(x):\n    return x\n")
    with pytest.raises(TargetError, match="no get_inputs"):
        load_launcher(str(path), None, "fp32")


SLOW_LAUNCHER = """
import torch
import triton
import triton.language as tl


@triton.jit
def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def launch(x):
    out = torch.empty_like(x)
    add_one_kernel[(x.numel(),)](x, out, x.numel(), BLOCK=1)  # a program an element: slow in the interpreter
    return out


def reference(x):
    return x + 1.0


def get_inputs():
    return [torch.randn(1 << 20)]
"""


def test_a_launcher_that_cannot_run_once_within_the_budget_ends_the_run_at_the_deadline(tmp_path: Path) -> None:
    """A million one-element programs take minutes in the CPU's interpreter: the run ends at the
    wall budget's deadline, failed, naming the launcher's run, instead of holding the engine to
    its own limit (2 x the budget + 15 minutes)."""
    path = tmp_path / "slow_launcher.py"
    path.write_text(SLOW_LAUNCHER)
    wall = 12
    began = time.monotonic()
    run = run_cli("optimize", str(path), "--out", str(tmp_path / "out"), "--budget", f"wall_seconds={wall}")
    assert run.returncode == 1, run.stderr[-2000:]
    assert time.monotonic() - began <= wall + WALL_MARGIN_S + 10
    assert "ran out while running the kernel file's launcher" in " ".join(run.stderr.split())


def test_the_wall_budget_stops_a_launchers_search(tmp_path: Path) -> None:
    run = run_cli("optimize", str(ROW_SOFTMAX), "--out", str(tmp_path / "out"), "--budget", "wall_seconds=10")
    assert run.returncode == 0, run.stderr[-2000:]
    (kernel,) = json.loads((tmp_path / "out" / "result.json").read_text())["kernels"]
    assert kernel["status"] == "not searched (budget)" and "budget ran out after 0 of 3 configs" in kernel["detail"]
