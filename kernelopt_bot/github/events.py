"""Event payloads (``$GITHUB_EVENT_PATH``) read into small typed objects.

Only the fields the bot uses are read, and every one is checked for type: a payload is JSON
that a workflow hands us, and in local mode a file a person wrote. Anything missing or odd is a
``BadInputError`` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.errors import BadInputError

SUPPORTED = ("pull_request", "issue_comment", "schedule", "workflow_dispatch")


@dataclass(frozen=True)
class Repo:
    full_name: str
    default_branch: str

    @property
    def owner(self) -> str:
        return self.full_name.split("/", 1)[0]


@dataclass(frozen=True)
class PullRequestEvent:
    """``pull_request``: a PR was opened, pushed to or reopened."""

    action: str
    repo: Repo
    number: int
    head_sha: str
    head_ref: str
    head_repo: str
    base_ref: str
    base_sha: str
    draft: bool = False

    @property
    def is_fork(self) -> bool:
        return self.head_repo != self.repo.full_name


@dataclass(frozen=True)
class IssueCommentEvent:
    """``issue_comment``: a comment on an issue or a PR (``on_pull_request``)."""

    action: str
    repo: Repo
    number: int
    on_pull_request: bool
    comment_id: int
    body: str
    login: str
    user_type: str

    @property
    def from_bot(self) -> bool:
        return self.user_type == "Bot" or self.login.endswith("[bot]")


@dataclass(frozen=True)
class SweepEvent:
    """``schedule`` or ``workflow_dispatch``: a sweep over every target."""

    name: str
    repo: Repo
    inputs: dict[str, str] = field(default_factory=dict)


Event = PullRequestEvent | IssueCommentEvent | SweepEvent


def _get(data: Any, path: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    cur = data
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            if default is not ...:
                return default
            raise BadInputError(f"event payload: missing {path}")
        cur = cur[part]
    if cur is None and default is not ...:
        return default
    if not isinstance(cur, kind) or (kind is int and isinstance(cur, bool)):
        raise BadInputError(f"event payload: {path} should be {getattr(kind, '__name__', kind)}")
    return cur


def _repo(data: dict[str, Any], fallback: str | None) -> Repo:
    full = _get(data, "repository.full_name", str, default=fallback or "")
    if not full or "/" not in full:
        raise BadInputError("event payload: missing repository.full_name (or GITHUB_REPOSITORY)")
    return Repo(full, _get(data, "repository.default_branch", str, default="main"))


def parse_event(name: str, data: Any, repository: str | None = None) -> Event:
    """Turn a payload into an event; ``repository`` (GITHUB_REPOSITORY) fills a missing repo."""
    if name not in SUPPORTED:
        raise BadInputError(f"event {name!r} is not handled (use one of {', '.join(SUPPORTED)})")
    if not isinstance(data, dict):
        raise BadInputError("event payload: expected a JSON object")
    repo = _repo(data, repository)
    if name == "pull_request":
        return PullRequestEvent(
            action=_get(data, "action", str, default="synchronize"),
            repo=repo,
            number=_get(data, "pull_request.number", int),
            head_sha=_get(data, "pull_request.head.sha", str),
            head_ref=_get(data, "pull_request.head.ref", str),
            head_repo=_get(data, "pull_request.head.repo.full_name", str, default=repo.full_name),
            base_ref=_get(data, "pull_request.base.ref", str),
            base_sha=_get(data, "pull_request.base.sha", str, default=""),
            draft=bool(_get(data, "pull_request.draft", bool, default=False)),
        )
    if name == "issue_comment":
        issue = _get(data, "issue", dict)
        return IssueCommentEvent(
            action=_get(data, "action", str, default="created"),
            repo=repo,
            number=_get(data, "issue.number", int),
            on_pull_request=bool(issue.get("pull_request")),
            comment_id=_get(data, "comment.id", int),
            body=_get(data, "comment.body", str, default=""),
            login=_get(data, "comment.user.login", str),
            user_type=_get(data, "comment.user.type", str, default="User"),
        )
    inputs = _get(data, "inputs", dict, default={}) if name == "workflow_dispatch" else {}
    return SweepEvent(name=name, repo=repo, inputs={str(k): str(v) for k, v in inputs.items()})


def load_event(name: str, path: str | Path, repository: str | None = None) -> Event:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BadInputError(f"event payload {path}: no such file") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInputError(f"event payload {path}: not readable JSON: {exc}") from exc
    return parse_event(name, data, repository)
