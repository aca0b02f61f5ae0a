"""The git side of a proposal: which files a follow-up PR holds, and what its commit says.

Like create-pull-request, building the contents is kept apart from the GitHub calls that move
refs and open PRs (:mod:`kernelopt_bot.github.gateway`): a :class:`Proposal` is plain data that
the dry run writes to disk and the GitHub gateway turns into one tree, one commit, one ref move
and one PR create-or-edit, in that order.

Files: one pack per target (all of its dtypes merged; entries are keyed by kernel hash, so they
never collide) at ``kernelopt/packs/<target>.json``, and ``kernelopt/README.md`` with the
activation lines. A kernel target (a Triton launcher or a Helion kernel) changes its own source
instead: the verified edits, rebuilt from the checked fields of its result
(:class:`~kernelopt_bot.source_patch.SourceEdit`), made to the files as they are at the proposal's
parent; only files the trusted config names for that target (its entry, its ``paths`` globs),
Python files outside ``.github/``, can be changed so.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.config import KerneloptConfig
from kernelopt_bot.github.affected import glob_match
from kernelopt_bot.github.runner import JobOutcome
from kernelopt_bot.pack.format import KernelPack, PackError
from kernelopt_bot.source_patch import SourceEdit, apply_edits, unified_text

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
    # Kernel source files the trusted config lets this proposal change (see source_changes)
    sources: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # A proposal adds the bot's own files and the kernel sources the config names, nothing
        # else, whatever a results folder claimed.
        for path in self.files:
            parts = path.split("/")
            if ".." in parts or "" in parts or "\\" in path:
                raise ValueError(f"a proposal may not write {path!r}")
            if not path.startswith("kernelopt/") and not (path in self.sources and source_path_ok(path)):
                raise ValueError(f"a proposal may only write under kernelopt/ and the kernel sources the "
                                 f"config names, not {path!r}")
        if not self.branch.startswith("kernelopt/"):
            raise ValueError(f"a proposal branch must be under kernelopt/, not {self.branch!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch, "base": self.base, "parent_sha": self.parent_sha,
            "files": sorted(self.files), "deleted": sorted(p for p, c in self.files.items() if c is None),
            "title": self.title, "draft": self.draft, "labels": self.labels, "reviewers": self.reviewers,
            "commit_message": self.commit_message,
        }


def source_path_ok(path: str) -> bool:
    """A path a kernel target's edit may change at all: a Python file in the repository, not
    under ``.github/`` (workflows) nor the bot's own folder."""
    parts = path.split("/")
    return (path.endswith(".py") and not path.startswith((".github/", "kernelopt/", "/"))
            and ".." not in parts and "" not in parts)


@dataclass
class SourceChanges:
    """Kernel source files a proposal changes: their contents before (as read) and after, and
    in words the edits that could not be made."""

    before: dict[str, str] = field(default_factory=dict)
    after: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def diff(self) -> str:
        """The change as one unified diff, file by file (for the PR body)."""
        return "".join(unified_text(path, self.before[path], text) for path, text in sorted(self.after.items()))


def source_changes(outcomes: Iterable[JobOutcome], cfg: KerneloptConfig,
                   read: Callable[[str], str | None]) -> SourceChanges:
    """The kernel source files the outcomes' verified edits change, each file read once through
    ``read`` (at the proposal's parent) and all its edits made together, in
    :func:`~kernelopt_bot.source_patch.edit_order` (every launch edit's line is the one the run saw);
    and the edits that could not be made (a file the config does not name for the target, a file
    missing, a source that no longer has the launch)."""
    changes = SourceChanges()
    problems = changes.problems
    wanted: dict[str, list[tuple[str, SourceEdit]]] = {}  # path -> (target, edit), as the outcomes came
    for outcome in outcomes:
        target = cfg.target(outcome.job.name)
        if outcome.failed or target is None or not outcome.result.source_edits:
            continue
        folder = posixpath.dirname(target.entry)
        for raw in outcome.result.source_edits:
            edit = SourceEdit.from_json(raw)
            if edit.kernel not in outcome.result.accepted_kernels:  # only what passed all four gates
                problems.append(f"{target.name}: {edit.kernel} is not reported as accepted; its config was not written")
                continue
            path = posixpath.normpath(posixpath.join(folder, edit.file))
            allowed = path == target.entry or any(glob_match(path, g) for g in target.paths)
            if not (allowed and source_path_ok(path)):
                problems.append(f"{target.name}: {path} is not the target's entry nor matched by its paths; "
                                f"{edit.kernel}'s config was not written")
                continue
            wanted.setdefault(path, []).append((target.name, edit))
    for path, edits in wanted.items():
        text = read(path)
        if text is None:
            problems.extend(f"{name}: {path} was not found; {edit.kernel}'s config was not written" for name, edit in edits)
            continue
        changes.before[path] = text
        whose = {id(edit): name for name, edit in edits}
        new, _, failed = apply_edits(text, [edit for _, edit in edits])
        problems.extend(f"{whose[id(edit)]}: {edit.kernel}'s config could not be written into {path}: {why}"
                        for edit, why in failed)
        if new != text:
            changes.after[path] = new
    return changes


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
    lines = ["from kernelopt_bot.pack.runtime import install", ""]
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
