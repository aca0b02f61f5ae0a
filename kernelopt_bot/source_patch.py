"""Patches to a user's own kernel source: what a standalone-kernel target's run delivers.

A module target gets a pack (its kernels are the compiler's); a hand-written ``@triton.jit`` kernel
is the user's own code, so a verified launch config goes back into it, as a unified diff that
``git apply`` takes, the rest of the file left byte for byte as it was:

* an autotuned kernel: the config first in its ``@triton.autotune`` list, written the way the file
  writes the others (``triton.Config(...)`` or ``Config(...)``, the list's own indentation);
* a plain kernel: its launch options at the launch site (``kernel[grid](..., num_warps=...)``),
  guarded by the shape they were verified on: ``num_warps=(16 if (n_rows, n_cols) == (4096,
  8192) else num_warps)``. The launcher computes its options for every shape; a config verified
  on one shape must not change the others. The guard is built from the call's own arguments that
  are plain names or shape entries (``x.shape[1]``; the grid's, the kernel's integer arguments),
  so it reads the launcher's values.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.errors import KerneloptError
from kernelopt_bot.target_kinds import helion_decorator, helion_kernels_in

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
# What a compiled launch runs with when the call names no option (Triton's CUDA defaults).
DEFAULT_OPTIONS = {"num_warps": 4, "num_stages": 3}


class PatchError(KerneloptError):
    """The source cannot take the patch (no such kernel, no autotune list we can edit)."""


EDIT_KINDS = ("autotune", "launch", "helion")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_WORD = re.compile(r"^[A-Za-z0-9_.-]{0,40}$")  # a Helion config's string values: 'pointer', 'flat', ''
NOTE_CHARS = 300  # the longest note an edit may carry
_NOTE = re.compile(rf"^[ -\[\]-~]{{0,{NOTE_CHARS}}}$")  # one line of printable ASCII but "\\": it becomes a comment line
_PATH = re.compile(r"^[A-Za-z0-9_./-]{1,300}\.py$")
MAX_EDIT_INT = 1 << 40


@dataclass
class SourceEdit:
    """One verified change to a kernel's source, as data: which file (relative to the target
    file's folder), which kind of edit, the kernel, the config, and for a launch site where it
    is and the shape it was verified on. The patch a user applies and the file a follow-up PR
    changes are both made from it by :meth:`apply`, so the bot's publish stage, which must not
    trust text written by a run of PR code, rebuilds the change from these checked fields
    (:meth:`from_json`) instead of taking a diff."""

    file: str
    kind: str
    kernel: str
    config: dict[str, Any]
    note: str = ""
    line: int = 0  # launch: the line of the ``kernel[grid](...)`` call
    arg_names: list[str] = field(default_factory=list)
    values: dict[str, int] = field(default_factory=dict)  # launch: the integer arguments it was verified with
    grid: list[int] = field(default_factory=list)

    def apply(self, text: str) -> str:
        """``text`` (the file's content) with this edit made; a :class:`PatchError` when the file
        cannot take it, whatever went wrong."""
        try:
            if self.kind == "autotune":
                return with_config_first(text, self.kernel, self.config, note=self.note)
            if self.kind == "launch":
                return with_launch_options(text, self.line, self.kernel, self.config, arg_names=self.arg_names,
                                           values=self.values, grid=tuple(self.grid), note=self.note)
            return with_helion_config(text, self.kernel, self.config, note=self.note)
        except PatchError:
            raise
        except Exception as exc:  # a source we did not foresee: no edit, and why
            raise PatchError(f"{type(exc).__name__}: {exc}") from exc

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "kind": self.kind, "kernel": self.kernel, "config": self.config,
                "note": self.note, "line": self.line, "arg_names": self.arg_names, "values": self.values,
                "grid": self.grid}

    @classmethod
    def from_json(cls, data: Any) -> SourceEdit:
        """An edit from untrusted JSON, every field checked for what :meth:`apply` writes from
        it: identifiers, bounded integers, short words, one printable comment line; a
        :class:`PatchError` says which field failed."""
        if not isinstance(data, dict) or set(data) - {"file", "kind", "kernel", "config", "note", "line",
                                                      "arg_names", "values", "grid"}:
            raise PatchError("a source edit must be an object with the known fields only")
        file, kind, kernel = data.get("file"), data.get("kind"), data.get("kernel")
        if not isinstance(file, str) or not _PATH.match(file) or file.startswith("/") or "//" in file:
            raise PatchError("source edit: file must be a relative .py path")
        if kind not in EDIT_KINDS:
            raise PatchError(f"source edit: kind must be one of {', '.join(EDIT_KINDS)}")
        if not isinstance(kernel, str) or not _IDENT.match(kernel):
            raise PatchError("source edit: kernel must be an identifier")
        note = data.get("note", "")
        if not isinstance(note, str) or not _NOTE.match(note):
            raise PatchError("source edit: note must be one line of printable text")
        line = data.get("line", 0)
        if not _is_int(line) or not 0 <= line <= 1_000_000:
            raise PatchError("source edit: line must be a line number")
        arg_names = data.get("arg_names", [])
        if not isinstance(arg_names, list) or len(arg_names) > 200 or not all(
                isinstance(n, str) and _IDENT.match(n) for n in arg_names):
            raise PatchError("source edit: arg_names must be identifiers")
        values = data.get("values", {})
        if not isinstance(values, dict) or len(values) > 200 or not all(
                isinstance(k, str) and _IDENT.match(k) and _is_int(v) and abs(v) <= MAX_EDIT_INT
                for k, v in values.items()):
            raise PatchError("source edit: values must map identifiers to integers")
        grid = data.get("grid", [])
        if not isinstance(grid, list) or len(grid) > 3 or not all(_is_int(g) and 0 <= g <= MAX_EDIT_INT for g in grid):
            raise PatchError("source edit: grid must be up to three integers")
        config = data.get("config")
        if not isinstance(config, dict) or not config or len(config) > 40:
            raise PatchError("source edit: config must be a non-empty object")
        for key, value in config.items():
            if not isinstance(key, str) or not _IDENT.match(key):
                raise PatchError("source edit: config keys must be identifiers")
            if kind == "launch" and not (_is_int(value) and 0 < value <= MAX_EDIT_INT):
                raise PatchError(f"source edit: config {key} must be a positive integer")
            if kind == "autotune" and not (isinstance(value, bool) or (_is_int(value) and 0 <= value <= MAX_EDIT_INT)):
                raise PatchError(f"source edit: config {key} must be an integer or a boolean")
            if kind == "launch" and key not in LAUNCH_OPTIONS:
                raise PatchError(f"source edit: a launch edit sets launch options only, not {key}")
            if kind == "helion" and not _helion_value(value, 2):
                raise PatchError(f"source edit: config {key} is not a Helion config value")
        return cls(file, kind, kernel, dict(config), note, line, list(arg_names), dict(values), list(grid))


def edit_order(edits: list[SourceEdit]) -> list[SourceEdit]:
    """The order one file's edits are made in, each on what the ones before it made: launch edits
    from the bottom of the file up, then those that find their kernel by name (an autotune list,
    a Helion decorator). Why: a launch edit finds its launch by the line it had when the run saw
    the file, and changes only that statement and the lines after it (a comment above it, options
    in it); made top-down, the first one's comment line moved every later launch down a line, and
    the second edit missed its launch (two kernels launched from one file got a patch that
    ``git apply`` refused, and a follow-up PR without the second kernel's config)."""
    launches = sorted((e for e in edits if e.kind == "launch"), key=lambda e: e.line, reverse=True)
    return launches + [e for e in edits if e.kind != "launch"]


def apply_edits(text: str, edits: list[SourceEdit]) -> tuple[str, list[SourceEdit], list[tuple[SourceEdit, str]]]:
    """``text`` with one file's ``edits`` made in :func:`edit_order`, each on what the ones before
    it made; the edits made, and those that could not be, each with why (the patch of a run and
    the publish stage's change are both made so)."""
    made: list[SourceEdit] = []
    failed: list[tuple[SourceEdit, str]] = []
    for edit in edit_order(edits):
        try:
            text = edit.apply(text)
        except (PatchError, ValueError) as exc:
            failed.append((edit, str(exc)))
            continue
        made.append(edit)
    return text, made, failed


def fit_note(text: str) -> str:
    """``text`` as an edit's note may be (what :meth:`SourceEdit.from_json` accepts): one line of
    printable ASCII but a backslash (anything else becomes ``?``), at most :data:`NOTE_CHARS`."""
    text = "".join(c if " " <= c <= "~" and c != "\\" else "?" for c in text)
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 3] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _helion_value(value: Any, depth: int) -> bool:
    """What a Helion config holds: integers, booleans, None, short words, and lists of them."""
    if value is None or isinstance(value, bool) or (_is_int(value) and abs(value) <= MAX_EDIT_INT):
        return True
    if isinstance(value, str):
        return bool(_WORD.match(value))
    if isinstance(value, list) and depth > 0 and len(value) <= 64:
        return all(_helion_value(v, depth - 1) for v in value)
    return False


def unified_diff(path: Path, old: str, new: str, root: str | Path | None) -> str:
    """``old`` -> ``new`` as a diff of ``path``, its paths relative to ``root`` (default: the
    file's folder)."""
    rel = path.resolve().relative_to(Path(root).resolve()) if root is not None else Path(path.name)
    return unified_text(rel.as_posix(), old, new)


def unified_text(path: str, old: str, new: str) -> str:
    """``old`` -> ``new`` as a diff of the repository path ``path`` (``git apply`` at the root)."""
    diff = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                fromfile=f"a/{path}", tofile=f"b/{path}")
    return "".join(diff)


