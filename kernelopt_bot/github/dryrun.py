"""Local mode: a :class:`~kernelopt_bot.github.gateway.Gateway` that publishes into a folder.

No token, no network. Reads come from the event payload, the local checkout (``git diff`` for
changed files, files on disk for packs already in the repository) and stated assumptions (the
commenter's permission); writes are recorded and written out by :meth:`DryRunGateway.finish`::

    DIR/publish.json    every action in order, with branch, PR title, labels, reactions, ...
    DIR/pr_body.md      the follow-up (or sweep) PR body
    DIR/comment.md      the sticky report comment
    DIR/replies/N.md    replies to commands
    DIR/files/<path>    the files the proposal commit would hold
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from kernelopt_bot.github.gateway import ProposalRef, PullInfo
from kernelopt_bot.github.proposal import Proposal


def git(root: Path, *args: str) -> str | None:
    """Output of a read-only git command in ``root``, or None when it fails or git is absent."""
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


class DryRunGateway:
    dry_run = True

    def __init__(self, repo_root: Path, repository: str, *, default_branch: str = "main",
                 permission: str = "write", pull: PullInfo | None = None) -> None:
        self.root = repo_root
        self.repository = repository
        self._default_branch = default_branch
        self._permission = permission
        self._pull = pull
        self.actions: list[dict[str, Any]] = []
        self.proposal: Proposal | None = None
        self.comment: str | None = None
        self.replies: list[str] = []
        self.reactions: list[str] = []

    def _record(self, action: str, **data: Any) -> None:
        self.actions.append({"action": action, **data})

    # --- reads ---------------------------------------------------------------------------------
    def pull(self, number: int) -> PullInfo:
        if self._pull is not None and self._pull.number == number:
            return self._pull
        head = (git(self.root, "rev-parse", "HEAD") or "").strip() or "0" * 40
        branch = (git(self.root, "rev-parse", "--abbrev-ref", "HEAD") or "").strip() or "HEAD"
        base = (git(self.root, "rev-parse", f"{self._default_branch}^{{commit}}") or "").strip()
        info = PullInfo(number=number, head_sha=head, head_ref=branch, head_repo=self.repository,
                        base_ref=self._default_branch, base_repo=self.repository, base_sha=base)
        self._record("read_pull", number=number, assumed=f"local checkout {head[:12]} on {branch}")
        return info

    def changed_files(self, number: int, base_sha: str = "", head_sha: str = "") -> list[str] | None:
        if base_sha and head_sha:
            out = git(self.root, "diff", "--name-only", f"{base_sha}...{head_sha}")
            if out is not None:
                return [line for line in out.splitlines() if line]
        out = git(self.root, "diff", "--name-only", "HEAD~1", "HEAD")
        if out is not None:
            self._record("changed_files", number=number, assumed="last commit of the local checkout")
            return [line for line in out.splitlines() if line]
        self._record("changed_files", number=number, assumed="unknown: every target counts as affected")
        return None

    def permission(self, login: str) -> str:
        self._record("permission", login=login, assumed=self._permission)
        return self._permission

    def default_branch(self) -> str:
        return self._default_branch

    def branch_sha(self, branch: str) -> str | None:
        out = git(self.root, "rev-parse", f"{branch}^{{commit}}")
        return out.strip() if out else None

    def read_file(self, path: str, ref: str) -> str | None:
        p = self.root / path
        return p.read_text(encoding="utf-8") if p.is_file() else None

    # --- writes (recorded) -----------------------------------------------------------------------
    def react(self, number: int, comment_id: int, content: str) -> None:
        self.reactions.append(content)
        self._record("reaction", number=number, comment_id=comment_id, content=content)

    def reply(self, number: int, body: str, key: str) -> str:
        self.replies.append(body)
        self._record("reply", number=number, file=f"replies/{len(self.replies)}.md")
        return f"(dry run) reply {len(self.replies)} on #{number}"

    def find_sticky(self, number: int, marker: str) -> str | None:
        return None

    def upsert_sticky(self, number: int, marker: str, body: str) -> str:
        self.comment = body
        self._record("sticky_comment", number=number, marker=marker, file="comment.md",
                     note="creates the comment, or edits the one that holds the marker")
        return f"(dry run) report comment on #{number}"

    def find_proposal(self, branch: str) -> ProposalRef | None:
        return None

    def open_proposals(self) -> int:
        return 0

    def publish_proposal(self, proposal: Proposal, *, max_open: int) -> ProposalRef:
        self.proposal = proposal
        self._record("proposal", **proposal.to_json(), body_file="pr_body.md",
                     steps=["create tree and commit on parent_sha", f"create or force-move refs/heads/{proposal.branch}",
                            f"create or edit the PR {proposal.branch} -> {proposal.base}"])
        return ProposalRef("created or updated", url=f"(dry run) PR from {proposal.branch} into {proposal.base}")

    def close_proposal(self, branch: str, comment: str) -> ProposalRef | None:
        """Recorded only: whether a PR from ``branch`` is open is unknown offline, so nothing is
        reported as closed (the report must not name a PR that may never have existed)."""
        self._record("close_proposal", branch=branch, comment=comment,
                     note="a real run closes the open PR from this branch, if there is one")
        return None

    def commit_files(self, branch: str, files: dict[str, str | None], message: str) -> str:
        self._record("commit_files", branch=branch, files=sorted(files), message=message)
        return "0" * 40

    # --- output ----------------------------------------------------------------------------------
    def finish(self, out: Path, extra: dict[str, Any] | None = None) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = {"dry_run": True, "repository": self.repository, "actions": self.actions,
                               "reactions": self.reactions}
        if self.proposal is not None:
            p = self.proposal
            doc["proposal"] = {**p.to_json(), "body_file": "pr_body.md"}
            (out / "pr_body.md").write_text(p.body, encoding="utf-8")
            files_dir = (out / "files").resolve()
            for path, content in p.files.items():
                dest = (files_dir / path).resolve()
                if content is None or not dest.is_relative_to(files_dir):
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(content, encoding="utf-8")
        if self.comment is not None:
            (out / "comment.md").write_text(self.comment, encoding="utf-8")
            doc["comment_file"] = "comment.md"
        if self.replies:
            (out / "replies").mkdir(exist_ok=True)
            for i, body in enumerate(self.replies, 1):
                (out / "replies" / f"{i}.md").write_text(body, encoding="utf-8")
        doc.update(extra or {})
        path = out / "publish.json"
        path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        return path
