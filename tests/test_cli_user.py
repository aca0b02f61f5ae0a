"""The CLI as a new user meets it on a CPU-only machine (issue 15): every command runs without
``TRITON_INTERPRET`` in the environment, bad input is one line and exit code 2 (the target of
``optimize`` included), progress goes to stderr, internals stay in the log, ``-h`` and
``--debug`` work everywhere."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import click
import pytest
import torch
from click.testing import CliRunner

from kernelopt_bot.cli import main
from kernelopt_bot.cli.options import handle_errors, output_flags
from kernelopt_bot.pack.format import KernelPack
from kernelopt_bot.pack.runtime import running_environment
from kernelopt_bot.progress import Progress, plain_names
from tests.helpers import EXAMPLES, ROOT, captured, run_cli, user_env

SOFTMAX = str(EXAMPLES / "softmax.py")  # one persistent reduction: XBLOCK is its only constexpr
GELU = str(EXAMPLES / "gelu.py")  # one pointwise kernel
TIMESTAMPED = re.compile(r"^\d\d:\d\d:\d\d ")


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a failed command; every other stderr line is timestamped progress."""
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if not TIMESTAMPED.match(line)]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("error: ") and errors == lines[-1:], result.stderr
    return errors[0]


def _softmax_kernel() -> dict:
    result = run_cli("inspect", SOFTMAX, "--json")
    assert result.returncode == 0, result.stderr
    (kernel,) = json.loads(result.stdout)["kernels"]
    return kernel


def test_cli_tests_run_without_the_interpreter_variable_the_test_setup_sets() -> None:
    if not torch.cuda.is_available():
        assert os.environ.get("TRITON_INTERPRET") == "1"  # conftest's in-process interpreter mode
    assert "TRITON_INTERPRET" not in user_env()


def test_inspect_reports_progress_on_stderr_and_no_empty_vendor_table() -> None:
    result = run_cli("inspect", SOFTMAX)
    assert result.returncode == 0, result.stderr
    assert "1 Triton kernels in 1 graph(s)" in result.stdout
    assert "Vendor / fallback calls" not in result.stdout  # softmax has none: no empty table
    assert "vendor / fallback calls: none" in result.stdout
    assert "triton_per_fused__softmax_0" in result.stdout and "g0:" not in result.stdout  # names, not labels
    steps = result.stderr.strip().splitlines()
    assert steps and all(TIMESTAMPED.match(line) for line in steps), result.stderr
    assert any("compiling and capturing" in line for line in steps)


def test_pin_accepts_the_flat_config_form_and_validates_it_like_gate_1(tmp_path: Path) -> None:
    kernel = _softmax_kernel()
    out = tmp_path / "pack.json"
    result = run_cli("pin", SOFTMAX, "--kernel", kernel["name"], "--config", '{"XBLOCK": 2, "num_warps": 4}',
                     "--out", str(out))
    assert result.returncode == 0, result.stderr
    (entry,) = KernelPack.load(out).entries.values()
    assert entry.config is not None and entry.config.kwargs == {"XBLOCK": 2} and entry.config.num_warps == 4
    # A persistent reduction fixes R0_BLOCK in its body (and a looped one needs XBLOCK as well):
    # gate 1 refuses the config, so pin does too.
    result = run_cli("pin", SOFTMAX, "--kernel", kernel["name"], "--config", '{"R0_BLOCK": 4}', "--out", str(out))
    assert result.returncode == 2, result.stderr
    line = _error_line(result)
    assert line.startswith("error: --config: ")
    if kernel["kind"] == "persistent_reduction":
        assert "R0_BLOCK is not a constexpr parameter" in line
    assert len(KernelPack.load(out)) == 1  # the pack was left as it was


