"""What the bot does for a pull request and for a ``/kernelopt`` command.

Both end in :func:`publish_pr_results`: one sticky report comment, and a follow-up PR from
``kernelopt/pr-<N>`` when something verified (closed with a comment when a later run verifies
nothing). For a same-repository PR the follow-up is built on the PR's head commit and targets its
branch; for a fork PR it is built on the base branch's head commit as the API reports it and
targets the base branch: a fork's commit is never pushed into the base repository, and the
follow-up adds only ``kernelopt/`` files.

Stages, so that the job running PR code holds no token and the job holding one runs no PR code:

* ``ack`` (commands only): parse; check who asked (bots, non-PRs and users without write
  permission get nothing posted, not even a reaction); then react with eyes and pin the commit:
  the SHA the command names (required on fork PRs, and it must be the head), else the head now.
* ``run``: no GitHub access at all. Checks that the checkout is the pinned (or event) commit,
  reads changed files and the base branch's config from local git, runs, writes a results folder.
* ``publish``: derives the PR, its head, base and fork-ness from the event payload and the API,
  never from the results folder, which it re-validates (:mod:`kernelopt_bot.github.trusted`).

``stage="all"`` runs them in one process (local dry runs and single-job setups); the publish
part still reads the results back through the same validation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.config import KerneloptConfig, llm_change_note, with_base_llm
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.github import checkout
from kernelopt_bot.github.affected import affected_targets
from kernelopt_bot.github.commands import HELP, Command, CommandError, authorize, parse_command
from kernelopt_bot.github.events import IssueCommentEvent, PullRequestEvent
from kernelopt_bot.github.gateway import Gateway, GitHubAPIError, ProposalRef, PullInfo
from kernelopt_bot.github.proposal import (
    Proposal,
    SourceChanges,
    activation_lines,
    merged_packs,
    pack_file,
    pr_branch,
    proposal_files,
    source_changes,
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


class NoGateway:
    """The run stage's gateway: any use is a bug, because the run stage holds no token."""

    dry_run = False

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the run stage has no GitHub access (it asked for {name!r})")


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
        out.append(Failure(
            message=f"target {o.job.name} ({o.job.dtype}) failed: {o.result.error or 'unknown error'}",
            file=ctx.config_path, line=ctx.cfg.target_lines.get(o.job.name),
            detail=o.traceback or o.result.error))
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


def _proposal_base(gw: Gateway, pull: PullInfo, head_sha: str) -> tuple[str, str] | None:
    """(parent commit, target branch) of the follow-up PR; None when the base branch is gone.

    Same repository: the commit that ran, which is already in the repository, into the PR's branch.
    Fork: the base branch's head from the API, into the base branch; the fork's commit stays out.
    """
    if not pull.is_fork:
        return head_sha, pull.head_ref
    parent = gw.branch_sha(pull.base_ref)
    return (parent, pull.base_ref) if parent else None


