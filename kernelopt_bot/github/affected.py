"""Which targets a set of changed files affects.

A target is affected when a changed file

* matches one of its ``paths`` globs,
* is its entry file (or the module file of a ``pkg.mod:factory`` entry),
* is the config file itself (the targets may have changed), or
* is a Python module of this repository that the entry imports, directly or transitively.

The import graph is read statically with :mod:`ast` (nothing from the PR is imported or run):
``import a.b``, ``from a import b`` (``a.b`` if that is a module, else ``a``) and relative
imports, resolved against the repository root and a ``src/`` folder if there is one. Importing
``a.b.c`` also imports the packages ``a`` and ``a.b``, so their ``__init__.py`` count too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path, PurePosixPath

from kernelopt_bot.config import DEFAULT_CONFIG, KerneloptConfig, TargetConfig

SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", "site-packages", "build", "dist"}


@lru_cache(maxsize=512)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A gitignore-like glob: ``**`` spans folders, ``*`` and ``?`` stay within one."""
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        else:
            out += re.escape(c)
        i += 1
    return re.compile(f"^{out}$")


def glob_match(path: str, pattern: str) -> bool:
    path = str(PurePosixPath(path))
    if glob_regex(pattern).match(path):
        return True
    # A folder pattern ("models/" or "models") covers everything under it.
    base = pattern.rstrip("/")
    return not any(ch in base for ch in "*?[") and path.startswith(base + "/")


class ModuleIndex:
    """Module name <-> file, for the Python files of one repository."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.roots = [self.root] + ([self.root / "src"] if (self.root / "src").is_dir() else [])
        self.by_name: dict[str, Path] = {}
        for base in self.roots:
            for f in self._walk(base):
                name = self._name(base, f)
                if name:
                    self.by_name.setdefault(name, f)

    def _walk(self, base: Path) -> Iterable[Path]:
        for p in sorted(base.iterdir()):
            if p.is_dir():
                if p.name in SKIP_DIRS or p.name.startswith(".") or (p == self.root / "src" and base == self.root):
                    continue
                yield from self._walk(p)
            elif p.suffix == ".py":
                yield p

    @staticmethod
    def _name(base: Path, f: Path) -> str | None:
        parts = list(f.relative_to(base).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts or not all(p.isidentifier() for p in parts):
            return None
        return ".".join(parts)

    def module_of(self, f: Path) -> str | None:
        f = f.resolve()
        for base in reversed(self.roots):  # src/ first: it is the import root of what it holds
            try:
                f.relative_to(base)
            except ValueError:
                continue
            name = self._name(base, f)
            if name:
                return name
        return None

    def resolve(self, name: str) -> list[Path]:
        """Files that importing ``name`` executes: its packages' ``__init__`` and itself."""
        parts = name.split(".")
        files = []
        for i in range(1, len(parts) + 1):
            f = self.by_name.get(".".join(parts[:i]))
            if f is not None:
                files.append(f)
        return files

    def imports_of(self, f: Path) -> set[str]:
        try:
            tree = ast.parse(f.read_text(encoding="utf-8", errors="replace"), filename=str(f))
        except SyntaxError:
            return set()
        me = self.module_of(f) or ""
        package = me if f.name == "__init__.py" else me.rpartition(".")[0]
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg_parts = package.split(".") if package else []
                    up = node.level - 1
                    if up > len(pkg_parts):
                        continue
                    base_parts = pkg_parts[: len(pkg_parts) - up] if up else pkg_parts
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if not base:
                    continue
                names.add(base)
                for alias in node.names:
                    if alias.name != "*":
                        names.add(f"{base}.{alias.name}")
        return names

    def closure(self, start: Iterable[Path]) -> set[Path]:
        """Every repository file reachable from ``start`` through imports."""
        seen: set[Path] = set()
        todo = [p.resolve() for p in start]
        while todo:
            f = todo.pop()
            if f in seen or not f.is_file():
                continue
            seen.add(f)
            for name in self.imports_of(f):
                todo.extend(p for p in self.resolve(name) if p not in seen)
        return seen


def entry_files(target: TargetConfig, index: ModuleIndex) -> list[Path]:
    if target.module_entry:
        return index.resolve(target.entry.partition(":")[0])
    return [index.root / target.entry]


def affected_targets(cfg: KerneloptConfig, changed: Iterable[str], root: Path,
                     config_path: str = DEFAULT_CONFIG) -> dict[str, str]:
    """Active targets affected by ``changed`` (repository-relative paths) -> why, in words."""
    changed = [str(PurePosixPath(c)) for c in changed]
    if not changed:
        return {}
    root = root.resolve()
    index = ModuleIndex(root)
    config_rel = str(PurePosixPath(config_path))
    why: dict[str, str] = {}
    changed_abs = {(root / c).resolve(): c for c in changed}
    for t in cfg.active_targets():
        if config_rel in changed:
            why[t.name] = f"{config_rel} changed"
            continue
        hit = next((c for c in changed for g in t.paths if glob_match(c, g)), None)
        if hit:
            why[t.name] = f"{hit} matches paths"
            continue
        entries = entry_files(t, index)
        entry_hit = next((changed_abs[e.resolve()] for e in entries if e.resolve() in changed_abs), None)
        if entry_hit:
            why[t.name] = f"{entry_hit} is its entry"
            continue
        reach = index.closure(entries)
        dep = next((rel for f, rel in sorted(changed_abs.items(), key=lambda kv: kv[1]) if f in reach), None)
        if dep:
            why[t.name] = f"its entry imports {dep}"
    return why