def with_launch_options(text: str, line: int, kernel: str, options: dict[str, Any], *, arg_names: list[str],
                        values: dict[str, Any], grid: tuple[int, ...], note: str) -> str:
    """``text`` with the ``kernel[grid](...)`` call spanning ``line`` launching with ``options``
    when the shape is the one in ``values`` (the kernel's arguments by parameter name) and
    ``grid``, as before otherwise; a comment line ``# kernelopt: <note>`` above the statement.
    ``kernel`` must be a ``@triton.jit`` function of the file or a name it imports: a call of
    anything else is not a launch to change."""
    source = _Source(text)
    call = _launch_call(source.tree, line, kernel)
    guard = _shape_guard(call, arg_names, values, grid)
    if not guard:
        raise PatchError(f"the launch of {kernel} at line {line} passes no shape as a plain name "
                         f"or a shape entry (nothing to guard the verified options with)")
    names, numbers = ", ".join(n for n, _ in guard), ", ".join(repr(v) for _, v in guard)
    condition = f"{names} == {numbers}" if len(guard) == 1 else f"({names}) == ({numbers})"
    keywords = {k.arg: k for k in call.keywords if k.arg}
    missing = []
    for key, value in options.items():
        kw = keywords.get(key)
        if kw is None:
            missing.append(f"{key}=({value!r} if {condition} else {DEFAULT_OPTIONS.get(key)!r})")
            continue
        start, end = source.start(kw.value), source.end(kw.value)
        source.replace(start, end, f"({value!r} if {condition} else {text[start:end]})")
    if missing:
        if any(k.arg is None for k in call.keywords):
            # **kwargs may carry the option too: adding it could pass it twice
            raise PatchError(f"the launch of {kernel} passes **kwargs; {', '.join(options)} cannot be added beside them")
        source.add_arguments(call, missing)
    statement = min((n for n in ast.walk(source.tree) if isinstance(n, ast.stmt)
                     and n.lineno <= call.lineno and (n.end_lineno or n.lineno) >= (call.end_lineno or call.lineno)),
                    key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    source.comment_before(statement.lineno, f"kernelopt: {note}")
    return source.result()


def launch_keywords(text: str, line: int, kernel: str) -> tuple[set[str], bool]:
    """The keyword arguments the launch of ``kernel`` at ``line`` names, and whether it also
    passes ``**kwargs`` (then only those it names can be given new values: see
    :func:`with_launch_options`)."""
    call = _launch_call(_parsed(text), line, kernel)
    return {k.arg for k in call.keywords if k.arg}, any(k.arg is None for k in call.keywords)


def _launch_call(tree: ast.Module, line: int, kernel: str) -> ast.Call:
    """The innermost ``kernel[grid](...)`` call spanning ``line``; ``kernel`` must be a
    ``@triton.jit`` function of the file or a name it imports."""
    if not _is_triton_kernel(tree, kernel):
        raise PatchError(f"{kernel} is neither a @triton.jit function of the file nor a name it imports")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
             and _last_name(n.func.value) == kernel and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not calls:
        raise PatchError(f"no launch {kernel}[...](...) at line {line}")
    return min(calls, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)


def with_helion_config(text: str, kernel: str, config: dict[str, Any], *, note: str) -> str:
    """``text`` with ``config`` pinned in ``kernel``'s ``@helion.kernel`` decorator: the value of
    its ``config=`` replaced, first in its ``configs=[...]``, or ``config=`` added (a bare
    ``@helion.kernel`` gets the call); a comment line ``# kernelopt: <note>`` above the decorator.
    ``Config`` spelled with the names the file imports (``helion.Config``, or ``Config`` / its
    alias imported from helion); a file with neither is not changed."""
    source = _Source(text)
    fn = next((n for n in helion_kernels_in(source.tree) if n.name == kernel), None)
    if fn is None:
        raise PatchError(f"no @helion.kernel function {kernel!r} in the source")
    decorator = next(d for d in fn.decorator_list if helion_decorator(source.tree, d))
    entry = f"{_helion_config_name(source.tree)}({', '.join(f'{k}={v!r}' for k, v in config.items())})"
    if not isinstance(decorator, ast.Call):
        source.replace(source.end(decorator), source.end(decorator), f"(config={entry})")
    else:
        keywords = {k.arg: k for k in decorator.keywords if k.arg}
        if "config" in keywords:
            value = keywords["config"].value
            source.replace(source.start(value), source.end(value), entry)
        elif "configs" in keywords and isinstance(keywords["configs"].value, ast.List) and keywords["configs"].value.elts:
            first = keywords["configs"].value.elts[0]
            source.replace(source.start(first), source.start(first), f"{entry}, ")
        else:
            source.add_arguments(decorator, [f"config={entry}"])
    source.comment_before(decorator.lineno, f"kernelopt: {note}")
    return source.result()


def with_config_first(text: str, kernel: str, config: dict[str, Any], *, note: str = "") -> str:
    """``text`` with ``config`` inserted before the first entry of ``kernel``'s autotune list; with
    a ``note``, a comment line ``# kernelopt: <note>`` above the ``@triton.autotune`` decorator (what
    was verified where, or that it was not timed), as the other edits have."""
    source = _Source(text)
    fn = next((n for n in source.tree.body if isinstance(n, ast.FunctionDef) and n.name == kernel), None)
    if fn is None:
        raise PatchError(f"no top-level function {kernel!r} in the source")
    configs = _autotune_configs(fn)
    if configs is None:
        raise PatchError(f"{kernel} has no @triton.autotune(configs=[...]) list to put a config in")
    if not configs.elts:
        raise PatchError(f"{kernel}'s autotune list is empty: nothing shows how its configs are written")
    first = configs.elts[0]
    spelled = ast.get_source_segment(text, first.func) if isinstance(first, ast.Call) else None
    entry = _config_text(spelled or "triton.Config", config)
    at = source.start(first)
    before = text[text.rfind("\n", 0, at) + 1:at]
    # the first entry starts its own line: so does ours
    source.replace(at, at, f"{entry},{source.newline}{before}" if before.strip() == "" else f"{entry}, ")
    if note:
        decorator = next(d for d in fn.decorator_list if any(n is configs for n in ast.walk(d)))
        source.comment_before(decorator.lineno, f"kernelopt: {note}")
    return source.result()


class _Source:
    """A file's text and syntax tree, ``ast`` positions as string offsets, and edits made
    together (right to left, so none moves another's place); :meth:`result` checks that the
    file still parses and still has the encoding it had."""

    def __init__(self, text: str) -> None:
        if "\r" in text.replace("\r\n", ""):
            raise PatchError("the source has lone carriage returns as line ends")
        self.text = text
        self.tree = _parsed(text)
        self.starts = _line_starts(text)
        self.newline = "\r\n" if "\r\n" in text else "\n"
        self._edits: list[tuple[int, int, str]] = []

    def offset(self, lineno: int, col: int) -> int:
        start = self.starts[lineno - 1]
        return start + _char_offset(self.text[start:].split("\n", 1)[0], col)

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]

    def replace(self, start: int, end: int, new: str) -> None:
        self._edits.append((start, end, new))

    def comment_before(self, lineno: int, comment: str) -> None:
        """A comment line before line ``lineno``, indented as that line is."""
        start = self.starts[lineno - 1]
        line = self.text[start:].split("\n", 1)[0]
        indent = line[: len(line) - len(line.lstrip())]
        self.replace(start, start, f"{indent}# {comment}{self.newline}")

    def add_arguments(self, call: ast.Call, arguments: list[str]) -> None:
        """``arguments`` after the call's last one: on lines of their own where the call puts one
        argument a line and ``)`` alone on its line, else inline; comments kept where they are."""
        close = self.end(call) - 1  # the call's ")"
        nodes = [*call.args, *(k.value for k in call.keywords)]
        if not nodes:  # ``f()``: nothing before ours
            self.replace(close, close, ", ".join(arguments))
            return
        last_end = self.end(nodes[-1])
        between = re.sub(r"#[^\n]*", "", self.text[last_end:close])  # what follows the last argument
        close_line = self.text.rfind("\n", 0, close) + 1
        if self.text[close_line:close].strip() == "" and close_line > last_end:
            last_line = self.text[self.starts[nodes[-1].lineno - 1]:].split("\n", 1)[0]  # type: ignore[attr-defined]
            indent = last_line[: len(last_line) - len(last_line.lstrip())]
            if "," not in between:
                self.replace(last_end, last_end, ",")
            self.replace(close_line, close_line, "".join(f"{indent}{a},{self.newline}" for a in arguments))
        else:
            self.replace(last_end, last_end, ", " + ", ".join(arguments))

    def result(self) -> str:
        new = self.text
        for start, end, replacement in sorted(self._edits, key=lambda e: (e[0], e[1]), reverse=True):
            new = new[:start] + replacement + new[end:]
        _parsed(new)  # a patch that breaks the file is a bug here, never the user's problem
        if _encoding(new) != _encoding(self.text):  # a comment line must not become a coding line
            raise PatchError("the edit would change how Python decodes the file")
        return new


