"""``/kernelopt`` commands: grammar, who may command, reactions, replies, and pinning fork PRs."""

from __future__ import annotations

import pytest

from kernelopt_bot.github.commands import Command, CommandError, authorize, parse_command
from tests.github.conftest import GH, Harness
from tests.github.fakes import FakeRunner


@pytest.mark.parametrize(("body", "expected"), [
    ("/kernelopt run", Command("run")),
    ("/kernelopt run mlp attn --budget 8 --gamma 1.05", Command("run", ("mlp", "attn"), 8, 1.05)),
    ("/kernelopt run --budget=3 'mlp'", Command("run", ("mlp",), 3)),
    ("/kernelopt run mlp sha=" + "A" * 40, Command("run", ("mlp",), sha="a" * 40)),
    ("/kernelopt run --sha " + "0" * 40, Command("run", sha="0" * 40)),
    ("looks good\n  /kernelopt status\nthanks", Command("status")),
    ("/kernelopt help", Command("help")),
    ("/kernelopt", Command("help")),
    ("nothing for the bot", None),
    ("/kerneloptimize run", None),
])
def test_parse(body: str, expected: Command | None) -> None:
    assert parse_command(body) == expected


@pytest.mark.parametrize(("body", "message"), [
    ("/kernelopt run; rm -rf /", "unknown command"),
    ("/kernelopt run mlp; rm -rf /", "is not a target name"),
    ("/kernelopt run $(id)", "is not a target name"),
    ("/kernelopt run --budget -1", "--budget must be a positive whole number"),
    ("/kernelopt run --gamma 0.5", "--gamma must be between"),
    ("/kernelopt run --gamma nan", "--gamma must be between"),
    ("/kernelopt run --evil 1", "unknown option"),
    ("/kernelopt deploy", "unknown command"),
    ("/kernelopt status now", "takes no arguments"),
    ("/kernelopt run 'unterminated", "cannot read the command"),
    ("/kernelopt run --budget", "--budget needs a value"),
    ("/kernelopt run sha=abc1234", "full 40-character"),
])
def test_parse_errors(body: str, message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("$", r"\$")):
        parse_command(body)


def test_authorize_policy() -> None:
    base = {"on_pull_request": True, "from_bot": False, "action": "created"}
    assert authorize(**base, permission="write").allowed
    assert authorize(**base, permission="admin").allowed
    assert not authorize(**base, permission="read").allowed
    assert not authorize(**base, permission="none").allowed
    assert authorize(**{**base, "from_bot": True}, permission="admin").silent
    assert authorize(**{**base, "on_pull_request": False}, permission="admin").silent
    assert authorize(**{**base, "action": "edited"}, permission="admin").silent


def _command(h: Harness, gh: GH, body: str, login: str = "alice", user_type: str = "User",
             on_pr: bool = True) -> tuple[int, object]:
    cid = gh.state.add_comment(gh.pr, body, user={"login": login, "id": 5, "type": user_type})
    patch = {"issue__number": gh.pr, "comment__id": cid, "comment__body": body, "comment__user__login": login,
             "comment__user__type": user_type}
    if not on_pr:
        patch["issue__pull_request"] = None
    return cid, h.event("issue_comment", **patch)


def test_read_only_user_gets_nothing_posted(harness: Harness, gh: GH, repo_dir, fake_runner: FakeRunner) -> None:
    """Permission comes before any reaction or reply: an unauthorized comment leaves no trace."""
    harness.use_server(gh)
    for body in ("/kernelopt run", "/kernelopt run --gamma 0.2 <b>@everyone</b>", "/kernelopt help"):
        cid, ev = _command(harness, gh, body, login="mallory")
        run = harness.bot("issue_comment", ev, repo_dir)
        assert run.code == 0, run.text
        assert run.outputs["run"] == "false"
        assert cid not in gh.state.reactions
    assert fake_runner.calls == []
    assert gh.server.requests("POST") == [] and gh.server.requests("PATCH") == []
    assert all(c["user"]["login"] == "mallory" for c in gh.state.comments_on(gh.pr))
    assert gh.server.requests("GET", "/collaborators/mallory/permission")


