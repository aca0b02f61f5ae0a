"""``/kernelopt`` commands in PR comments, parsed into a typed :class:`Command`.

The comment body is attacker-controlled text. It is tokenized with :mod:`shlex` (quotes work as
people expect) and checked token by token against a closed grammar; it never reaches a shell,
and target names must be names from the config. Who may run commands is decided here too
(:func:`authorize`): only on PRs, never bots, only write/admin permission as the API reports it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Literal

PREFIX = "/kernelopt"
ALLOWED_PERMISSIONS = ("admin", "write", "maintain")
TARGET_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

SHA_RE = re.compile(r"^[0-9a-f]{40}$")

HELP = """\
`/kernelopt run [TARGET ...] [--budget N] [--gamma G] [sha=SHA]`: optimize the named targets \
(default: all) at the commit `sha` names, which must be the PR's head; `--budget` caps candidates \
per target, `--gamma` is the required end-to-end speedup (at least 1.0). On a PR from a fork, `sha` \
(the full 40-character SHA of the commit you reviewed) is required: only that commit runs.
`/kernelopt status`: show the last report and the follow-up PR.
`/kernelopt help`: this text.
Commands are taken from people with write access to the repository, on pull requests only."""


class CommandError(ValueError):
    """The comment addressed the bot but is not a valid command (reply with the reason)."""


@dataclass(frozen=True)
class Command:
    verb: Literal["run", "status", "help"]
    targets: tuple[str, ...] = ()
    budget: int | None = None
    gamma: float | None = None
    sha: str | None = None
    raw: str = field(default="", compare=False)


def find_command_line(body: str) -> str | None:
    """The first line that starts with ``/kernelopt`` (after whitespace), or None."""
    for line in body.splitlines():
        stripped = line.strip()
        if stripped == PREFIX or stripped.startswith(PREFIX + " ") or stripped.startswith(PREFIX + "\t"):
            return stripped
    return None


def parse_command(body: str) -> Command | None:
    """None when the comment is not for the bot; :class:`CommandError` when it is but is wrong."""
    line = find_command_line(body)
    if line is None:
        return None
    if len(line) > 1000:
        raise CommandError("the command line is too long")
    try:
        tokens = shlex.split(line, comments=False, posix=True)
    except ValueError as exc:
        raise CommandError(f"cannot read the command: {exc}") from exc
    args = tokens[1:]
    if not args:
        return Command("help", raw=line)
    verb, rest = args[0], args[1:]
    if verb in ("help", "status"):
        if rest:
            raise CommandError(f"'{verb}' takes no arguments")
        return Command(verb, raw=line)  # type: ignore[arg-type]
    if verb != "run":
        raise CommandError(f"unknown command {verb!r} (try: run, status, help)")
    targets: list[str] = []
    budget: int | None = None
    gamma: float | None = None
    sha: str | None = None
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok.startswith("sha="):
            tok = "--" + tok
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            if not eq:
                if i + 1 >= len(rest):
                    raise CommandError(f"{name} needs a value")
                value = rest[i + 1]
                i += 1
            if name == "--budget":
                if not re.fullmatch(r"[0-9]{1,6}", value) or int(value) < 1:
                    raise CommandError(f"--budget must be a positive whole number, got {value!r}")
                budget = int(value)
            elif name == "--gamma":
                try:
                    gamma = float(value)
                except ValueError:
                    raise CommandError(f"--gamma must be a number, got {value!r}") from None
                if not (1.0 <= gamma <= 10.0):
                    raise CommandError(f"--gamma must be between 1.0 and 10, got {value!r}")
            elif name == "--sha":
                value = value.lower()
                if not SHA_RE.match(value):
                    raise CommandError("sha= must be a full 40-character lowercase commit SHA")
                sha = value
            else:
                raise CommandError(f"unknown option {name!r} (options: --budget, --gamma, sha=)")
        else:
            if not TARGET_TOKEN.match(tok):
                raise CommandError(f"{tok!r} is not a target name")
            if tok not in targets:
                targets.append(tok)
        i += 1
    return Command("run", tuple(targets), budget, gamma, sha, raw=line)


@dataclass(frozen=True)
class Decision:
    """Whether a comment is acted on. ``silent`` refusals (bots, non-PRs) get no reply at all."""

    allowed: bool
    reason: str = ""
    silent: bool = False


def authorize(*, on_pull_request: bool, from_bot: bool, action: str, permission: str | None) -> Decision:
    """The command policy. ``permission`` is asked of the API only when the cheap checks pass."""
    if action != "created":
        return Decision(False, f"comment was {action}, not created", silent=True)
    if from_bot:
        return Decision(False, "comments from bots are ignored", silent=True)
    if not on_pull_request:
        return Decision(False, "commands work on pull requests only", silent=True)
    if permission is None:
        return Decision(False, "permission not checked")
    if permission not in ALLOWED_PERMISSIONS:
        return Decision(False, f"commands need write access to the repository (yours: {permission})")
    return Decision(True)
