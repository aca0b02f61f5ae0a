"""Rendering RunResults with the jinja2 templates in ``templates/``.

Every value that can come from a user (target names, error messages, details) goes through the
``md`` filter, which escapes Markdown and HTML, so a name like ``<img src=x onerror=...>`` or a
``|`` in a table cell renders as text.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import jinja2

from kernelopt_bot.progress import plain_names
from kernelopt_bot.resources import templates_dir
from kernelopt_bot.result import RunResult

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>])")


def md(value: Any) -> str:
    """Escape text for a Markdown table cell or paragraph (HTML too, newlines flattened)."""
    text = html.escape(str(value), quote=False).replace("\r", " ").replace("\n", " ")
    return _MD_SPECIAL.sub(r"\\\1", text)


def code(value: Any) -> str:
    """Text for a Markdown code span: backticks cannot close it, pipes cannot split a table cell."""
    text = str(value).replace("`", "'").replace("\r", " ").replace("\n", " ")
    return "`" + text.replace("|", "\\|") + "`"


def _ms(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.4f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _amount(value: Any, missing: str = "-") -> str:
    """A budget quantity for a table cell: whole numbers as they are, seconds to a tenth."""
    if value is None:
        return missing
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.1f}" if value >= 1 else f"{value:.4g}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def environment(root: Path | None = None) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(root or templates_dir())), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update(md=md, code=code, ms=_ms, x=_x, pct=_pct, amount=_amount, named=plain_names)
    return env


def render_report(result: RunResult) -> str:
    return environment().get_template("report.md.j2").render(r=result)
