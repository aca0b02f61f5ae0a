"""Markdown reports from RunResults: PR body, sticky comment, job summary, sweep report.

The templates live in ``templates/`` (``KERNELOPT_TEMPLATES`` overrides the folder, which the
Action sets because a non-editable install does not carry it). Autoescaping is off because the
output is markdown, not HTML; instead every value that can come from a user goes through the
``md`` filter, which HTML-escapes it, escapes markdown punctuation, folds newlines (so a value
cannot end a table row or open a block) and defuses ``@mentions``. Code blocks use ``fence``,
which picks a fence longer than any backtick run in the text. Chart labels use ``mlabel``, which
keeps only characters that cannot break mermaid syntax.
"""

from __future__ import annotations

import html
import math
import re
from functools import lru_cache
from typing import Any

import jinja2

from kernelopt_bot.resources import templates_dir
from kernelopt_bot.result import RunResult
from kernelopt_bot.stats import geomean

REPORT_MARKER = "<!-- kernelopt:report -->"
PROPOSAL_MARKER = "<!-- kernelopt:proposal -->"
SWEEP_MARKER = "<!-- kernelopt:sweep -->"

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
ZWSP = "\u200b"  # zero-width space: renders as nothing, and no mention or link starts across it


def md(value: Any, limit: int = 300) -> str:
    """Inline-safe markdown for untrusted text (one line, no HTML, no mentions, no links)."""
    if value is None:
        return ""
    text = re.sub(r"\s+", " ", str(value)).strip()
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = html.escape(text, quote=True)
    text = _MD_SPECIAL.sub(r"\\\1", text)
    # "@user" would ping, "owner/repo#12" would cross-reference (a backlink in another
    # repository's issue), "://" and "www." would autolink. GitHub finds mentions and references in the text as
    # rendered, where an entity such as "&#64;" is "@" again; a zero-width space after the sign
    # (as Dependabot writes mentions) breaks each.
    text = text.replace("@", "@" + ZWSP).replace("://", ":" + ZWSP + "//")
    text = re.sub(r"([\w.-]+/[\w.-]+)#(?=\d)", r"\1#" + ZWSP, text)  # "#12" alone links within this repo
    return re.sub(r"(?i)\b(www)\.", r"\1" + ZWSP + ".", text)


def fence(value: Any, lang: str = "") -> str:
    """A fenced code block that the content cannot close early."""
    text = "" if value is None else str(value).rstrip("\n")
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def url(value: Any) -> str:
    """A URL as a clickable autolink when it is a plain http(s) URL; anything else is escaped text."""
    text = "" if value is None else str(value)
    if re.fullmatch(r"https?://[A-Za-z0-9.:-]+(/[A-Za-z0-9._~%/#=&?+-]*)?", text):
        return text
    return md(text)


def mlabel(value: Any) -> str:
    """A mermaid string label: only characters that cannot break out of ``"..."``."""
    return re.sub(r"[^A-Za-z0-9._ +-]", "_", str(value))[:40]


def num(value: Any, spec: str = ".3f", missing: str = "—") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    try:
        return format(float(value), spec)
    except (TypeError, ValueError):
        return missing


def speedup(value: Any, missing: str = "not measured") -> str:
    return missing if value is None else f"{num(value)}×"


def pct(value: Any, missing: str = "—") -> str:
    return num(value, ".1%", missing)


def change(value: Any, missing: str = "—") -> str:
    """A relative change with its sign: +16.7%, -3.0%."""
    return num(value, "+.1%", missing)


def sha7(value: Any) -> str:
    s = str(value or "")
    return s[:7] if re.fullmatch(r"[0-9a-fA-F]{7,64}", s) else md(s)


@lru_cache(maxsize=4)
def _environment(folder: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        autoescape=False,  # markdown: values are escaped explicitly with |md
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(md=md, url=url, fence=fence, mlabel=mlabel, num=num, speedup=speedup, pct=pct, change=change,
                       sha7=sha7)
    return env


def render(name: str, **context: Any) -> str:
    env = _environment(str(templates_dir()))
    return env.get_template(name).render(**context)


def chart(rows: list[dict[str, Any]], title: str = "End-to-end speedup") -> str:
    """A mermaid ``xychart-beta`` bar chart of measured speedups ('' when nothing was measured)."""
    pts = [(r["label"], r["speedup"]) for r in rows if r.get("speedup") is not None]
    if not pts:
        return ""
    top = max(max(v for _, v in pts) * 1.1, 1.1)
    labels = ", ".join(f'"{mlabel(label)}"' for label, _ in pts)
    values = ", ".join(f"{v:.3f}" for _, v in pts)
    return (f"```mermaid\nxychart-beta\n    title \"{mlabel(title)}\"\n    x-axis [{labels}]\n"
            f"    y-axis \"speedup (x)\" 0 --> {top:.2f}\n    bar [{values}]\n```")


def result_row(result: RunResult, *, why: str = "", pack_entries: int | None = None) -> dict[str, Any]:
    """One target's numbers as template data (values still raw: templates escape them)."""
    return {
        "name": result.name,
        "label": f"{result.name} {result.dtype}" + (" (training step)" if result.train else ""),
        "train": result.train,
        "step_halves": result.step_halves,  # a training step's forward and backward, baseline and optimized
        "target": result.target,
        "dtype": result.dtype,
        "device": result.device,
        "status": result.status,
        "ok": result.status == "ok",
        "error": result.error,
        "baseline_ms": result.baseline_ms,
        "optimized_ms": result.optimized_ms,
        "speedup": result.speedup,
        "noise_floor": result.noise_floor,
        "verified": result.verified_kernels,
        "pack_entries": result.pack_entries if pack_entries is None else pack_entries,
        "kernels": result.kernels,
        "recommendations": result.recommendations,
        "hardware": result.hardware,
        "versions": result.versions,
        "reproduce": result.reproduce,
        "seconds": result.seconds,
        "usage": result.usage,
        "llm_headline": result.llm_headline,  # "" unless the LLM agents were asked for and unavailable
        "why": why,
    }


def environments(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Distinct hardware/version sets among the rows (usually one)."""
    seen: list[dict[str, Any]] = []
    for r in rows:
        env = {"hardware": r["hardware"] or {}, "versions": r["versions"] or {}}
        if (env["hardware"] or env["versions"]) and env not in seen:
            seen.append(env)
    return seen


def base_context(rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    ctx = {
        "rows": rows,
        "chart": chart(rows),
        "environments": environments(rows),
        "failed": [r for r in rows if not r["ok"]],
        "geomean": geomean(r["speedup"] for r in rows if r["ok"]),
        "verified_total": sum(r["verified"] for r in rows if r["ok"]),
        # Said once above the tables, however many targets ran without the agents they asked for.
        "llm_unavailable": list(dict.fromkeys(r["llm_headline"] for r in rows if r.get("llm_headline"))),
        "report_marker": REPORT_MARKER,
        "proposal_marker": PROPOSAL_MARKER,
        "sweep_marker": SWEEP_MARKER,
        "notes": [],
        "source_diff": "",  # a kernel target's change to its own source, as a diff (pr_body)
        "source_notes": [],
    }
    ctx.update(extra)
    return ctx
