"""What the bot does for a pull request and for a ``/kernelopt`` command.

Both end in :func:`publish_pr_results`: one sticky report comment, and a follow-up PR from
``kernelopt/pr-<N>`` into the PR's head branch when something verified (closed with a comment
when a later run verifies nothing).

A command runs in three stages that a workflow can put in three jobs, so the job that runs PR
code on the GPU runner holds no write token:

* ``ack``: parse, check who asked (bots, non-PRs and users without write permission are refused),
  react with eyes, and record the PR's head SHA from the API;
* ``run``: refuse if the PR head moved since the ack (a fork could push new code after a
  maintainer looked), else run the pipeline and write a results folder;
* ``publish``: report from the results folder (comment, follow-up PR, reply, rocket/confused).

``stage="all"`` runs the three in one process (same-repo setups and local dry runs).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.config import KerneloptConfig
from kernelopt_bot.github.affected import affected_targets
from kernelopt_bot.github.commands import HELP, Command, CommandError, authorize, parse_command
from kernelopt_bot.github.dryrun import git
from kernelopt_bot.github.events import IssueCommentEvent, PullRequestEvent
from kernelopt_bot.github.gateway import Gateway, ProposalRef, PullInfo
from kernelopt_bot.github.proposal import (
    Proposal,
    activation_lines,
    merged_packs,
    pack_file,
    pr_branch,
    proposal_files,
)
from kernelopt_bot.github.render import (
    PROPOSAL_MARKER,
    REPORT_MARKER,
    base_context,
    md,
    render,
    result_row,
)
from kernelopt_bot.github.runner import JobOutcome, PipelineRunner, load_outcomes, make_jobs, run_jobs

PR_ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review")


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Failure:
    """A problem to annotate: message (escaped when emitted), where, and optional long detail."""

    message: str
    file: str | None = None
    line: int | None = None
    detail: str | None = None


@dataclass
class BotContext:
    cfg: KerneloptConfig
    config_path: str  # relative to repo_root
    repo_root: Path
    out_dir: Path
    gateway: Gateway
    runner: PipelineRunner
    run_url: str = ""
    log: Callable[[str], None] = _stderr

    @property
    def results_dir(self) -> Path:
        return self.out_dir / "results"


@dataclass
class BotOutcome:
    """What a flow leaves for the CLI: step outputs, the job summary, annotations, exit code."""

    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    failures: list[Failure] = field(default_factory=list)
    exit_code: int = 0
    message: str = ""


# --- shared: report and publish results for one PR ---------------------------------------------------


def _failures(ctx: BotContext, outcomes: list[JobOutcome]) -> list[Failure]:
    out = []
    for o in outcomes:
        if not o.failed:
            continue
        tb = o.out_dir / "traceback.txt"
        out.append(Failure(
            message=f"target {o.job.name} ({o.job.dtype}) failed: {o.result.error or 'unknown error'}",
            file=ctx.config_path, line=ctx.cfg.target_lines.get(o.job.name),
            detail=tb.read_text() if tb.is_file() else o.result.error))
    return out


def _nothing_verified_reason(outcomes: list[JobOutcome]) -> str:
    parts = []
    for o in outcomes:
        if o.failed:
            parts.append(f"{o.job.slug}: failed")
            continue
        verdicts = sorted({k.status for k in o.result.kernels if k.status != "accepted"})
        parts.append(f"{o.job.slug}: no kernel passed the gates" + (f" ({', '.join(verdicts)})" if verdicts else ""))
    return "; ".join(parts) or "no target ran"


def _reproduce(outcomes: list[JobOutcome]) -> str:
    lines = []
    for o in outcomes:
        cmd = o.result.reproduce or f"kernelopt optimize {o.job.entry} --dtype {o.job.dtype}"
        lines.append(cmd)
    return "\n".join(dict.fromkeys(lines))


def _outputs(ctx: BotContext, rows: list[dict[str, Any]], proposal: ProposalRef | None,
             report_path: Path) -> dict[str, str]:
    ctx_data = base_context(rows)
    url = proposal.url if proposal and proposal.url and proposal.action in ("created", "updated") else ""
    return {
        "speedup": "" if ctx_data["geomean"] is None else f"{ctx_data['geomean']:.4f}",
        "verified-kernels": str(ctx_data["verified_total"]),
        "pr-url": url or "",
        "report-path": str(report_path),
    }


def publish_pr_results(ctx: BotContext, pull: PullInfo, outcomes: list[JobOutcome], *,
                       affected: dict[str, str], trigger: str) -> BotOutcome:
    cfg, gw = ctx.cfg, ctx.gateway
    rows = [result_row(o.result, why=affected.get(o.job.name, "")) for o in outcomes]
    branch = pr_branch(pull.number)
    packs = merged_packs(outcomes)
    ran = {o.job.name for o in outcomes}
    failures = _failures(ctx, outcomes)

    # Packs of targets this run did not touch stay in the follow-up PR (their kernels did not change).
    existing = gw.find_proposal(branch)
    carried: dict[str, str] = {}
    if existing is not None:
        for t in cfg.active_targets():
            if t.name not in ran:
                text = gw.read_file(pack_file(t.name), ref=branch)
                if text:
                    carried[pack_file(t.name)] = text

    proposal_ref: ProposalRef | None
    if (packs or carried) and pull.is_fork:
        proposal_ref = ProposalRef("skipped", note="this PR comes from a fork, so no follow-up PR can target its "
                                   "branch; the packs are in this workflow run's artifacts")
    elif packs or carried:
        files = {**carried, **proposal_files(packs)}
        verified_rows = [r for r, o in zip(rows, outcomes, strict=True) if o.job.name in packs]
        names = sorted(set(packs) | {Path(p).stem for p in carried})
        if carried:
            from kernelopt_bot.github.proposal import README_PATH, readme

            files[README_PATH] = readme(names)
        best = max((r for r in verified_rows if r["speedup"] is not None), key=lambda r: r["speedup"], default=None)
        title = f"kernelopt: verified kernels for #{pull.number}"
        if best is not None:
            title += f" ({best['speedup']:.2f}x on {best['name']})"
        body = render("pr_body.md.j2", **base_context(
            verified_rows, pr_number=pull.number, head_sha=pull.head_sha, base_branch=pull.head_ref,
            files=sorted(files), activation=activation_lines(names),
            reproduce=_reproduce([o for o in outcomes if o.job.name in packs])))
        proposal = Proposal(
            branch=branch, base=pull.head_ref, parent_sha=pull.head_sha, files=files, title=title, body=body,
            commit_message=f"kernelopt: packs for #{pull.number} at {pull.head_sha[:12]}\n\n"
                           + "\n".join(f"- {p}" for p in sorted(files)),
            draft=cfg.publish.draft, labels=list(cfg.publish.labels), reviewers=list(cfg.publish.reviewers))
        proposal_ref = gw.publish_proposal(proposal, max_open=cfg.publish.max_open_proposals)
    elif failures:
        proposal_ref = ProposalRef("kept", note=f"nothing verified, but {len(failures)} target run(s) failed, so "
                                   "an earlier follow-up PR (if any) is left as it was")
    else:
        why = _nothing_verified_reason(outcomes)
        comment = (f"{PROPOSAL_MARKER}\nClosing: the kernelopt run on #{pull.number} at {pull.head_sha[:12]} "
                   f"verified no kernel replacement ({md(why, 800)}), so there is nothing left to propose. "
                   "A later run that verifies something reopens a proposal from the same branch.")
        closed = gw.close_proposal(branch, comment)
        proposal_ref = ProposalRef("none", note="nothing verified" + (f"; closed {closed.url}" if closed and closed.url
                                                                       else ""))
    proposal_view = {"url": proposal_ref.url if proposal_ref.action in ("created", "updated", "created or updated")
                     else None, "action": proposal_ref.action, "note": proposal_ref.note,
                     "files": None}
    comment_body = render("comment.md.j2", **base_context(
        rows, head_sha=pull.head_sha, trigger=trigger, proposal=proposal_view, affected=affected,
        run_url=ctx.run_url, note=""))
    comment_url = gw.upsert_sticky(pull.number, REPORT_MARKER, comment_body)

    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    links = [("report comment", comment_url)]
    if proposal_view["url"]:
        links.append(("follow-up PR", proposal_view["url"]))
    summary = render("summary.md.j2", **base_context(
        rows, title=f"PR #{pull.number} at {pull.head_sha[:12]}", links=links,
        note=proposal_ref.note if proposal_ref.note else ""))
    report_path = ctx.out_dir / "report.md"
    report_path.write_text(summary, encoding="utf-8")
    return BotOutcome(outputs=_outputs(ctx, rows, proposal_ref, report_path), summary=summary,
                      failures=failures, message=f"reported on #{pull.number}: {comment_url}")


# --- pull_request ---------------------------------------------------------------------------------


def run_pull_request(ctx: BotContext, ev: PullRequestEvent) -> BotOutcome:
    if ev.action not in PR_ACTIONS:
        return BotOutcome(message=f"pull_request {ev.action}: nothing to do", summary="")
    if ev.is_fork:
        note = (f"PR #{ev.number} comes from a fork ({ev.head_repo}); fork PRs run only through a "
                "`/kernelopt run` comment from a maintainer")
        return BotOutcome(message=note, summary=render("summary.md.j2", **base_context(
            [], title=f"PR #{ev.number}", links=[], note=note)))
    pull = PullInfo(number=ev.number, head_sha=ev.head_sha, head_ref=ev.head_ref, head_repo=ev.head_repo,
                    base_ref=ev.base_ref, base_repo=ev.repo.full_name)
    changed = ctx.gateway.changed_files(ev.number, ev.base_sha, ev.head_sha)
    if changed is None:
        affected = {t.name: "changed files unknown (dry run without git history)" for t in ctx.cfg.active_targets()}
    else:
        affected = affected_targets(ctx.cfg, changed, ctx.repo_root, ctx.config_path)
    if not affected:
        note = f"no target is affected by the {len(changed or [])} changed file(s) of PR #{ev.number}"
        ctx.log(note)
        return BotOutcome(message=note, summary=render("summary.md.j2", **base_context(
            [], title=f"PR #{ev.number} at {ev.head_sha[:12]}", links=[], note=note)),
            outputs={"speedup": "", "verified-kernels": "0", "pr-url": "", "report-path": ""})
    targets = [t for t in ctx.cfg.active_targets() if t.name in affected]
    outcomes = run_jobs(ctx.runner, make_jobs(ctx.cfg, targets), ctx.results_dir, log=ctx.log)
    return publish_pr_results(ctx, pull, outcomes, affected=affected, trigger=f"a push to #{ev.number}")


# --- issue_comment --------------------------------------------------------------------------------


@dataclass
class Ack:
    """The ``ack`` stage's verdict. Only ``kind == "run"`` goes on to the run stage."""

    kind: str  # ignored, refused, replied, run
    reason: str = ""
    command: Command | None = None
    pull: PullInfo | None = None

    def outputs(self) -> dict[str, str]:
        return {
            "run": "true" if self.kind == "run" else "false",
            "sha": self.pull.head_sha if self.pull else "",
            "pr": str(self.pull.number) if self.pull else "",
            "fork": "true" if self.pull and self.pull.is_fork else "false",
        }