@pytest.mark.parametrize("config", ['{"kwargs": {"XBLOCK": 3}}', '{"XBLOCK": 3, "num_warps": 4}'])
def test_pin_refuses_a_block_size_that_is_not_a_power_of_two(tmp_path: Path, config: str) -> None:
    result = run_cli("pin", SOFTMAX, "--kernel", "triton_per_fused__softmax_0", "--config", config,
                     "--out", str(tmp_path / "pack.json"))
    assert result.returncode == 2
    assert "XBLOCK=3 must be a power-of-two" in _error_line(result)
    assert not (tmp_path / "pack.json").exists()


def _pack_for_softmax(tmp_path: Path, config: dict, **guard: str) -> Path:
    """A hand-written pack, as a user would edit one, for softmax's kernel on this machine."""
    cap = captured("softmax.py")
    kernel = cap.artifact.kernels[0]
    entry = {"key": kernel.key, "kernel_name": kernel.name, "config": config,
             "guard": {**asdict(running_environment(cap.target.device)), **guard}}
    path = tmp_path / "pack.json"
    path.write_text(json.dumps({"format": "kernelopt-pack", "version": 1, "entries": [entry]}))
    return path


def test_bench_with_a_pack_that_breaks_the_kernel_is_bad_input_in_one_line(tmp_path: Path) -> None:
    pack = _pack_for_softmax(tmp_path, {"kwargs": {"R0_BLOCK": 4}})  # leaves XBLOCK unset
    result = run_cli("bench", SOFTMAX, "--pack", str(pack), "--rounds", "1", "--reps", "1")
    assert result.returncode == 2, result.stderr
    line = _error_line(result)
    assert f"{pack} does not run with {SOFTMAX}" in line and "XBLOCK" in line
    assert " | " not in line and "Traceback" not in result.stderr


def test_bench_says_why_a_guarded_entry_was_not_applied(tmp_path: Path) -> None:
    pack = _pack_for_softmax(tmp_path, {"kwargs": {"XBLOCK": 2}}, torch="1.0.0")
    result = run_cli("bench", SOFTMAX, "--pack", str(pack), "--rounds", "1", "--reps", "1")
    assert result.returncode == 0, result.stderr
    assert "applied to no kernel" in result.stdout
    assert "not applied to triton_per_fused__softmax_0" in result.stdout
    assert "torch: pack has '1.0.0'" in result.stdout


def test_verify_runs_without_the_interpreter_variable_and_says_what_it_does(tmp_path: Path) -> None:
    candidate = tmp_path / "config.json"
    candidate.write_text('{"kwargs": {"YBLOCK": 4}}')  # gelu's pointwise kernel takes XBLOCK only
    inspected = run_cli("inspect", GELU, "--json")
    kernel = json.loads(inspected.stdout)["kernels"][0]["name"]
    result = run_cli("verify", GELU, "--kernel", kernel, "--candidate", str(candidate), "--json")
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert not verdict["accepted"] and verdict["gates"][0]["passed"] is False
    assert "YBLOCK" in verdict["gates"][0]["reason"]
    assert any("verifying config.json" in line for line in result.stderr.splitlines()), result.stderr


def test_verify_takes_a_config_candidate_in_the_flat_form_pin_takes(tmp_path: Path) -> None:
    """The same config written the same way works for ``pin --config`` and ``verify --candidate``."""
    from kernelopt_bot.candidate import Candidate

    flat = tmp_path / "flat.json"
    flat.write_text('{"YBLOCK": 4, "num_warps": 2}')
    candidate = Candidate.from_file(flat)
    assert candidate.config is not None and candidate.config.kwargs == {"YBLOCK": 4}
    assert candidate.config.num_warps == 2
    inspected = run_cli("inspect", GELU, "--json")
    kernel = json.loads(inspected.stdout)["kernels"][0]["name"]
    result = run_cli("verify", GELU, "--kernel", kernel, "--candidate", str(flat), "--json")
    assert result.returncode == 0, result.stderr  # read as a config; judged (and refused) by gate 1
    assert "YBLOCK" in json.loads(result.stdout)["gates"][0]["reason"]