def publish_pr_results(ctx: BotContext, pull: PullInfo, head_sha: str, outcomes: list[JobOutcome], *,
                       affected: dict[str, str], trigger: str, notes: list[str] | None = None) -> BotOutcome:
    """Publish validated outcomes for ``pull`` (from the API) at ``head_sha`` (the commit that ran)."""
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
    edited = any(o.result.source_edits for o in outcomes if not o.failed)
    base = _proposal_base(gw, pull, head_sha) if (packs or carried or edited) else None
    changes = SourceChanges()
    if base is not None and edited:
        changes = source_changes(outcomes, cfg, lambda path: gw.read_file(path, ref=base[0]))
        notes = [*(notes or []), *changes.problems]
    sources = changes.after
    proposal_error: GitHubAPIError | None = None
    if (packs or carried or edited) and base is None:
        proposal_ref = ProposalRef("skipped", note=f"No follow-up PR: the base branch {pull.base_ref} was not found; "
                                   "the packs and patches are in this workflow run's artifacts.")
    elif packs or carried or sources:
        assert base is not None
        parent, into = base
        files: dict[str, str | None] = {**carried, **proposal_files(packs), **sources}
        edited_names = {o.job.name for o in outcomes if not o.failed and o.result.source_edits}
        verified_rows = [r for r, o in zip(rows, outcomes, strict=True)
                         if o.job.name in packs or (sources and o.job.name in edited_names)]
        names = sorted(set(packs) | {Path(p).stem for p in carried})
        if carried:
            from kernelopt_bot.github.proposal import README_PATH, readme

            files[README_PATH] = readme(names)
        best = max((r for r in verified_rows if r["speedup"] is not None), key=lambda r: r["speedup"], default=None)
        title = f"kernelopt: verified kernels for #{pull.number}"
        if best is not None:
            title += f" ({best['speedup']:.2f}x on {best['name']})"
        body = render("pr_body.md.j2", **base_context(
            verified_rows, pr_number=pull.number, head_sha=head_sha, base_branch=into,
            files=sorted(files), activation=activation_lines(names) if names else "",
            source_diff=changes.diff(), source_notes=changes.problems,
            reproduce=_reproduce([o for o in outcomes if o.job.name in packs or o.job.name in edited_names])))
        proposal = Proposal(
            branch=branch, base=into, parent_sha=parent, files=files, title=title, body=body,
            commit_message=f"kernelopt: {'packs' if not sources else 'kernel configs' if not names else 'packs and kernel configs'}"
                           f" for #{pull.number} at {head_sha[:12]}\n\n" + "\n".join(f"- {p}" for p in sorted(files)),
            draft=cfg.publish.draft, labels=list(cfg.publish.labels), reviewers=list(cfg.publish.reviewers),
            sources=frozenset(sources))
        try:
            proposal_ref = gw.publish_proposal(proposal, max_open=cfg.publish.max_open_proposals)
        except GitHubAPIError as exc:  # the report still goes up, saying so; the job fails after it (below)
            proposal_error = exc
            proposal_ref = ProposalRef("failed", note=f"The follow-up PR could not be opened ({exc}); the packs "
                                       "and patches are in this workflow run's artifacts.")
    elif failures:
        proposal_ref = ProposalRef("kept", note=f"Follow-up PR left as it was: nothing verified, but {len(failures)} "
                                   "target run(s) failed.")
    else:
        why = _nothing_verified_reason(outcomes)
        comment = (f"{PROPOSAL_MARKER}\nClosing: the kernelopt run on #{pull.number} at {head_sha[:12]} "
                   f"verified no kernel replacement ({md(why, 800)}), so there is nothing left to propose. "
                   "A later run that verifies something reopens a proposal from the same branch.")
        # The gateway answers None when no PR from the branch was open (a dry run never knows of one).
        closed = gw.close_proposal(branch, comment)
        if closed is not None and closed.action == "closed":
            proposal_ref = ProposalRef("closed", closed.number, closed.url,
                                       note="No follow-up PR: nothing verified, so the earlier one was closed.")
        else:
            proposal_ref = ProposalRef("none", note="No follow-up PR: nothing verified.")
    proposal_view = {"url": proposal_ref.url if proposal_ref.action in ("created", "updated", "created or updated",
                                                                         "closed") else None,
                     "action": proposal_ref.action, "note": proposal_ref.note}
    comment_body = render("comment.md.j2", **base_context(
        rows, head_sha=head_sha, trigger=trigger, proposal=proposal_view, affected=affected,
        run_url=ctx.run_url, note="", notes=list(notes or [])))
    comment_url = gw.upsert_sticky(pull.number, REPORT_MARKER, comment_body)

    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    links = [("report comment", comment_url)]
    if proposal_view["url"]:
        links.append(("closed follow-up PR" if proposal_ref.action == "closed" else "follow-up PR",
                      proposal_view["url"]))
    summary = render("summary.md.j2", **base_context(
        rows, title=f"PR #{pull.number} at {head_sha[:12]}", links=links,
        note=proposal_ref.note if proposal_ref.note else ""))
    report_path = ctx.out_dir / "report.md"
    report_path.write_text(summary, encoding="utf-8")
    if proposal_error is not None:  # reported and written: now the job fails on it, as on any API error
        raise proposal_error
    return BotOutcome(outputs=_outputs(ctx, rows, proposal_ref, report_path), summary=summary,
                      failures=failures, message=f"reported on #{pull.number}: {comment_url}")


def _checked(ctx: BotContext, results_dir: Path) -> list[JobOutcome]:
    """The run stage's results, re-validated. Source replacements from a run of PR code are refused."""
    return load_outcomes([results_dir], cfg=ctx.cfg, allow_source=False)


