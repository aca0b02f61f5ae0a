"""Folders kernelopt creates in a user's working tree, kept out of their ``git status``.

``kernelopt optimize`` and ``kernelopt bot`` write ``kernelopt-out/`` and ``.kernelopt/`` under the
working directory, usually a repository's root. Like pytest's and ruff's cache folders, each
folder kernelopt creates gets a ``.gitignore`` holding ``*``, so nothing of it shows as untracked
and nothing of it is committed by a careless ``git add -A``. A folder that already existed is the
user's: it is left as it is.
"""

from __future__ import annotations

from pathlib import Path

GITIGNORE = "# Created by kernelopt: its outputs are not committed.\n*\n"


def make_dirs(path: str | Path) -> Path:
    """Create ``path`` with its parents (like ``mkdir -p``) and put a ``.gitignore`` holding ``*``
    into the outermost folder this call created. Returns ``path``."""
    path = Path(path)
    outermost: Path | None = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        outermost = folder
    path.mkdir(parents=True, exist_ok=True)
    if outermost is not None:
        ignore = outermost / ".gitignore"
        if not ignore.exists():
            ignore.write_text(GITIGNORE)
    return path
