"""Where the package's bundled files are: the jinja2 templates (reports, PR texts, prompts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kernelopt_bot.errors import KerneloptError


def templates_dir() -> Path:
    """``KERNELOPT_TEMPLATES``, else the source tree's ``templates/``, else the installed data files
    (``pyproject.toml`` installs them under ``share/kernelopt-bot/templates``)."""
    env = os.environ.get("KERNELOPT_TEMPLATES")
    if env:
        return Path(env)
    candidates = [Path(__file__).resolve().parent.parent / "templates",
                  Path(sys.prefix) / "share" / "kernelopt-bot" / "templates"]
    for folder in candidates:
        if (folder / "report.md.j2").is_file():
            return folder
    raise KerneloptError("templates not found (looked in " + ", ".join(map(str, candidates))
                         + "); set KERNELOPT_TEMPLATES to the templates/ folder of kernelopt-bot")
