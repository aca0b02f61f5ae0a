"""Reading code and JSON out of LLM replies, which are messy in every way a text can be.

Models wrap code in ```python, bare ``` or ~~~ fences, put prose and several blocks around it,
get cut off mid-block at their output limit, or send bare code; JSON arrives fenced, with
trailing commas, single quotes, Python literals, comments, unquoted keys, cut off, or buried in
a sentence. Reasoning models prefix ``<think>...</think>``. Both functions here never raise on
any input: they return ``None`` when nothing usable is there, and the caller falls back.

Nothing is ever evaluated: JSON goes through :func:`json.loads` after a character-level rewrite,
and code is returned as text for the static gate to judge.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

MAX_REPLY_CHARS = 400_000
MAX_JSON_CHARS = 100_000

_PY_TAGS = frozenset({"python", "py", "python3", "py3", "triton", "ipython", "pycon"})
_JSON_TAGS = frozenset({"json", "json5", "jsonc", "javascript", "js"})
_OPEN = re.compile(r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_INLINE_OPEN = re.compile(r"\S.*?(?P<fence>`{3,})(?P<info>[A-Za-z0-9_+.-]*)[ \t]*$")
_JIT = re.compile(r"^[ \t]*@(?:triton\.)?jit\b", re.MULTILINE)
_DEF = re.compile(r"^[ \t]*def[ \t]+\w+[ \t]*\(", re.MULTILINE)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_CODE_START = re.compile(
    r"^(?:import[ \t]+\w|from[ \t]+[\w.]+[ \t]+import\b|@[\w.]+|def[ \t]+\w+[ \t]*\(|#!)", re.MULTILINE
)


@dataclass
class _Block:
    info: str
    body: str
    complete: bool


def _strip_think(text: str) -> str:
    return _THINK.sub("", text) if "<think>" in text.lower() else text


def _lang_of(info: str) -> str:
    word = info.strip().split()[0] if info.strip() else ""
    return word.strip("{}.").lower()


def fenced_blocks(text: str) -> list[_Block]:
    """Fenced blocks in order; the last one may be unterminated (``complete=False``)."""
    blocks: list[_Block] = []
    lines = text.split("\n")
    fence = ""
    info = ""
    body: list[str] = []
    inside = False
    for line in lines:
        if not inside:
            m = _OPEN.match(line)
            if m and not (m.group("fence")[0] == "`" and "`" in m.group("info")):
                inside, fence, info, body = True, m.group("fence"), _lang_of(m.group("info")), []
                continue
            m = _INLINE_OPEN.match(line)  # "Here is the kernel: ```python"
            if m and line.count("`") == len(m.group("fence")):
                inside, fence, info, body = True, m.group("fence"), _lang_of(m.group("info")), []
            continue
        stripped = line.strip()
        char = fence[0]
        if stripped and set(stripped) == {char} and len(stripped) >= len(fence):
            blocks.append(_Block(info, "\n".join(body), True))
            inside = False
            continue
        if char == "`" and stripped.endswith(fence) and not stripped.startswith("`") and (
            line.count("`") == len(fence)
        ):
            body.append(line.rstrip()[: -len(fence)].rstrip())  # "    return x```"
            blocks.append(_Block(info, "\n".join(body), True))
            inside = False
            continue
        body.append(line)
    if inside:
        blocks.append(_Block(info, "\n".join(body), False))
    return blocks


def _defines_jit(code: str) -> bool:
    return bool(_JIT.search(code) and _DEF.search(code))


def clean_code(body: str) -> str | None:
    """A block's body as :func:`extract_code` returns it (leading language line and blank edges dropped)."""
    lines = body.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if lines and lines[0].strip().lower() in _PY_TAGS:  # "```\npython\nimport ..."
        lines.pop(0)
    code = "\n".join(line.rstrip() for line in lines).strip("\n")
    return code + "\n" if code.strip() else None


def extract_code(text: Any, lang: str = "python") -> str | None:
    """The code block of a reply, or ``None``.

    Preference: the last complete fenced block that defines a ``@triton.jit`` function; then an
    unterminated block at the end of a truncated reply that does; then the last complete block
    tagged ``lang``, the last bare block, an unterminated block; and for Python, unfenced text
    that starts with imports, decorators or a ``def`` (prose in front of it is skipped).
    """
    try:
        return _extract_code(text, lang)
    except (ValueError, TypeError, IndexError, RecursionError, MemoryError):
        return None


def _extract_code(text: Any, lang: str) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    text = _strip_think(text[:MAX_REPLY_CHARS].replace("\r\n", "\n").replace("\r", "\n"))
    lang = lang.lower()
    tags = _PY_TAGS if lang in _PY_TAGS else frozenset({lang})
    python = tags is _PY_TAGS
    blocks = [b for b in fenced_blocks(text) if b.info in tags or b.info == ""]
    blocks = [b for b in blocks if b.body.strip()]
    if python:
        jit_complete = [b for b in blocks if b.complete and _defines_jit(b.body)]
        if jit_complete:
            return clean_code(jit_complete[-1].body)
        open_jit = [b for b in blocks if not b.complete and _defines_jit(b.body)]
        if open_jit:
            return clean_code(open_jit[-1].body)
    for wanted in (lambda b: b.complete and b.info in tags, lambda b: b.complete, lambda b: not b.complete):
        chosen = [b for b in blocks if wanted(b)]
        if chosen:
            return clean_code(chosen[-1].body)
    if python and not any(_OPEN.match(line) for line in text.split("\n")):
        return _unfenced_python(text)
    return None