def _llm_notes(ctx: BotContext, base_ref: str, head_sha: str) -> list[str]:
    """A note when the PR changes the llm section; both files read through the API (or the dry run)."""
    gw = ctx.gateway
    note = llm_change_note(gw.read_file(ctx.config_path, ref=base_ref), gw.read_file(ctx.config_path, ref=head_sha),
                           ctx.config_path)
    return [note] if note else []


def _base_config_from_git(ctx: BotContext, base_sha: str) -> str | None:
    """The base commit's config text from the local checkout (the run stage has no API access)."""
    if not checkout.has_commit(ctx.repo_root, base_sha):
        raise BadInputError(f"the base commit {base_sha[:12] or '(none)'} is not in the checkout at {ctx.repo_root}: "
                            "check out with fetch-depth: 0 (the base branch's config decides where the LLM key goes)")
    return checkout.file_at(ctx.repo_root, base_sha, ctx.config_path)


def _nothing(message: str, title: str) -> BotOutcome:
    return BotOutcome(message=message, summary=render("summary.md.j2", **base_context(
        [], title=title, links=[], note=message)),
        outputs={"speedup": "", "verified-kernels": "0", "pr-url": "", "report-path": ""})


# --- pull_request ---------------------------------------------------------------------------------


def run_pull_request(ctx: BotContext, ev: PullRequestEvent, *, stage: str = "all",
                     results: Path | None = None) -> BotOutcome:
    if ev.action not in PR_ACTIONS:
        return BotOutcome(message=f"pull_request {ev.action}: nothing to do", summary="")
    if ev.is_fork:
        return _nothing(f"PR #{ev.number} comes from a fork ({ev.head_repo}); fork PRs run only through a "
                        "`/kernelopt run sha=<commit>` comment from a maintainer", f"PR #{ev.number}")
    if stage == "ack":
        raise BadInputError("--stage ack is for /kernelopt commands; a pull_request has run and publish stages")
    if stage == "publish":
        return _publish_pull_request(ctx, ev, results or ctx.results_dir)
    if stage == "run":
        local = checkout.head_sha(ctx.repo_root)
        if local != ev.head_sha:
            raise BadInputError(f"the checkout at {ctx.repo_root} is at {local or 'no git commit'}, not the PR head "
                                f"{ev.head_sha}; check out the event's head SHA")
        changed = checkout.changed_files(ctx.repo_root, ev.base_sha, ev.head_sha)
        base_text = _base_config_from_git(ctx, ev.base_sha)
    else:
        changed = ctx.gateway.changed_files(ev.number, ev.base_sha, ev.head_sha)
        base_text = ctx.gateway.read_file(ctx.config_path, ref=ev.base_sha or ev.base_ref)
    if changed is None:
        affected = {t.name: "changed files unknown (no git history)" for t in ctx.cfg.active_targets()}
    else:
        affected = affected_targets(ctx.cfg, changed, ctx.repo_root, ctx.config_path)
    if not affected:
        note = f"no target is affected by the {len(changed or [])} changed file(s) of PR #{ev.number}"
        ctx.log(note)
        return _nothing(note, f"PR #{ev.number} at {ev.head_sha[:12]}")
    run_cfg = with_base_llm(ctx.cfg, base_text, f"{ctx.config_path} at the base commit")
    targets = [t for t in run_cfg.active_targets() if t.name in affected]
    run_jobs(ctx.runner, make_jobs(run_cfg, targets), ctx.results_dir, log=ctx.log)
    if stage == "run":
        return BotOutcome(outputs={"status": "ran"}, message=f"run stage: {len(targets)} target(s) ran")
    return _publish_pull_request(ctx, ev, ctx.results_dir, affected=affected)


def pull_request_trigger(action: str, number: int) -> str:
    """What started a pull_request run, in words: "Triggered by <this>." in the report."""
    return {
        "opened": f"PR #{number} being opened",
        "synchronize": f"a push to PR #{number}",
        "reopened": f"PR #{number} being reopened",
        "ready_for_review": f"PR #{number} being marked ready for review",
    }.get(action, f"a pull_request event ({action}) on #{number}")


