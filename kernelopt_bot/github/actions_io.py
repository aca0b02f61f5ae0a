"""Talking to the Actions runner: ``$GITHUB_OUTPUT``, ``$GITHUB_STEP_SUMMARY`` and workflow commands.

Everything written here may carry text that came from users (target names, error messages,
comment bodies), so:

* outputs use the heredoc form with a random delimiter, which a value cannot contain by chance
  or on purpose (``name<<ghadelimiter_<random>``);
* annotations escape ``%``, CR and LF (and ``:``/``,`` in properties) so a message stays on its
  own line and cannot start a new workflow command;
* longer untrusted text is echoed between ``::stop-commands::<token>`` and ``::<token>::`` so
  the runner does not read any ``::command::`` inside it.

Outside Actions (no ``GITHUB_OUTPUT`` etc.) the functions do nothing or print plainly.
"""

from __future__ import annotations

import os
import secrets
import sys
from typing import TextIO


def _delimiter(value: str) -> str:
    while True:
        token = f"ghadelimiter_{secrets.token_hex(16)}"
        if token not in value:
            return token


def format_output(name: str, value: str) -> str:
    """One ``$GITHUB_OUTPUT`` record, safe for multiline and hostile values."""
    if not name or any(c in name for c in "\r\n=<"):
        raise ValueError(f"bad output name {name!r}")
    delim = _delimiter(value)
    return f"{name}<<{delim}\n{value}\n{delim}\n"


def set_output(name: str, value: str, path: str | None = None) -> None:
    target = path or os.environ.get("GITHUB_OUTPUT")
    if not target:
        return
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(format_output(name, value))


def set_outputs(values: dict[str, str], path: str | None = None) -> None:
    for k, v in values.items():
        set_output(k, v, path)


def append_summary(markdown: str, path: str | None = None) -> None:
    target = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(markdown if markdown.endswith("\n") else markdown + "\n")


def escape_data(text: str) -> str:
    """Escaping for the message part of a workflow command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escaping for ``file=``/``title=`` properties of a workflow command."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message: str, *, file: str | None = None, line: int | None = None,
               title: str | None = None) -> str:
    """``::error file=F,line=L,title=T::msg`` with everything escaped."""
    if level not in ("error", "warning", "notice"):
        raise ValueError(f"bad annotation level {level!r}")
    props = []
    if file:
        props.append(f"file={escape_property(file)}")
    if line:
        props.append(f"line={int(line)}")
    if title:
        props.append(f"title={escape_property(title)}")
    head = f"::{level} {','.join(props)}::" if props else f"::{level}::"
    return head + escape_data(message[:2000])


def untrusted_block(text: str) -> str:
    """Text wrapped so the runner processes no workflow command inside it."""
    token = secrets.token_hex(16)
    while token in text:  # pragma: no cover - astronomically unlikely
        token = secrets.token_hex(16)
    body = text if text.endswith("\n") else text + "\n"
    return f"::stop-commands::{token}\n{body}::{token}::\n"


def in_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def emit(line: str, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(line if line.endswith("\n") else line + "\n")
    out.flush()


def report_failure(message: str, *, file: str | None = None, line: int | None = None,
                   detail: str | None = None, title: str = "kernelopt", stream: TextIO | None = None) -> None:
    """An error annotation, and the full untrusted detail in a stop-commands block."""
    emit(annotation("error", message, file=file, line=line, title=title), stream)
    if detail:
        emit(untrusted_block(detail), stream)