def _unfenced_python(text: str) -> str | None:
    stripped = text.strip("\n")
    m = _CODE_START.search(stripped)
    if m is None:
        return None
    code = stripped[m.start():]
    if m.start() == 0 and not _defines_jit(code):
        return clean_code(code) if parses(code) or code.lstrip().startswith(("import", "from", "@")) else None
    # Prose before (and maybe after) the code: keep what parses, dropping trailing paragraphs.
    candidate = code
    for _ in range(6):
        if parses(candidate):
            return clean_code(candidate)
        cut = candidate.rstrip().rfind("\n\n")
        if cut <= 0:
            break
        candidate = candidate[:cut]
    return clean_code(code) if _defines_jit(code) else None


def parses(code: str) -> bool:
    """Does ``code`` parse as Python? (Never raises, whatever the model sent.)"""
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


# -- JSON -------------------------------------------------------------------------------------


def extract_json(text: Any) -> dict[str, Any] | None:
    """The first JSON object of a reply, repaired where that is unambiguous, or ``None``.

    Tried in order: fenced blocks, the whole text, the first balanced ``{...}`` in prose that
    parses, and finally a truncated object closed after its last complete member.
    """
    try:
        return _extract_json(text)
    except (ValueError, TypeError, IndexError, RecursionError, MemoryError):
        return None


def _extract_json(text: Any) -> dict[str, Any] | None:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str) or "{" not in text:
        return None
    text = _strip_think(text[:MAX_JSON_CHARS])
    blocks = fenced_blocks(text)
    ordered = [b for b in blocks if b.info in _JSON_TAGS] + [b for b in blocks if b.info not in _JSON_TAGS]
    for block in ordered:
        found = _loads_dict(block.body.strip())
        if found is not None:
            return found
    found = _loads_dict(text.strip())
    if found is not None:
        return found
    starts = [i for i, ch in enumerate(text) if ch == "{"][:50]
    for start in starts:
        end = _balanced_end(text, start)
        if end is not None:
            found = _loads_dict(text[start:end + 1])
            if found is not None:
                return found
    for start in starts[:5]:
        if _balanced_end(text, start) is None:
            found = _close_truncated(_normalize(text[start:]))
            if found is not None:
                return found
    return None


def _loads_dict(candidate: str) -> dict[str, Any] | None:
    if not candidate.startswith("{"):
        return None
    for attempt in (candidate, None):
        src = attempt if attempt is not None else _normalize(candidate)
        try:
            value = json.loads(src)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def _balanced_end(text: str, start: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``start`` (strings respected), or ``None``."""
    depth = 0
    quote = ""
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote or (ch == "\n" and quote == "'"):
                quote = ""
        elif ch in "\"'":
            # An apostrophe inside a word ("don't") is prose, not a string.
            if ch == '"' or not (i > 0 and text[i - 1].isalnum()):
                quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i if ch == "}" else None
            if depth < 0:
                return None
        i += 1
    return None


_WORDS = {"True": "true", "False": "false", "None": "null", "true": "true", "false": "false", "null": "null",
          "NaN": "NaN", "Infinity": "Infinity"}


def _normalize(src: str) -> str:
    """Rewrite near-JSON into JSON: quotes, trailing commas, comments, Python literals, bare keys."""
    out: list[str] = []
    i = 0
    n = len(src)
    while i < n:
        ch = src[i]
        if ch in "\"'":
            j = i + 1
            buf: list[str] = []
            while j < n and src[j] != ch:
                if src[j] == "\\" and j + 1 < n:
                    nxt = src[j + 1]
                    buf.append("'" if nxt == "'" else "\\" + nxt)
                    j += 2
                    continue
                if src[j] == '"':
                    buf.append('\\"')
                elif src[j] == "\n":
                    buf.append("\\n")
                elif src[j] == "\t":
                    buf.append("\\t")
                else:
                    buf.append(src[j])
                j += 1
            out.append('"' + "".join(buf) + ('"' if j < n else ""))
            i = j + 1
            continue
        if (ch == "/" and src.startswith("//", i)) or ch == "#":
            end = src.find("\n", i)
            i = n if end < 0 else end
            continue
        if ch == "/" and src.startswith("/*", i):
            end = src.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch == ",":
            j = i + 1
            while j < n and src[j] in " \t\r\n":
                j += 1
            if j < n and src[j] in "}]":
                i += 1
                continue
            out.append(ch)
            i += 1
            continue
        if ch.isalpha() or ch == "_":
            j = i
            while j < n and (src[j].isalnum() or src[j] in "_-"):
                j += 1
            word = src[i:j]
            k = j
            while k < n and src[k] in " \t":
                k += 1
            if k < n and src[k] == ":" and word not in ("true", "false", "null"):
                out.append(json.dumps(word))  # {strategy: "x"}
            else:
                out.append(_WORDS.get(word, word))
            i = j
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _close_truncated(src: str) -> dict[str, Any] | None:
    """Close an object cut off mid-way, dropping its incomplete last member if need be."""
    for _ in range(12):
        stack: list[str] = []
        in_str = False
        esc = False
        last_comma = -1
        for idx, ch in enumerate(src):
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
                continue
            if ch == '"':
                in_str = True
            elif ch in "{[":
                stack.append(ch)
            elif ch in "}]" and stack:
                stack.pop()
            elif ch == ",":
                last_comma = idx
        candidate = src
        if in_str:
            candidate = candidate[:-1] if esc else candidate
            candidate += '"'
        candidate = candidate.rstrip()
        if candidate.endswith(":"):
            candidate += " null"
        candidate = candidate.rstrip(",").rstrip()
        candidate += "".join("}" if b == "{" else "]" for b in reversed(stack))
        try:
            value = json.loads(candidate)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value or None  # "{" alone closes to {}: nothing was said
        if last_comma < 0:
            return None
        src = src[:last_comma]
    return None