def _publish_pull_request(ctx: BotContext, ev: PullRequestEvent, results_dir: Path, *,
                          affected: dict[str, str] | None = None) -> BotOutcome:
    pull = ctx.gateway.pull(ev.number)
    if pull.is_fork:
        return _nothing(f"PR #{ev.number} comes from a fork according to the API; nothing is published for it "
                        "without a maintainer's command", f"PR #{ev.number}")
    if not ctx.gateway.dry_run and pull.head_sha != ev.head_sha:
        return _nothing(f"PR #{ev.number} moved on to {pull.head_sha[:12]} since {ev.head_sha[:12]} ran; the run for "
                        "the new head publishes", f"PR #{ev.number} at {ev.head_sha[:12]}")
    outcomes = _checked(ctx, results_dir)
    if not outcomes:
        return _nothing(f"no results to publish for PR #{ev.number}", f"PR #{ev.number} at {ev.head_sha[:12]}")
    return publish_pr_results(ctx, pull, ev.head_sha, outcomes, affected=affected or {},
                              trigger=pull_request_trigger(ev.action, ev.number),
                              notes=_llm_notes(ctx, pull.base_sha or pull.base_ref, ev.head_sha))


# --- issue_comment --------------------------------------------------------------------------------


@dataclass
class Ack:
    """The ``ack`` stage's verdict. Only ``kind == "run"`` goes on to the run stage."""

    kind: str  # ignored, refused, replied, run
    reason: str = ""
    command: Command | None = None
    pull: PullInfo | None = None
    sha: str = ""

    def outputs(self) -> dict[str, str]:
        return {
            "run": "true" if self.kind == "run" else "false",
            "sha": self.sha,
            "pr": str(self.pull.number) if self.pull else "",
            "fork": "true" if self.pull and self.pull.is_fork else "false",
            "base-sha": self.pull.base_sha if self.pull and self.kind == "run" else "",
        }


def _reply(gw: Gateway, ev: IssueCommentEvent, text: str) -> None:
    """The bot's one reply to this comment (found and edited on a re-run). Only for authorized users."""
    quote = f"> {md(ev.body.strip().splitlines()[0] if ev.body.strip() else '', 200)}\n\n"
    gw.reply(ev.number, f"{quote}{md('@' + ev.login, 61)} {text}", key=str(ev.comment_id))


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
    # Who asked comes first: someone without write access gets nothing posted, not even a reaction.
    decision = authorize(on_pull_request=True, from_bot=False, action="created", permission=gw.permission(ev.login))
    if not decision.allowed:
        return Ack("refused", decision.reason)
    gw.react(ev.number, ev.comment_id, "eyes")
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
    refusal = pin_refusal(cmd, pull)
    if refusal:
        _reply(gw, ev, f"not run: {refusal}")
        gw.react(ev.number, ev.comment_id, "confused")
        return Ack("refused", refusal, cmd, pull)
    sha = cmd.sha or pull.head_sha
    ctx.log(f"/kernelopt run on #{ev.number}: pinned to {sha}")
    return Ack("run", "", cmd, pull, sha)


def pin_refusal(cmd: Command, pull: PullInfo) -> str | None:
    """Why a run command must not run, or None. The commit that runs is the one the maintainer meant.

    A fork's author can push between the comment and the moment the bot reads the PR, and GitHub
    records no push time the author cannot forge (commit dates are theirs to write), so on a fork
    PR the command must name the commit: the maintainer names what they reviewed and only that
    runs. A named SHA must be the head when the bot reads it (that is the commit the workflow
    checks out and the one a report is about). A same-repository PR is pushed by people with write
    access, whose pushes already run through the pull_request workflow, so there the head at ack
    time is run when no SHA is named.
    """
    if pull.state != "open":
        return "the pull request is not open."
    if cmd.sha is None and pull.is_fork:
        return ("this PR comes from a fork, so the command must name the commit to run: "
                "`/kernelopt run sha=<the full 40-character SHA of the commit you reviewed>`.")
    if cmd.sha is not None and cmd.sha != pull.head_sha:
        return (f"the PR head is {pull.head_sha[:12]}, not the named {cmd.sha[:12]}; review the new head and "
                "name it in a new command.")
    return None


