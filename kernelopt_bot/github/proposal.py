"""The git side of a proposal: which files a follow-up PR holds, and what its commit says.

Like create-pull-request, building the contents is kept apart from the GitHub calls that move
refs and open PRs (:mod:`kernelopt_bot.github.gateway`): a :class:`Proposal` is plain data that
the dry run writes to disk and the GitHub gateway turns into one tree, one commit, one ref move
and one PR create-or-edit, in that order.

Files: one pack per target (all of its dtypes merged; entries are keyed by kernel hash, so they
never collide) at ``kernelopt/packs/<target>.json``, and ``kernelopt/README.md`` with the
activation lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.github.runner import JobOutcome
from kernelopt_bot.stitch.pack import KernelPack, PackError

PACKS_DIR = "kernelopt/packs"
README_PATH = "kernelopt/README.md"


def pr_branch(number: int) -> str:
    return f"kernelopt/pr-{int(number)}"


NIGHTLY_BRANCH = "kernelopt/nightly"
HISTORY_BRANCH = "kernelopt/history"
HISTORY_FILE = "history.json"


def pack_file(target: str) -> str:
    return f"{PACKS_DIR}/{target}.json"


@dataclass
class Proposal:
    """One branch's worth of change, and the PR that proposes it.

    ``files`` maps repository paths to new contents; ``None`` deletes the path.
    """

    branch: str
    base: str  # the branch the PR merges into
    parent_sha: str  # the commit the proposal is built on
    files: dict[str, str | None]
    title: str
    body: str
    commit_message: str
    draft: bool = True
    labels: list[str] = field(default_factory=list)
    reviewers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # A proposal adds the bot's own files and nothing else: no path outside kernelopt/ can be
        # written into the repository through it, whatever a results folder claimed.
        for path in self.files:
            parts = path.split("/")
            if not path.startswith("kernelopt/") or ".." in parts or "" in parts or "\\" in path:
                raise ValueError(f"a proposal may only write under kernelopt/, not {path!r}")
        if not self.branch.startswith("kernelopt/"):
            raise ValueError(f"a proposal branch must be under kernelopt/, not {self.branch!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch, "base": self.base, "parent_sha": self.parent_sha,
            "files": sorted(self.files), "deleted": sorted(p for p, c in self.files.items() if c is None),
            "title": self.title, "draft": self.draft, "labels": self.labels, "reviewers": self.reviewers,
            "commit_message": self.commit_message,
        }


def load_pack(outcome: JobOutcome) -> KernelPack | None:
    """The outcome's validated pack if the run was ok and verified at least one replacement."""
    if outcome.failed or outcome.pack is None:
        return None
    return outcome.pack if len(outcome.pack) else None


def merged_packs(outcomes: Iterable[JobOutcome]) -> dict[str, KernelPack]:
    """One pack per target name, merging the packs of its dtypes."""
    packs: dict[str, KernelPack] = {}
    for o in outcomes:
        pack = load_pack(o)
        if pack is None:
            continue
        merged = packs.setdefault(o.job.name, KernelPack(target=o.job.entry, created_by="kernelopt bot"))
        for entry in pack.entries.values():
            merged.add(entry)
        merged.measured.setdefault("dtypes", {})[o.job.dtype] = {
            "speedup": o.result.speedup, "baseline_ms": o.result.baseline_ms,
            "optimized_ms": o.result.optimized_ms, "device": o.result.device,
        }
    return packs


def activation_lines(names: Iterable[str]) -> str:
    lines = ["from kernelopt_bot.stitch.runtime import install", ""]
    for name in sorted(names):
        lines.append(f'install("{pack_file(name)}")  # {name}: before torch.compile')
    return "\n".join(lines)


def readme(names: Iterable[str]) -> str:
    names = sorted(names)
    body = [
        "# kernelopt packs",
        "",
        "Verified Triton kernel replacements for this repository's models, one pack per target.",
        "Install a pack before `torch.compile`; it needs torch and triton only. A kernel the pack",
        "does not know, or a machine its guards do not match, keeps the compiler's kernel.",
        "",
        "```python",
        activation_lines(names),
        "```",
        "",
        "| target | pack |",
        "|---|---|",
        *[f"| {n} | `{pack_file(n)}` |" for n in names],
        "",
    ]
    return "\n".join(body)


def proposal_files(packs: dict[str, KernelPack]) -> dict[str, str | None]:
    files: dict[str, str | None] = {pack_file(n): p.dumps() for n, p in sorted(packs.items())}
    if packs:
        files[README_PATH] = readme(packs)
    return files


def pack_keys(text: str | None) -> set[str]:
    """Kernel keys in a pack file's text (empty when absent or unreadable)."""
    if not text:
        return set()
    try:
        return set(KernelPack.from_json(json.loads(text)).entries)
    except (PackError, ValueError):
        return set()