def _encoding(text: str) -> str:
    import io
    import tokenize

    try:
        return tokenize.detect_encoding(io.BytesIO(text.encode("utf-8")).readline)[0]
    except SyntaxError as exc:
        raise PatchError(f"the source's encoding line is not valid: {exc}") from exc


def _is_triton_kernel(tree: ast.Module, name: str) -> bool:
    """``name`` is a top-level function decorated ``@triton.jit``/``@jit`` (under any autotune or
    heuristics decorators), or a name the file imports (its kernel lives in another module)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return any(_last_name(d.func if isinstance(d, ast.Call) else d) == "jit" for d in node.decorator_list)
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def _helion_config_name(tree: ast.Module) -> str:
    """How the file can name ``helion.Config``: its ``import helion`` or ``from helion import Config``."""
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name == "helion" and a.asname is None for a in node.names):
            return "helion.Config"
        if isinstance(node, ast.ImportFrom) and node.module == "helion":
            for alias in node.names:
                if alias.name == "Config":
                    return alias.asname or "Config"
    raise PatchError("the file imports neither helion nor Config from it: the config could not be named")


def _shape_guard(call: ast.Call, arg_names: list[str], values: dict[str, Any],
                 grid: tuple[int, ...]) -> list[tuple[str, int | tuple[int, ...]]]:
    """The call's integer arguments written as plain names or shape entries (:func:`_guard_text`),
    with the values they had: the grid's entries (or the grid, where the call names a grid
    variable: compared as a tuple), then the kernel's positional arguments (up to the first
    ``*args``) and keyword arguments; each name once. A grid given as a function (a lambda of the constexprs) is left out: its value is
    no plain number."""
    found: dict[str, int | tuple[int, ...]] = {}

    def take(node: ast.expr, value: Any) -> None:
        text = _guard_text(node)
        if text is not None and isinstance(value, int) and not isinstance(value, bool):
            found.setdefault(text, value)

    index = call.func.slice if isinstance(call.func, ast.Subscript) else None
    if isinstance(index, ast.Tuple):  # kernel[(n_rows,)](...): each entry's name
        for node, value in zip(index.elts, grid):
            take(node, value)
    elif isinstance(index, ast.Name) and grid:  # grid = (n_rows,) or [n_rows]; kernel[grid](...)
        found.setdefault(f"tuple({index.id})", tuple(grid))
    for node, name in zip(call.args, arg_names):
        if isinstance(node, ast.Starred):  # past it, positions no longer match parameters
            break
        take(node, values.get(name))
    for kw in call.keywords:
        if kw.arg and kw.arg not in LAUNCH_OPTIONS:
            take(kw.value, values.get(kw.arg))
    return list(found.items())


def _guard_text(node: ast.expr) -> str | None:
    """A launch argument a guard may read again, as source: a plain name (``n_cols``), or a name's
    attribute or constant index, chained (``x.shape[1]``, ``x.shape[-1]``, ``self.rows``); None for
    anything else (a call, arithmetic: reading it again might not give the same value, or do more).
    Launchers often pass ``x.shape[1]`` straight to the kernel; the guard compares it as written."""
    inner = node
    while isinstance(inner, (ast.Attribute, ast.Subscript)):
        if isinstance(inner, ast.Subscript):
            index = inner.slice
            if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
                index = index.operand
            if not (isinstance(index, ast.Constant) and _is_int(index.value)):
                return None
        inner = inner.value
    return ast.unparse(node) if isinstance(inner, ast.Name) else None


def _parsed(text: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise PatchError(f"the source does not parse (line {exc.lineno}): {exc.msg}") from exc
    except ValueError as exc:  # a NUL byte, say
        raise PatchError(f"the source cannot be parsed: {exc}") from exc


def _last_name(node: ast.expr) -> str:
    """``kernel`` for ``kernel`` and ``module.kernel``."""
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _line_starts(text: str) -> list[int]:
    """Where each line starts, lines split as ``ast`` numbers them (at newlines)."""
    return [0, *(i + 1 for i, ch in enumerate(text) if ch == "\n")]


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
