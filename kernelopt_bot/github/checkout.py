"""What the run stage learns from its own git checkout, so that it needs no GitHub token.

The run stage is the job that executes the PR's code; it gets no token at all. Everything it
needs from the repository comes from local git: the commit checked out (compared with the SHA
it was told to run), the files changed between the base and head commits (which targets a PR
affects), and the base commit's config (where the LLM key may go: :mod:`kernelopt_bot.config`).
Workflows check out with ``fetch-depth: 0`` so that the base commit is present.
"""

from __future__ import annotations

import re
from pathlib import Path

from kernelopt_bot.github.dryrun import git

SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def head_sha(root: Path) -> str | None:
    out = git(root, "rev-parse", "HEAD")
    return out.strip() if out else None


def has_commit(root: Path, sha: str) -> bool:
    return bool(SHA_RE.match(sha)) and git(root, "cat-file", "-e", f"{sha}^{{commit}}") is not None


def changed_files(root: Path, base_sha: str, head: str) -> list[str] | None:
    """Files changed on the PR (three-dot diff: since the merge base), or None without the history."""
    if not (SHA_RE.match(base_sha) and SHA_RE.match(head)):
        return None
    out = git(root, "diff", "--name-only", f"{base_sha}...{head}")
    return None if out is None else [line for line in out.splitlines() if line]


def file_at(root: Path, sha: str, path: str) -> str | None:
    """A file's text at a commit, or None when the commit has no such file."""
    out = git(root, "show", f"{sha}:{path}")
    return out
