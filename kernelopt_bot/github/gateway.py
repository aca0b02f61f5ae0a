"""The GitHub side of publishing: refs, pull requests, comments, reactions, through PyGithub.

Everything the flows need from GitHub goes through the :class:`Gateway` protocol, so the same
flow runs against the REST API (:class:`GitHubGateway`) or records what it would do
(:class:`kernelopt_bot.github.dryrun.DryRunGateway`).

Publishing is ordered and idempotent. A proposal is: tree, commit, then the ref is created or
force-moved, then the PR is found by its head branch and edited, or created. The report comment
and command replies are found by their hidden marker and edited, or created; closing finds the
open PR, finds-or-creates the closing comment, then closes. Each step is a find-or-create that
is retried as a whole on a 5xx or a dropped connection (a write that reached GitHub before the
error is found on the retry, not made twice), and whatever a failed run left (a branch without a
PR, a PR without a report, a PR left open) is what the next run's find-or-create repairs. The
HTTP layer itself retries only reads and rate limits; never a write.

Every API error becomes a :class:`GitHubAPIError` naming the step and the cause (server error,
rate limit with its reset time, not found, forbidden), which the CLI prints as one line and
exits non-zero with.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kernelopt_bot.errors import KerneloptError
from kernelopt_bot.github.proposal import Proposal

BRANCH_PREFIX = "kernelopt/"
T = TypeVar("T")


def reply_marker(key: str) -> str:
    """The hidden marker of the bot's reply to one command comment (one reply per comment)."""
    return f"<!-- kernelopt:reply {key} -->"


class GitHubAPIError(KerneloptError):
    """A GitHub API call failed; the message says which step and why."""

    exit_code = 1


@dataclass(frozen=True)
class PullInfo:
    number: int
    head_sha: str
    head_ref: str
    head_repo: str
    base_ref: str
    base_repo: str
    state: str = "open"
    base_sha: str = ""

    @property
    def is_fork(self) -> bool:
        return self.head_repo != self.base_repo


@dataclass(frozen=True)
class ProposalRef:
    """Where a proposal ended up. ``action``: created, updated, closed, skipped."""

    action: str
    number: int | None = None
    url: str | None = None
    sha: str | None = None
    note: str = ""


class Gateway(Protocol):
    dry_run: bool

    def pull(self, number: int) -> PullInfo: ...
    def changed_files(self, number: int, base_sha: str = "", head_sha: str = "") -> list[str] | None: ...
    def permission(self, login: str) -> str: ...
    def default_branch(self) -> str: ...
    def branch_sha(self, branch: str) -> str | None: ...
    def read_file(self, path: str, ref: str) -> str | None: ...
    def react(self, number: int, comment_id: int, content: str) -> None: ...
    def reply(self, number: int, body: str, key: str) -> str: ...
    def upsert_sticky(self, number: int, marker: str, body: str) -> str: ...
    def find_sticky(self, number: int, marker: str) -> str | None: ...
    def find_proposal(self, branch: str) -> ProposalRef | None: ...
    def open_proposals(self) -> int: ...
    def publish_proposal(self, proposal: Proposal, *, max_open: int) -> ProposalRef: ...
    def close_proposal(self, branch: str, comment: str) -> ProposalRef | None: ...
    def commit_files(self, branch: str, files: dict[str, str | None], message: str) -> str: ...


