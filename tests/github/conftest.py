"""Fixtures: a model repository on disk, the same repository on the loopback GitHub server, and a
way to run ``kernelopt bot`` / ``kernelopt sweep`` in-process with the Actions environment files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from kernelopt_bot.github import cli as bot_cli
from tests.github.fakes import FakeRunner
from tests.github.ghserver import GitHubServer, State

EVENTS = Path(__file__).parent / "fixtures" / "events"

CONFIG = """\
targets:
  - name: mlp
    entry: models/mlp.py
    dtypes: [fp32, bf16]
    paths: ["models/**"]
  - name: attn
    entry: pkg.a:factory
  - name: other
    entry: other/net.py
publish:
  draft: true
  labels: [performance]
  reviewers: [carol]
  max_open_proposals: 5
"""

FILES = {
    ".kernelopt.yml": CONFIG,
    "models/mlp.py": "import torch\n\nclass Model(torch.nn.Module):\n    pass\n",
    "pkg/__init__.py": "",
    "pkg/a.py": "from pkg import b\n\n\ndef factory():\n    return b.build()\n",
    "pkg/b.py": "def build():\n    return None\n",
    "other/net.py": "import os\n",
}


def write_repo(root: Path, files: dict[str, str] | None = None) -> Path:
    for rel, text in (files or FILES).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    return write_repo(tmp_path / "repo")


@dataclass
class GH:
    server: GitHubServer
    state: State
    pr: int
    head: str


@pytest.fixture
def gh() -> Iterator[GH]:
    state = State()
    state.commit_files("main", FILES, "initial")
    head = state.commit_files("feature", {"pkg/b.py": "def build():\n    return 1\n"}, "change b")
    pr = state.open_pull("feature", "main", title="Speed up attn")
    state.pull_files[pr] = ["pkg/b.py"]
    state.permissions.update({"alice": "write", "mallory": "read", "root": "admin"})
    server = GitHubServer(state).start()
    try:
        yield GH(server, state, pr, head)
    finally:
        server.stop()


@dataclass
class BotRun:
    result: Result
    outputs: dict[str, str]
    summary: str
    out: Path

    @property
    def code(self) -> int:
        return self.result.exit_code

    @property
    def text(self) -> str:
        return self.result.output


class Harness:
    """Runs the click commands with GITHUB_* files in a temp folder and a fake engine."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, runner: FakeRunner) -> None:
        self.tmp = tmp
        self.mp = monkeypatch
        self.runner = runner
        self.n = 0
        monkeypatch.setattr(bot_cli, "RUNNER_FACTORY", lambda root: self.runner)
        for k in ("GITHUB_TOKEN", "GITHUB_API_URL", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_EVENT_PATH",
                  "GITHUB_EVENT_NAME", "GITHUB_RUN_ID", "GITHUB_ACTIONS"):
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("GITHUB_REPOSITORY", "acme/models")
        monkeypatch.setenv("KERNELOPT_GITHUB_RETRIES", "0")
        monkeypatch.setenv("KERNELOPT_GITHUB_THROTTLE", "0")

    def use_server(self, gh: GH) -> None:
        self.mp.setenv("GITHUB_TOKEN", "t")
        self.mp.setenv("GITHUB_API_URL", gh.server.url)

    def event(self, name: str, **patch: Any) -> Path:
        data = json.loads((EVENTS / f"{name}.json").read_text())
        for dotted, value in patch.items():
            cur = data
            parts = dotted.split("__")
            for part in parts[:-1]:
                cur = cur.setdefault(part, {})
            cur[parts[-1]] = value
        self.n += 1
        path = self.tmp / f"event-{self.n}.json"
        path.write_text(json.dumps(data))
        return path

    def invoke(self, command: Any, args: list[str]) -> BotRun:
        self.n += 1
        output = self.tmp / f"output-{self.n}.txt"
        summary = self.tmp / f"summary-{self.n}.md"
        output.write_text("")
        summary.write_text("")
        self.mp.setenv("GITHUB_OUTPUT", str(output))
        self.mp.setenv("GITHUB_STEP_SUMMARY", str(summary))
        result = CliRunner().invoke(command, args, catch_exceptions=False)
        out = self.tmp / "out"
        for i, a in enumerate(args):
            if a == "--out":
                out = Path(args[i + 1])
        return BotRun(result, read_outputs(output), summary.read_text(), out)

    def bot(self, event_name: str, event_path: Path, repo: Path, *extra: str, out: Path | None = None) -> BotRun:
        self.n += 1
        out = out or self.tmp / f"out-{self.n}"
        return self.invoke(bot_cli.bot, ["--event-name", event_name, "--event-path", str(event_path),
                                         "--config", str(repo / ".kernelopt.yml"), "--repo-root", str(repo),
                                         "--out", str(out), *extra])


@pytest.fixture
def fake_runner() -> FakeRunner:
    return FakeRunner()


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_runner: FakeRunner) -> Harness:
    return Harness(tmp_path, monkeypatch, fake_runner)


def git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


@dataclass
class CheckedOutPR:
    """A PR whose head is checked out locally with real git, and known to the loopback server
    under the same SHAs (the base commit is the server's ``main``)."""

    checkout: Path
    base: str
    head: str
    number: int
    files: dict[str, str]


def checked_out_pr(gh: GH, root: Path, head_changes: dict[str, str], *, fork: bool,
                   base_files: dict[str, str] | None = None) -> CheckedOutPR:
    base_files = dict(base_files or FILES)
    write_repo(root, base_files)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    base = git(root, "rev-parse", "HEAD")
    gh.state.add_commit(base, base_files, [])
    gh.state.refs["heads/main"] = base
    write_repo(root, head_changes)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the PR's change")
    head = git(root, "rev-parse", "HEAD")
    files = {**base_files, **head_changes}
    gh.state.add_commit(head, files, [base])
    ref = "fork-work" if fork else "feature-git"
    if not fork:
        gh.state.refs[f"heads/{ref}"] = head
    number = gh.state.open_pull(ref, "main", head_repo="mallory/models" if fork else None, head_sha=head,
                                user="mallory" if fork else "alice")
    gh.state.pull_files[number] = sorted(head_changes)
    return CheckedOutPR(root, base, head, number, files)


def read_outputs(path: str | Path) -> dict[str, str]:
    """Parse a ``$GITHUB_OUTPUT`` file (both ``k=v`` and heredoc records), as the runner reads it."""
    values: dict[str, str] = {}
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            buf = []
            i += 1
            while i < len(lines) and lines[i] != delim:
                buf.append(lines[i])
                i += 1
            values[name] = "\n".join(buf)
        elif "=" in line:
            name, value = line.split("=", 1)
            values[name] = value
        i += 1
    return values
