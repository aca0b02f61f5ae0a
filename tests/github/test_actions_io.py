"""$GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY and workflow commands, with hostile values."""

from __future__ import annotations

from pathlib import Path

from kernelopt_bot.github import actions_io
from tests.github.conftest import read_outputs


def test_multiline_outputs_use_random_delimiters(tmp_path: Path) -> None:
    out = tmp_path / "out"
    hostile = "line1\nEOF\nghadelimiter_x\nother=value"
    actions_io.set_output("report", hostile, str(out))
    actions_io.set_output("speedup", "1.2", str(out))
    text = out.read_text()
    first = text.splitlines()[0]
    assert first.startswith("report<<ghadelimiter_") and len(first) > len("report<<ghadelimiter_") + 16
    assert read_outputs(out) == {"report": hostile, "speedup": "1.2"}
    assert actions_io.format_output("a", "x").split("\n")[0] != actions_io.format_output("a", "x").split("\n")[0]


def test_annotation_escapes_message_and_properties() -> None:
    line = actions_io.annotation("error", "bad\n::set-output name=x::y 100%", file="a,b:c.yml", line=3, title="t:1")
    assert line == "::error file=a%2Cb%3Ac.yml,line=3,title=t%3A1::bad%0A::set-output name=x::y 100%25"
    assert "\n" not in line


def test_untrusted_block_stops_commands() -> None:
    block = actions_io.untrusted_block("::error::fake\n::add-mask::x")
    lines = block.splitlines()
    token = lines[0].split("::stop-commands::", 1)[1]
    assert len(token) == 32 and lines[-1] == f"::{token}::"
    assert lines[1:-1] == ["::error::fake", "::add-mask::x"]


def test_outside_actions_nothing_is_written(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    actions_io.set_output("a", "b")
    actions_io.append_summary("x")
    assert list(tmp_path.iterdir()) == []


def test_bot_log_lines_that_could_hold_a_workflow_command_are_fenced(monkeypatch, capsys) -> None:
    from kernelopt_bot.github.cli import _log

    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    _log("attn.fp32: failed (\n::add-mask::x\n::set-env name=A::b)")
    _log("plain line")
    err = capsys.readouterr().err
    token = err.split("::stop-commands::", 1)[1].split("\n", 1)[0]
    assert err.startswith(f"::stop-commands::{token}\n") and f"::{token}::\n" in err
    assert err.index("::add-mask::x") < err.index(f"::{token}::")
    assert err.endswith("plain line\n")
