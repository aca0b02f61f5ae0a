"""Patches to a user's own kernel source: what a standalone-kernel target's run delivers.

A module target gets a pack (its kernels are the compiler's); a hand-written ``@triton.jit`` kernel
is the user's own code, so a verified launch config goes back into it: first in its
``@triton.autotune`` list, written the way the file writes the others (``triton.Config(...)`` or
``Config(...)``, the list's own indentation), as a unified diff that ``git apply`` takes. The rest
of the file is left byte for byte as it was.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path
from typing import Any

from kernelopt_bot.errors import KerneloptError

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


class PatchError(KerneloptError):
    """The source cannot take the patch (no such kernel, no autotune list we can edit)."""


def autotune_patch(path: str | Path, kernel: str, config: dict[str, Any], *, root: str | Path | None = None) -> str:
    """A unified diff putting ``config`` (block constexprs plus ``num_warps``/``num_stages``/...)
    first in ``kernel``'s ``@triton.autotune`` configs; paths in it are relative to ``root``
    (default: the file's folder), so ``git apply`` at ``root`` applies it."""
    path = Path(path)
    text = path.read_text()
    new_text = with_config_first(text, kernel, config)
    rel = path.resolve().relative_to(Path(root).resolve()) if root is not None else Path(path.name)
    diff = difflib.unified_diff(text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                fromfile=f"a/{rel.as_posix()}", tofile=f"b/{rel.as_posix()}")
    return "".join(diff)


def with_config_first(text: str, kernel: str, config: dict[str, Any]) -> str:
    """``text`` with ``config`` inserted before the first entry of ``kernel``'s autotune list."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise PatchError(f"the source does not parse (line {exc.lineno}): {exc.msg}") from exc
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if fn is None:
        raise PatchError(f"no top-level function {kernel!r} in the source")
    configs = _autotune_configs(fn)
    if configs is None:
        raise PatchError(f"{kernel} has no @triton.autotune(configs=[...]) list to put a config in")
    if not configs.elts:
        raise PatchError(f"{kernel}'s autotune list is empty: nothing shows how its configs are written")
    first = configs.elts[0]
    lines = text.splitlines(keepends=True)
    spelled = ast.get_source_segment(text, first.func) if isinstance(first, ast.Call) else None
    entry = _config_text(spelled or "triton.Config", config)
    line = lines[first.lineno - 1]
    col = _char_offset(line, first.col_offset)
    own_line = line[:col].strip() == ""  # the first entry starts its own line: so does ours
    insert = f"{entry},\n{line[:col]}" if own_line else f"{entry}, "
    lines[first.lineno - 1] = line[:col] + insert + line[col:]
    return "".join(lines)


def _autotune_configs(fn: ast.FunctionDef) -> ast.List | None:
    for decorator in fn.decorator_list:
        if not isinstance(decorator, ast.Call):
            continue
        name = decorator.func.attr if isinstance(decorator.func, ast.Attribute) else getattr(decorator.func, "id", "")
        if name != "autotune":
            continue
        value = next((k.value for k in decorator.keywords if k.arg == "configs"),
                     decorator.args[0] if decorator.args else None)
        return value if isinstance(value, ast.List) else None
    return None


def _config_text(spelled: str, config: dict[str, Any]) -> str:
    kwargs = {k: v for k, v in config.items() if k not in LAUNCH_OPTIONS}
    options = [f"{k}={config[k]!r}" for k in LAUNCH_OPTIONS if config.get(k) is not None]
    return f"{spelled}({kwargs!r}{''.join(', ' + o for o in options)})"


def _char_offset(line: str, byte_offset: int) -> int:
    """``ast``'s column is a UTF-8 byte offset; the line is text."""
    return len(line.encode()[:byte_offset].decode(errors="ignore"))