def _reply(gw: Gateway, ev: IssueCommentEvent, text: str) -> None:
    quote = f"> {md(ev.body.strip().splitlines()[0] if ev.body.strip() else '', 200)}\n\n"
    gw.reply(ev.number, f"{quote}&#64;{md(ev.login, 60)} {text}")


def command_ack(ctx: BotContext, ev: IssueCommentEvent) -> Ack:
    gw = ctx.gateway
    try:
        cmd = parse_command(ev.body)
    except CommandError as exc:
        cmd_error: CommandError | None = exc
        cmd = None
    else:
        cmd_error = None
    if cmd is None and cmd_error is None:
        return Ack("ignored", "no /kernelopt command in the comment")
    cheap = authorize(on_pull_request=ev.on_pull_request, from_bot=ev.from_bot, action=ev.action, permission="write")
    if not cheap.allowed:
        return Ack("ignored", cheap.reason)
    gw.react(ev.number, ev.comment_id, "eyes")
    decision = authorize(on_pull_request=True, from_bot=False, action="created", permission=gw.permission(ev.login))
    if not decision.allowed:
        _reply(gw, ev, f"not run: {md(decision.reason)}.")
        gw.react(ev.number, ev.comment_id, "confused")
        return Ack("refused", decision.reason)
    if cmd_error is not None or cmd is None:
        _reply(gw, ev, f"I could not read that command: {md(cmd_error)}.\n\n{HELP}")
        gw.react(ev.number, ev.comment_id, "confused")
        return Ack("refused", str(cmd_error))
    if cmd.verb == "help":
        _reply(gw, ev, "\n\n" + HELP)
        gw.react(ev.number, ev.comment_id, "rocket")
        return Ack("replied", "help", cmd)
    if cmd.verb == "status":
        sticky = gw.find_sticky(ev.number, REPORT_MARKER)
        proposal = gw.find_proposal(pr_branch(ev.number))
        lines = [f"last report: {sticky or 'none yet'}",
                 f"open follow-up PR: {proposal.url if proposal else 'none'}"]
        _reply(gw, ev, "status:\n\n" + "\n".join(f"- {line}" for line in lines))
        gw.react(ev.number, ev.comment_id, "rocket")
        return Ack("replied", "status", cmd)
    unknown = [t for t in cmd.targets if ctx.cfg.target(t) is None]
    if unknown:
        known = ", ".join(t.name for t in ctx.cfg.targets) or "none"
        _reply(gw, ev, f"unknown target(s): {md(', '.join(unknown))} (configured: {md(known)}).")
        gw.react(ev.number, ev.comment_id, "confused")
        return Ack("refused", "unknown targets", cmd)
    pull = gw.pull(ev.number)
    if pull.state != "open":
        _reply(gw, ev, "not run: the pull request is not open.")
        gw.react(ev.number, ev.comment_id, "confused")
        return Ack("refused", "pull request not open", cmd, pull)
    ctx.log(f"/kernelopt run on #{ev.number}: pinned to head {pull.head_sha}")
    return Ack("run", "", cmd, pull)