def _describe(exc: Exception) -> str:
    from github import GithubException, RateLimitExceededException, UnknownObjectException

    if isinstance(exc, RateLimitExceededException):
        reset = (exc.headers or {}).get("x-ratelimit-reset") or (exc.headers or {}).get("X-RateLimit-Reset")
        when = ""
        if reset and str(reset).isdigit():
            when = " (resets at " + dt.datetime.fromtimestamp(int(reset), dt.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC") + ")"
        return f"GitHub API rate limit exceeded (403){when}"
    if isinstance(exc, UnknownObjectException):
        return "not found (404): check GITHUB_REPOSITORY and that the token can see the repository"
    if isinstance(exc, GithubException):
        msg = ""
        if isinstance(exc.data, dict):
            msg = str(exc.data.get("message") or "")
        status = exc.status
        if status and status >= 500:
            return f"GitHub server error ({status}{': ' + msg if msg else ''}); try again later"
        if status == 403:
            return f"forbidden (403{': ' + msg if msg else ''}): the token lacks a permission this step needs"
        if status == 401:
            return "bad credentials (401): check GITHUB_TOKEN"
        return f"HTTP {status}{': ' + msg if msg else ''}"
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def api_step(step: str, after: str = "") -> Iterator[None]:
    """Turn any API failure inside into one clear :class:`GitHubAPIError`."""
    from github import GithubException

    try:
        yield
    except GitHubAPIError:
        raise
    except (GithubException, OSError) as exc:
        raise GitHubAPIError(f"GitHub API: could not {step}: {_describe(exc)}{after}") from exc
    except Exception as exc:
        if type(exc).__module__.startswith(("urllib3", "requests")):
            raise GitHubAPIError(f"GitHub API: could not {step}: {type(exc).__name__}: {exc}{after}") from exc
        raise


def connect(token: str, repository: str, api_url: str | None = None, *, retries: int = 3,
            throttle: bool = True) -> Any:
    """A PyGithub repository handle. ``retries``/``throttle`` exist so tests can run fast."""
    from github import Auth, Github, GithubRetry

    kwargs: dict[str, Any] = {}
    if api_url:
        kwargs["base_url"] = api_url.rstrip("/")
    if not throttle:
        kwargs.update(seconds_between_requests=None, seconds_between_writes=None)
    retry: Any = None
    if retries:
        try:  # a rate limit that resets in an hour fails now instead of sleeping the job away
            retry = GithubRetry(total=retries, backoff_factor=1.0, max_rate_limit_wait=60, status_forcelist=[],
                                allowed_methods=frozenset({"GET", "HEAD"}))
        except TypeError:  # PyGithub before max_rate_limit_wait
            retry = GithubRetry(total=retries, backoff_factor=1.0, status_forcelist=[],
                                allowed_methods=frozenset({"GET", "HEAD"}))
    gh = Github(auth=Auth.Token(token), retry=retry, timeout=30, **kwargs)
    with api_step(f"read repository {repository}"):
        return gh.get_repo(repository)