def test_optimize_on_a_target_that_does_not_import_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('this model file is broken')\n")
    result = run_cli("optimize", str(broken), "--out", str(tmp_path / "out"), "--budget", "1")
    assert result.returncode == 2, result.stderr
    line = _error_line(result)
    assert "does not import" in line and "this model file is broken" in line
    assert json.loads((tmp_path / "out" / "result.json").read_text())["error_kind"] == "bad input"
    assert result.stdout.strip() == "", result.stdout  # no summary table of a run that never ran


def test_optimize_on_a_model_torch_compile_cannot_compile_says_so(tmp_path: Path) -> None:
    """A model that launches its own Triton kernel runs eagerly on the CPU, but Dynamo traces into
    the Triton interpreter and fails: the run said "internal error: InterpreterError". It is the
    compiler's failure, named as such, with why (exit 1: neither bad input nor our fault)."""
    model = tmp_path / "own_kernel.py"
    model.write_text(textwrap.dedent("""\
        import torch
        import triton
        import triton.language as tl


        @triton.jit
        def doubled(x_ptr, result_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(result_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


        class Model(torch.nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                doubled[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
                return out.relu()


        def get_inputs():
            return [torch.randn(1000)]


        def get_init_inputs():
            return []
        """))
    result = run_cli("optimize", str(model), "--out", str(tmp_path / "out"), "--budget", "1")
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]  # after Dynamo's own warnings of what it could not trace
    assert line.startswith("error: ") and "torch.compile could not compile and run" in line and "which runs eagerly" in line, line
    assert "captures those only on a GPU" in line and "internal error" not in line, line
    assert len(line) < 800  # Dynamo's message runs to pages; the line keeps its start