def _local_head(root: Path) -> str | None:
    out = git(root, "rev-parse", "HEAD")
    return out.strip() if out else None


def command_run(ctx: BotContext, ev: IssueCommentEvent, pinned_sha: str) -> dict[str, Any]:
    """Run stage: check the pin, run the pipeline, write ``results/context.json``. Never publishes."""
    cmd = parse_command(ev.body)
    if cmd is None or cmd.verb != "run":
        raise CommandError("the comment holds no /kernelopt run command")
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    pull = ctx.gateway.pull(ev.number)
    context: dict[str, Any] = {"pr": ev.number, "pinned_sha": pinned_sha, "pull": asdict(pull),
                               "command": asdict(cmd), "login": ev.login}
    refusal = None
    if pull.head_sha != pinned_sha:
        refusal = (f"the PR head moved from {pinned_sha[:12]} to {pull.head_sha[:12]} after the command was "
                   "given; only the commit a maintainer saw is run. Comment `/kernelopt run` again to run the new head")
    elif pull.state != "open":
        refusal = "the pull request was closed"
    else:
        local = _local_head(ctx.repo_root)
        if local is not None and local != pinned_sha and not ctx.gateway.dry_run:
            refusal = f"the checkout is at {local[:12]}, not at the commanded {pinned_sha[:12]}"
    if refusal:
        context.update(status="refused", reason=refusal)
    else:
        names = set(cmd.targets)
        targets = [t for t in ctx.cfg.targets if t.name in names] if names else ctx.cfg.active_targets()
        run_jobs(ctx.runner, make_jobs(ctx.cfg, targets, budget=cmd.budget, gamma=cmd.gamma), ctx.results_dir,
                 log=ctx.log)
        context.update(status="ran", targets=sorted(t.name for t in targets))
    (ctx.results_dir / "context.json").write_text(json.dumps(context, indent=2) + "\n")
    return context