def command_run(ctx: BotContext, ev: IssueCommentEvent, pinned_sha: str, base_text: str | None, *,
                strict_checkout: bool) -> dict[str, Any]:
    """Run stage: the checkout must be the pinned commit; run; write the results folder. No API."""
    cmd = parse_command(ev.body)
    if cmd is None or cmd.verb != "run":
        raise CommandError("the comment holds no /kernelopt run command")
    local = checkout.head_sha(ctx.repo_root)
    if (local is not None or strict_checkout) and local != pinned_sha:
        raise BadInputError(f"the checkout is at {(local or 'no git commit')[:12]}, not at the commanded "
                            f"{pinned_sha[:12]}; only the pinned commit is run")
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    run_cfg = with_base_llm(ctx.cfg, base_text, f"{ctx.config_path} at the base commit")
    names = set(cmd.targets)
    targets = [t for t in run_cfg.targets if t.name in names] if names else run_cfg.active_targets()
    run_jobs(ctx.runner, make_jobs(run_cfg, targets, budget=cmd.budget, gamma=cmd.gamma), ctx.results_dir,
             log=ctx.log)
    return {"status": "ran", "targets": sorted(t.name for t in targets)}


def command_publish(ctx: BotContext, ev: IssueCommentEvent, results_dir: Path, pinned_sha: str) -> BotOutcome:
    """Publish stage: the PR from the API, the commit from the ack stage, results re-validated."""
    gw = ctx.gateway
    cmd = parse_command(ev.body)
    if cmd is None or cmd.verb != "run":
        raise CommandError("the comment holds no /kernelopt run command")
    pull = gw.pull(ev.number)
    outcomes = _checked(ctx, results_dir)
    if cmd.targets:
        outcomes = [o for o in outcomes if o.job.name in cmd.targets]
    if not outcomes:
        _reply(gw, ev, "the run produced no results (see the workflow log).")
        gw.react(ev.number, ev.comment_id, "confused")
        return BotOutcome(exit_code=1, message=f"no results in {results_dir}")
    notes = _llm_notes(ctx, pull.base_sha or pull.base_ref, pinned_sha)
    if pull.head_sha != pinned_sha:
        notes.append(f"The PR head has moved to {pull.head_sha[:12]} since the command; this report is for "
                     f"{pinned_sha[:12]}, the commit the command ran.")
    try:
        outcome = publish_pr_results(ctx, pull, pinned_sha, outcomes,
                                     affected={o.job.name: "named in the command" for o in outcomes},
                                     trigger=f"/kernelopt run by {ev.login}", notes=notes)
    except Exception:
        try:
            gw.react(ev.number, ev.comment_id, "confused")
        except Exception as exc:  # noqa: BLE001 - the original error is the one to report
            ctx.log(f"could not add the confused reaction: {exc}")
        raise
    all_failed = all(o.failed for o in outcomes)
    done = (f"ran {len(outcomes)} target run(s) at {pinned_sha[:12]}: {outcome.outputs['verified-kernels']} "
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
                      pinned_sha: str | None = None, base_sha: str | None = None,
                      results: Path | None = None) -> BotOutcome:
    if stage in ("all", "ack"):
        ack = command_ack(ctx, ev)
        ctx.log(f"command: {ack.kind}" + (f" ({ack.reason})" if ack.reason else ""))
        if stage == "ack" or ack.kind != "run":
            return BotOutcome(outputs=ack.outputs(), message=f"{ack.kind}: {ack.reason}".rstrip(": "))
        assert ack.pull is not None
        pinned_sha = ack.sha
        base_text = ctx.gateway.read_file(ctx.config_path, ref=ack.pull.base_sha or ack.pull.base_ref)
        command_run(ctx, ev, pinned_sha, base_text, strict_checkout=False)
        return command_publish(ctx, ev, ctx.results_dir, pinned_sha)
    if not pinned_sha or not checkout.SHA_RE.match(pinned_sha):
        raise BadInputError(f"the {stage} stage needs --pinned-sha (the 40-character SHA the ack stage pinned)")
    if stage == "run":
        if not base_sha:
            raise BadInputError("the run stage needs --base-sha (the base commit the ack stage read): the base "
                                "branch's config decides where the LLM key goes")
        context = command_run(ctx, ev, pinned_sha, _base_config_from_git(ctx, base_sha), strict_checkout=True)
        return BotOutcome(outputs={"status": context["status"]}, message=f"run stage: {context['status']}")
    return command_publish(ctx, ev, results or ctx.results_dir, pinned_sha)