class GitHubGateway:
    """The real thing: PyGithub on one repository."""

    dry_run = False

    def __init__(self, repo: Any, bot_login: str | None = None, *, retries: int = 3, backoff: float = 1.0) -> None:
        self.repo = repo
        self.retries = max(0, retries)
        self.backoff = backoff
        self.owner = repo.full_name.split("/", 1)[0]
        # Whose comments may be the sticky report: bots (GITHUB_TOKEN, Apps) and, with a personal
        # token, that account. Anyone can paste the marker into a comment; we never edit theirs.
        self.bot_login = bot_login

    def _retried(self, step: str, fn: Callable[[], T], after: str = "") -> T:
        """Run one idempotent find-or-create step; again on a 5xx or a dropped connection."""
        from github import GithubException

        attempt = 0
        while True:
            try:
                with api_step(step, after):
                    return fn()
            except GitHubAPIError as exc:
                cause = exc.__cause__
                transient = (isinstance(cause, GithubException) and (cause.status or 0) >= 500) or (
                    cause is not None and not isinstance(cause, GithubException))
                if not transient or attempt >= self.retries:
                    raise
                attempt += 1
                time.sleep(self.backoff * 2 ** (attempt - 1))

    # --- reads ---------------------------------------------------------------------------------
    def pull(self, number: int) -> PullInfo:
        def read() -> PullInfo:
            pr = self.repo.get_pull(number)
            head_repo = pr.head.repo.full_name if pr.head.repo is not None else "(deleted fork)"
            return PullInfo(number=pr.number, head_sha=pr.head.sha, head_ref=pr.head.ref, head_repo=head_repo,
                            base_ref=pr.base.ref, base_repo=self.repo.full_name, state=pr.state,
                            base_sha=str(pr.base.sha or ""))

        return self._retried(f"read pull request #{number}", read)

    def changed_files(self, number: int, base_sha: str = "", head_sha: str = "") -> list[str]:
        with api_step(f"list the files of pull request #{number}"):
            pr = self.repo.get_pull(number)
            names: list[str] = []
            for f in pr.get_files():
                names.append(f.filename)
                prev = getattr(f, "previous_filename", None)
                if prev:
                    names.append(prev)
            return names

    def permission(self, login: str) -> str:
        with api_step(f"read the permission of {login}"):
            return str(self.repo.get_collaborator_permission(login))

    def default_branch(self) -> str:
        return str(self.repo.default_branch)

    def branch_sha(self, branch: str) -> str | None:
        from github import GithubException

        with api_step(f"read branch {branch}"):
            try:
                return str(self.repo.get_branch(branch).commit.sha)
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise

    def read_file(self, path: str, ref: str) -> str | None:
        from github import GithubException

        with api_step(f"read {path} at {ref}"):
            try:
                content = self.repo.get_contents(path, ref=ref)
            except GithubException as exc:
                # "Not Found", or "No commit found for the ref ..." when the branch does not exist yet
                if exc.status == 404:
                    return None
                raise
            if isinstance(content, list):
                return None
            return base64.b64decode(content.content or "").decode("utf-8")

    # --- comments and reactions ------------------------------------------------------------------
    def react(self, number: int, comment_id: int, content: str) -> None:
        # GitHub answers an existing reaction of the same user and kind with 200: a retry adds nothing.
        self._retried(f"add a {content} reaction to comment {comment_id}",
                      lambda: self.repo.get_issue(number).get_comment(comment_id).create_reaction(content))

    def reply(self, number: int, body: str, key: str) -> str:
        """The bot's one reply to command comment ``key``: edited on a re-run, never posted twice."""
        marker = reply_marker(key)
        return self.upsert_sticky(number, marker, f"{marker}\n{body}")

    def _find_comment(self, number: int, marker: str) -> Any:
        issue = self.repo.get_issue(number)
        for c in issue.get_comments():
            user = c.user
            mine = user is not None and (user.type == "Bot" or (self.bot_login and user.login == self.bot_login))
            if mine and (c.body or "").startswith(marker):
                return issue, c
        return issue, None

    def find_sticky(self, number: int, marker: str) -> str | None:
        def find() -> str | None:
            _, c = self._find_comment(number, marker)
            return str(c.html_url) if c is not None else None

        return self._retried(f"read the comments of #{number}", find)

    def upsert_sticky(self, number: int, marker: str, body: str) -> str:
        def upsert() -> str:
            issue, c = self._find_comment(number, marker)
            if c is not None:
                if c.body != body:
                    c.edit(body)
                return str(c.html_url)
            return str(issue.create_comment(body).html_url)

        return self._retried(f"create or update the comment {marker} on #{number}", upsert)

    # --- proposals ---------------------------------------------------------------------------------
    def _open_pull(self, branch: str) -> Any:
        pulls = self.repo.get_pulls(state="open", head=f"{self.owner}:{branch}")
        return next(iter(pulls), None)

    def find_proposal(self, branch: str) -> ProposalRef | None:
        def find() -> ProposalRef | None:
            pr = self._open_pull(branch)
            return ProposalRef("open", pr.number, pr.html_url, pr.head.sha) if pr is not None else None

        return self._retried(f"look for the open PR from {branch}", find)

    def open_proposals(self) -> int:
        """The bot's open proposals: PRs from a ``kernelopt/`` branch of this repository. A fork's
        branch may take any name, and five fork PRs from ``kernelopt/*`` branches held the limit."""
        return self._retried("count open kernelopt PRs", lambda: sum(
            1 for p in self.repo.get_pulls(state="open")
            if p.head.ref.startswith(BRANCH_PREFIX) and p.head.repo is not None
            and p.head.repo.full_name == self.repo.full_name))

    def _commit(self, parent_sha: str, files: dict[str, str | None], message: str, *,
                base_tree: bool = True) -> str:
        from github import InputGitTreeElement

        elements = [
            InputGitTreeElement(path, "100644", "blob", content=content) if content is not None
            else InputGitTreeElement(path, "100644", "blob", sha=None)
            for path, content in sorted(files.items())
        ]
        if parent_sha:
            parent = self.repo.get_git_commit(parent_sha)
            tree = self.repo.create_git_tree(elements, parent.tree) if base_tree else self.repo.create_git_tree(elements)
            return str(self.repo.create_git_commit(message, tree, [parent]).sha)
        tree = self.repo.create_git_tree(elements)
        return str(self.repo.create_git_commit(message, tree, []).sha)

    def _move_ref(self, branch: str, sha: str) -> str:
        from github import GithubException

        try:
            ref = self.repo.get_git_ref(f"heads/{branch}")
        except GithubException as exc:
            if exc.status != 404:
                raise
            self.repo.create_git_ref(f"refs/heads/{branch}", sha)
            return "created"
        ref.edit(sha, force=True)
        return "moved"

    def publish_proposal(self, proposal: Proposal, *, max_open: int) -> ProposalRef:
        br = proposal.branch
        existing = self._retried(f"look for the open PR from {br}", lambda: self._open_pull(br))
        if existing is None and max_open >= 0:
            count = self.open_proposals()
            if count >= max_open:
                return ProposalRef("skipped", note=f"No follow-up PR: {count} kernelopt PRs are open "
                                                   f"(publish.max_open_proposals is {max_open}); close one or "
                                                   "raise the limit.")
        sha = self._retried(f"create the commit for {br}",
                            lambda: self._commit(proposal.parent_sha, proposal.files, proposal.commit_message))
        self._retried(f"move branch {br} to {sha[:12]}", lambda: self._move_ref(br, sha))
        after = f" (branch {br} points at {sha[:12]}; the next run opens or updates its PR)"
        created: list[bool] = []

        def pull_request() -> Any:
            pr = self._open_pull(br)  # found again on a retry: a create that reached GitHub is not repeated
            if pr is not None:
                pr.edit(title=proposal.title, body=proposal.body)
                return pr
            pr = self.repo.create_pull(base=proposal.base, head=br, title=proposal.title, body=proposal.body,
                                       draft=proposal.draft)
            created.append(True)
            return pr

        pr = self._retried(f"open or update the PR from {br} into {proposal.base}", pull_request, after)
        if existing is not None or not created:
            return ProposalRef("updated", pr.number, pr.html_url, sha)
        # Labels and reviewers are niceties: the PR is whole without them.
        note = ""
        try:
            if proposal.labels:
                pr.add_to_labels(*proposal.labels)
            if proposal.reviewers:
                pr.create_review_request(reviewers=list(proposal.reviewers))
        except Exception as exc:  # noqa: BLE001
            note = f"labels/reviewers not set: {_describe(exc)}"
        return ProposalRef("created", pr.number, pr.html_url, sha, note=note)

    def close_proposal(self, branch: str, comment: str) -> ProposalRef | None:
        """Close the open PR from ``branch`` with one closing comment (found, not repeated, on a re-run)."""
        marker = comment.splitlines()[0] if comment else ""

        def close() -> ProposalRef | None:
            pr = self._open_pull(branch)
            if pr is None:
                return None
            _, c = self._find_comment(pr.number, marker) if marker.startswith("<!--") else (None, None)
            if c is None:
                pr.create_issue_comment(comment)
            elif c.body != comment:
                c.edit(comment)
            pr.edit(state="closed")
            return ProposalRef("closed", pr.number, pr.html_url)

        return self._retried(f"close the PR from {branch}", close)

    def commit_files(self, branch: str, files: dict[str, str | None], message: str) -> str:
        """A commit on ``branch`` (created as a root commit if absent) holding ``files``."""
        def write() -> str:
            parent = self.branch_sha(branch) or ""
            sha = self._commit(parent, files, message)
            self._move_ref(branch, sha)
            return sha

        return self._retried(f"write {', '.join(sorted(files))} on {branch}", write)