def test_bot_comments_are_ignored(harness: Harness, gh: GH, repo_dir, fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    for login, kind in (("renovate[bot]", "User"), ("helper", "Bot")):
        cid, ev = _command(harness, gh, "/kernelopt run", login=login, user_type=kind)
        run = harness.bot("issue_comment", ev, repo_dir)
        assert run.code == 0
        assert cid not in gh.state.reactions
    assert fake_runner.calls == [] and gh.server.requests("POST") == []
    assert not gh.server.requests("GET", "/permission")


def test_commands_on_issues_are_ignored(harness: Harness, gh: GH, repo_dir, fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    cid, ev = _command(harness, gh, "/kernelopt run", on_pr=False)
    assert harness.bot("issue_comment", ev, repo_dir).code == 0
    assert cid not in gh.state.reactions and fake_runner.calls == []


def test_run_command_runs_named_targets_and_reports(harness: Harness, gh: GH, repo_dir,
                                                    fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    cid, ev = _command(harness, gh, "/kernelopt run mlp --budget 4 --gamma 1.1")
    run = harness.bot("issue_comment", ev, repo_dir, "--permission", "none")  # ignored outside dry runs
    assert run.code == 0, run.text
    assert fake_runner.calls == ["mlp.fp32", "mlp.bf16"]
    assert gh.state.reactions[cid] == ["eyes", "rocket"]
    bodies = [c["body"] for c in gh.state.comments_on(gh.pr) if c["id"] != cid]
    assert any(b.startswith("<!-- kernelopt:report -->") for b in bodies)
    assert any("ran 2 target run(s)" in b and "follow-up PR:" in b for b in bodies)
    assert len(gh.state.pulls_from("kernelopt/pr-1")) == 1
    assert "kernelopt/packs/mlp.json" in gh.state.files_at("kernelopt/pr-1")


def test_unknown_target_gets_a_reply(harness: Harness, gh: GH, repo_dir, fake_runner: FakeRunner) -> None:
    harness.use_server(gh)
    cid, ev = _command(harness, gh, "/kernelopt run nosuch")
    assert harness.bot("issue_comment", ev, repo_dir).code == 0
    assert gh.state.reactions[cid] == ["eyes", "confused"] and fake_runner.calls == []
    assert any("unknown target(s): nosuch" in c["body"] for c in gh.state.comments_on(gh.pr))


def test_bad_command_from_maintainer_gets_help(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    cid, ev = _command(harness, gh, "/kernelopt run --gamma 0.2")
    assert harness.bot("issue_comment", ev, repo_dir).code == 0
    assert gh.state.reactions[cid] == ["eyes", "confused"]
    reply = next(c for c in gh.state.comments_on(gh.pr) if c["id"] != cid)["body"]
    assert "--gamma must be between" in reply and "/kernelopt status" in reply


def test_help_and_status(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    cid, ev = _command(harness, gh, "/kernelopt help")
    assert harness.bot("issue_comment", ev, repo_dir).code == 0
    assert gh.state.reactions[cid] == ["eyes", "rocket"]
    cid2, ev2 = _command(harness, gh, "/kernelopt status")
    assert harness.bot("issue_comment", ev2, repo_dir).code == 0
    assert gh.state.reactions[cid2] == ["eyes", "rocket"]
    assert any("last report: none yet" in c["body"] for c in gh.state.comments_on(gh.pr))


def test_run_stage_needs_the_pin(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    _, ev = _command(harness, gh, "/kernelopt run")
    run = harness.bot("issue_comment", ev, repo_dir, "--stage", "run")
    assert run.code == 2 and "--pinned-sha" in run.text


def test_hostile_comment_text_is_escaped_in_the_reply(harness: Harness, gh: GH, repo_dir) -> None:
    harness.use_server(gh)
    body = "/kernelopt run <img src=x onerror=alert(1)> @everyone"
    cid, ev = _command(harness, gh, body)
    assert harness.bot("issue_comment", ev, repo_dir).code == 0
    reply = next(c["body"] for c in gh.state.comments_on(gh.pr) if c["id"] != cid)
    assert "<img" not in reply and "@everyone" not in reply
    assert "&lt;img" in reply