def test_optimize_keeps_internal_timings_in_the_log_not_the_console(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("optimize", GELU, "--out", str(out), "--budget", "1", "--store", str(tmp_path / "db"))
    assert result.returncode == 0, result.stderr
    console = result.stdout + result.stderr
    log = (out / "run.log").read_text()
    assert "sandbox" in log and "g0:" in log  # per-step seconds and graph labels: in the log
    assert "sandbox" not in console and "g0:" not in console
    assert "searching triton_poi_fused_gelu_0" in result.stderr
    assert re.search(r"\d+ of \d+ candidates \(\d+ s left\)", result.stderr), result.stderr


def test_a_missing_target_is_reported_before_torch_is_imported() -> None:
    for args in (["inspect", "missing.py"], ["bench", "missing.py", "--pack", "p.json"], ["modes", "missing.py"],
                 ["optimize", "missing.py"], ["pin", "missing.py", "--kernel", "k", "--config", "{}", "--out", "x"],
                 ["verify", "missing.py", "--kernel", "k", "--candidate", __file__]):
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "kernelopt_bot.cli", *args],
                                capture_output=True, text=True, cwd=ROOT, env=user_env(), timeout=120)
        assert result.returncode == 2, (args, result.stderr)
        assert "error: missing.py: no such file" in result.stderr
        imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line]
        assert "torch" not in imported and "triton" not in imported, args


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("command", _commands(main), ids=lambda c: " ".join(c) or "kernelopt")
def test_dash_h_is_help_everywhere(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*command, "-h"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")


def test_debug_prints_the_traceback_of_an_internal_error() -> None:
    @click.command()
    @output_flags
    @handle_errors
    def broken() -> None:
        raise ZeroDivisionError("a bug of ours")

    plain = CliRunner().invoke(broken, [])
    assert plain.exit_code == 1
    assert plain.output.strip() == ("error: internal error: ZeroDivisionError: a bug of ours "
                                   "(run again with --debug for the traceback)")
    debug = CliRunner().invoke(broken, ["--debug"])
    assert debug.exit_code == 1
    assert "Traceback (most recent call last)" in debug.output and 'raise ZeroDivisionError("a bug of ours")' \
        in debug.output
    assert debug.output.strip().splitlines()[-1] == "error: internal error: ZeroDivisionError: a bug of ours"


PIPELINE_LOG = textwrap.dedent("""\
    [   1 s] loading the target
    [   4 s] searching
    [   4 s] searching g0:triton_per_fused__softmax_0 (persistent_reduction)
      tuner: 2 proposal(s) worth the gates (0 s)
      config XBLOCK=2, num_warps=2, num_stages=1: passed gates 1-3; performance not measured (46 s)
        sandbox 30.57 s, sandbox start 0.12 s, sandbox load 2.53 s
    warning: LLM endpoint unavailable (refused); continuing with the timed tuner only
    [ 101 s] end-to-end benchmark
    """).splitlines()


def _relayed(verbose: bool, tty: bool, tmp_path: Path) -> tuple[str, str]:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return tty

    stream = Terminal()
    with Progress(verbose=verbose, planned=8, deadline_s=110, log_path=tmp_path / "log", stream=stream) as progress:
        for line in PIPELINE_LOG:
            progress.relay(line)
        assert (progress.done, progress.planned) == (1, 2)
    return stream.getvalue(), (tmp_path / "log").read_text()


def test_progress_sorts_the_pipeline_log_for_a_person(tmp_path: Path) -> None:
    shown, log = _relayed(verbose=False, tty=False, tmp_path=tmp_path)
    lines = shown.splitlines()
    assert all(TIMESTAMPED.match(line) for line in lines)
    assert any(line.endswith("searching triton_per_fused__softmax_0 (109 s left)") or
               re.search(r"searching triton_per_fused__softmax_0 \(\d+ s left\)$", line) for line in lines)
    assert any(line.endswith("config XBLOCK=2, num_warps=2, num_stages=1: passed gates 1-3; performance "
                             "not measured") for line in lines)
    assert any("end-to-end benchmark, 1 of 2 candidates" in line for line in lines)
    assert any("warning: LLM endpoint unavailable" in line for line in lines)
    assert "sandbox" not in shown and "g0:" not in shown and "(46 s)" not in shown
    for raw in PIPELINE_LOG:  # the log keeps every line whole, without the engine's clock
        assert re.sub(r"^\[\s*\d+ s\] ", "", raw) in log


def test_progress_verbose_shows_the_internals(tmp_path: Path) -> None:
    shown, _ = _relayed(verbose=True, tty=False, tmp_path=tmp_path)
    assert "sandbox start 0.12 s" in shown and "g0:triton_per_fused__softmax_0" in shown and "(46 s)" in shown


def test_progress_on_a_terminal_is_one_live_display(tmp_path: Path) -> None:
    shown, _ = _relayed(verbose=False, tty=True, tmp_path=tmp_path)
    assert "passed gates 1-3" in shown and "warning: LLM endpoint unavailable" in shown
    assert not any(TIMESTAMPED.match(line) for line in shown.splitlines())  # rich, not plain lines
    assert "sandbox" not in shown


def test_graph_labels_read_as_names() -> None:
    assert plain_names("g0:triton_poi_fused_mul_0 and g1:triton_poi_fused_add_1") == \
        "triton_poi_fused_mul_0 and triton_poi_fused_add_1 (graph 1)"


@pytest.mark.parametrize(("item", "value"), [("compile_options=False", False), ("compile_options=true", True),
                                             ("gpu_seconds=None", None), ("wall_seconds=30.5", 30.5), ("4", 4)])
def test_budget_values_read_as_a_person_types_them(item: str, value: object) -> None:
    from kernelopt_bot.cli.options import parse_budget

    assert list(parse_budget((item,)).values()) == [value]


def test_a_budget_value_that_is_no_number_is_bad_input() -> None:
    result = run_cli("optimize", GELU, "--budget", "compile_options=maybe")
    assert result.returncode == 2
    assert _error_line(result) == "error: --budget 'compile_options=maybe': value is not a number or true/false"