def command_publish(ctx: BotContext, ev: IssueCommentEvent, results_dir: Path) -> BotOutcome:
    gw = ctx.gateway
    try:
        context = json.loads((results_dir / "context.json").read_text())
    except (OSError, ValueError):
        _reply(gw, ev, "the run produced no results (see the workflow log).")
        gw.react(ev.number, ev.comment_id, "confused")
        return BotOutcome(exit_code=1, message=f"no results in {results_dir}")
    if context.get("status") != "ran":
        reason = str(context.get("reason") or "refused")
        _reply(gw, ev, f"not run: {md(reason, 500)}.")
        gw.react(ev.number, ev.comment_id, "confused")
        return BotOutcome(message=f"refused: {reason}", summary=render("summary.md.j2", **base_context(
            [], title=f"/kernelopt run on #{ev.number}", links=[], note=f"refused: {reason}")),
            outputs={"speedup": "", "verified-kernels": "0", "pr-url": "", "report-path": ""})
    pull = PullInfo(**context["pull"])
    outcomes = [o for o in load_outcomes([results_dir])]
    names = context.get("targets") or []
    try:
        outcome = publish_pr_results(ctx, pull, outcomes, affected={n: "named in the command" for n in names},
                                     trigger=f"/kernelopt run by {ev.login}")
    except Exception:
        try:
            gw.react(ev.number, ev.comment_id, "confused")
        except Exception as exc:  # noqa: BLE001 - the original error is the one to report
            ctx.log(f"could not add the confused reaction: {exc}")
        raise
    all_failed = bool(outcomes) and all(o.failed for o in outcomes)
    done = (f"ran {len(outcomes)} target run(s) at {pull.head_sha[:12]}: {outcome.outputs['verified-kernels']} "
            f"verified kernel(s)")
    if outcome.outputs.get("speedup"):
        done += f", geometric-mean speedup {outcome.outputs['speedup']}x"
    if outcome.outputs.get("pr-url"):
        done += f"; follow-up PR: {outcome.outputs['pr-url']}"
    if outcome.failures:
        done += f"; {len(outcome.failures)} failed (see the report)"
    _reply(gw, ev, done + ".")
    gw.react(ev.number, ev.comment_id, "confused" if all_failed else "rocket")
    return outcome


def run_issue_comment(ctx: BotContext, ev: IssueCommentEvent, *, stage: str = "all",
                      pinned_sha: str | None = None, results: Path | None = None) -> BotOutcome:
    if stage in ("all", "ack"):
        ack = command_ack(ctx, ev)
        ctx.log(f"command: {ack.kind}" + (f" ({ack.reason})" if ack.reason else ""))
        if stage == "ack" or ack.kind != "run":
            return BotOutcome(outputs=ack.outputs(), message=f"{ack.kind}: {ack.reason}".rstrip(": "))
        assert ack.pull is not None
        pinned_sha = ack.pull.head_sha
    if stage in ("all", "run"):
        if not pinned_sha:
            raise CommandError("the run stage needs --pinned-sha (the head SHA recorded by the ack stage)")
        context = command_run(ctx, ev, pinned_sha)
        if stage == "run":
            return BotOutcome(outputs={"status": context["status"]}, message=f"run stage: {context['status']}")
    return command_publish(ctx, ev, results or ctx.results_dir)
