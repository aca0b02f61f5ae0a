"""``kernelopt bot`` and ``kernelopt sweep``: the GitHub front doors as click commands.

The Action and the workflows call these, and so can a person: ``--dry-run --out DIR`` needs no
token or network and writes everything that would be published into DIR. Without ``--dry-run``
the bot publishes through PyGithub with ``GITHUB_TOKEN`` on ``GITHUB_REPOSITORY`` at
``GITHUB_API_URL``. ``--stage run`` (the job that runs PR code) uses no GitHub API at all and
removes any token from its environment; ``--stage publish`` runs no PR code and re-validates
the results folder it is given. Outputs, the job summary and annotations go to the files and stream the
runner reads (``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY``, stdout).

Exit codes: 0 done (target failures are reported, not fatal), 1 GitHub API or internal error,
2 bad input (config, payload, flags).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kernelopt_bot.config import DEFAULT_CONFIG, KerneloptConfig, load_config
from kernelopt_bot.errors import BadInputError, KerneloptError
from kernelopt_bot.folders import make_dirs
from kernelopt_bot.github import actions_io
from kernelopt_bot.github.commands import CommandError
from kernelopt_bot.github.events import SUPPORTED, IssueCommentEvent, PullRequestEvent, load_event
from kernelopt_bot.github.gateway import Gateway, GitHubAPIError, GitHubGateway, PullInfo, connect
from kernelopt_bot.github.runner import DefaultRunner, PipelineRunner

# Tests replace this to hand the bot RunResults they built; the real one imports the engine lazily.
RUNNER_FACTORY: Callable[[Path], PipelineRunner] = DefaultRunner


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One line on stderr and the documented exit code, as ``kernelopt_bot.cli`` does.

    Kept here rather than imported so that ``kernelopt_bot.cli`` can import this module to
    register the commands without an import cycle.
    """
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KerneloptError as exc:
            for line in str(exc).splitlines() or [""]:  # a config with several problems: one line each
                _log(f"error: {line}")
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            _log(f"error: internal error: {type(exc).__name__}: {exc}")
            sys.exit(1)

    return wrapper


def _log(msg: str) -> None:
    """Log lines carry untrusted text (target names, errors, comment bodies): in Actions, any line
    that could hold a workflow command (``::``) is echoed inside a stop-commands block."""
    if actions_io.in_actions() and "::" in msg:
        click.echo(actions_io.untrusted_block(msg), err=True, nl=False)
    else:
        click.echo(msg, err=True)


# Variables that carry a GitHub credential; the run stage (which runs PR code) drops them.
TOKEN_VARS = ("GITHUB_TOKEN", "INPUT_GITHUB_TOKEN", "INPUT_GITHUB-TOKEN", "GH_TOKEN", "KERNELOPT_TOKEN",
              "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL")


def _drop_tokens() -> list[str]:
    """Remove GitHub credentials from this process's environment (and so from its children's)."""
    dropped = [k for k in TOKEN_VARS if k in os.environ]
    for k in dropped:
        del os.environ[k]
    return dropped


def _config(config: str, root: Path) -> tuple[KerneloptConfig, str]:
    """The config and its path relative to ``root``; its file entries are checked under ``root``
    (the repository), wherever the config file itself is."""
    path = Path(config)
    if not path.is_absolute() and not path.exists() and (root / path).exists():
        path = root / path
    try:
        rel = str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        rel = str(path)
    return load_config(path, root=root, source=rel), rel


def _local_commits(event: PullRequestEvent, root: Path) -> PullRequestEvent:
    """A dry run's payload may name its commits as revisions of the local checkout.

    The example payloads (``examples/events/``) say ``"sha": "HEAD"`` and ``"HEAD~1"``, so they
    work in any repository: the last commit plays the PR. A 40-character SHA (what GitHub sends),
    or a name git does not know here, is kept as written.
    """
    from kernelopt_bot.github.checkout import SHA_RE
    from kernelopt_bot.github.dryrun import git

    def resolve(rev: str) -> str:
        if not rev or SHA_RE.match(rev) or rev.startswith("-"):  # never an option to git
            return rev
        out = git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        return out.strip() if out else rev

    return dataclasses.replace(event, head_sha=resolve(event.head_sha), base_sha=resolve(event.base_sha))


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def github_gateway(repository: str) -> GitHubGateway:
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("INPUT_GITHUB_TOKEN")
    if not token:
        raise BadInputError("GITHUB_TOKEN is not set (or use --dry-run to publish into a folder)")
    retries = _env_int("KERNELOPT_GITHUB_RETRIES", 3)
    throttle = os.environ.get("KERNELOPT_GITHUB_THROTTLE", "1") != "0"
    repo = connect(token, repository, os.environ.get("GITHUB_API_URL") or None, retries=retries, throttle=throttle)
    return GitHubGateway(repo, bot_login=os.environ.get("KERNELOPT_BOT_LOGIN") or None, retries=retries,
                         backoff=1.0 if throttle else 0.0)


def _run_url() -> str:
    server, repo, run = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else ""


def _emit(outcome: Any, *, summary_title: str = "") -> None:
    """Outputs, summary and annotations for the runner (no-ops outside Actions)."""
    if outcome.outputs:
        actions_io.set_outputs(outcome.outputs)
    if outcome.summary:
        actions_io.append_summary(outcome.summary)
    for f in outcome.failures:
        actions_io.report_failure(f.message, file=f.file, line=f.line, detail=f.detail)


def _api_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An API error also becomes an annotation and a summary line before the one-line exit."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GitHubAPIError as exc:
            actions_io.report_failure(str(exc), title="kernelopt: GitHub API")
            from kernelopt_bot.github.render import md

            actions_io.append_summary(f"## kernelopt: publishing failed\n\n{md(str(exc), 1000)}\n")
            raise
        except CommandError as exc:
            raise BadInputError(str(exc)) from exc

    return wrapper


@click.command()
@click.option("--event-name", default=lambda: os.environ.get("GITHUB_EVENT_NAME", ""),
              help=f"The triggering event ({', '.join(SUPPORTED)}); default $GITHUB_EVENT_NAME.")
@click.option("--event-path", default=lambda: os.environ.get("GITHUB_EVENT_PATH", ""),
              help="The event payload JSON; default $GITHUB_EVENT_PATH.")
@click.option("--config", "config", default=DEFAULT_CONFIG, show_default=True, help="The bot's config file.")
@click.option("--repo-root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="The checked-out repository (entries, import graph, local git).")
@click.option("--dry-run", is_flag=True, help="Publish nothing; write what would be published into --out.")
@click.option("--out", "out", default="kernelopt-out", show_default=True, type=click.Path(file_okay=False),
              help="Where results, reports (and in a dry run, everything to publish) go.")
@click.option("--stage", type=click.Choice(["all", "ack", "run", "publish"]), default="all", show_default=True,
              help="Run one stage of a split workflow: ack (commands), run (no GitHub access: runs the PR's "
                   "code), publish (never runs PR code; re-validates the run's results).")
@click.option("--pinned-sha", default=None, help="Command run/publish stages: the commit the ack stage pinned.")
@click.option("--base-sha", default=None, help="Command run stage: the base commit the ack stage read "
                                               "(its config decides where the LLM key goes).")
@click.option("--results", default=None, type=click.Path(file_okay=False),
              help="Publish stage: the results folder written by the run stage (default OUT/results).")
@click.option("--permission", default="write", show_default=True,
              help="Dry run only: the commenter's repository permission to assume.")
@handle_errors
@_api_errors
def bot(event_name: str, event_path: str, config: str, repo_root: str, dry_run: bool, out: str, stage: str,
        pinned_sha: str | None, base_sha: str | None, results: str | None, permission: str) -> None:
    """React to a GitHub event: a PR push, a /kernelopt comment, a schedule or a dispatch."""
    from kernelopt_bot.github.dryrun import DryRunGateway
    from kernelopt_bot.github.flows import BotContext, NoGateway, run_issue_comment, run_pull_request

    if not event_name or not event_path:
        raise BadInputError("give --event-name and --event-path (or run inside Actions)")
    root = Path(repo_root).resolve()
    out_dir = make_dirs(Path(out).resolve())  # a .gitignore in what kernelopt creates (issue 15)
    event = load_event(event_name, event_path, os.environ.get("GITHUB_REPOSITORY"))
    cfg, config_rel = _config(config, root)
    gateway: Gateway | NoGateway
    if stage == "run":
        # The run stage executes the PR's code: it gets no GitHub access at all, not even a read token.
        dropped = _drop_tokens()
        if dropped:
            _log(f"run stage: removed {', '.join(dropped)} from the environment (the run stage needs no token)")
        gateway = NoGateway()
    elif dry_run:
        pull = None
        if isinstance(event, PullRequestEvent):
            event = _local_commits(event, root)
            pull = PullInfo(event.number, event.head_sha, event.head_ref, event.head_repo, event.base_ref,
                            event.repo.full_name, base_sha=event.base_sha)
        gateway = DryRunGateway(root, event.repo.full_name, default_branch=event.repo.default_branch,
                                permission=permission, pull=pull)
    else:
        gateway = github_gateway(os.environ.get("GITHUB_REPOSITORY") or event.repo.full_name)
    ctx = BotContext(cfg=cfg, config_path=config_rel, repo_root=root, out_dir=out_dir, gateway=gateway,
                     runner=RUNNER_FACTORY(root), run_url=_run_url(), log=_log)
    try:
        results_dir = Path(results).resolve() if results else None
        if isinstance(event, PullRequestEvent):
            outcome = run_pull_request(ctx, event, stage=stage, results=results_dir)
        elif isinstance(event, IssueCommentEvent):
            outcome = run_issue_comment(ctx, event, stage=stage, pinned_sha=pinned_sha, base_sha=base_sha,
                                        results=results_dir)
        elif stage != "all":
            raise BadInputError(f"--stage {stage} is for pull_request and issue_comment events")
        else:
            outcome = _sweep_all(ctx, cfg)
    finally:
        if isinstance(gateway, DryRunGateway):
            gateway.finish(out_dir, {"event": event_name, "stage": stage})
    _emit(outcome)
    if outcome.message:
        _log(outcome.message)
    if outcome.exit_code:
        sys.exit(outcome.exit_code)


def _sweep_all(ctx: Any, cfg: KerneloptConfig) -> Any:
    """schedule / workflow_dispatch through ``kernelopt bot``: every target in one job, then merge."""
    from kernelopt_bot.github.runner import run_jobs
    from kernelopt_bot.github.sweep import sweep_jobs

    run_jobs(ctx.runner, sweep_jobs(cfg), ctx.results_dir, log=ctx.log)
    return _merge_and_publish(cfg, ctx.gateway, [ctx.results_dir], ctx.out_dir, None, ctx.repo_root,
                              ctx.config_path)


def _merge_and_publish(cfg: KerneloptConfig, gateway: Gateway, dirs: list[Path], out_dir: Path,
                       history_file: Path | None, root: Path, config_rel: str) -> Any:
    from kernelopt_bot.github.flows import BotOutcome, Failure
    from kernelopt_bot.github.render import base_context, render
    from kernelopt_bot.github.sweep import default_head, merge, publish_merge, read_history

    head = default_head(gateway, root)
    result = merge(cfg, dirs, gateway, history_text=read_history(gateway, history_file), head_sha=head,
                   history_on_branch=history_file is None)
    # The report and the history are written before anything is published: a GitHub error while
    # publishing (a 403 on opening the PR) left the folder, and so the job's artifact, empty.
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.md").write_text(result.report, encoding="utf-8")
    (out_dir / "history.json").write_text(json.dumps(result.history, indent=2) + "\n", encoding="utf-8")
    ref = publish_merge(cfg, gateway, result, head)
    failures = []
    for o in result.outcomes:
        if o.failed:
            failures.append(Failure(f"target {o.job.name} ({o.job.dtype}) failed: {o.result.error or 'unknown'}",
                                    file=config_rel, line=cfg.target_lines.get(o.job.name),
                                    detail=o.traceback or o.result.error))
    ctx = base_context(result.rows)
    url = ref.url if ref is not None and ref.action in ("created", "updated") else ""
    outputs = {"speedup": "" if ctx["geomean"] is None else f"{ctx['geomean']:.4f}",
               "verified-kernels": str(ctx["verified_total"]), "pr-url": url or "",
               "report-path": str(out_dir / "sweep.md")}
    links = [("sweep PR", ref.url)] if ref is not None and ref.url else []
    summary = render("summary.md.j2", **base_context(
        result.rows, title=f"nightly sweep at {head[:12]}", links=links,
        note=f"{len(result.changes)} pack change(s); {len(result.regressions)} regression(s) against history"))
    return BotOutcome(outputs=outputs, summary=summary, failures=failures,
                      message=f"sweep: {len(result.outcomes)} run(s), {len(result.changes)} pack change(s)")


@click.group()
def sweep() -> None:
    """Nightly sweeps over every target, sharded across GPU runners."""


@sweep.command("plan")
@click.option("--config", "config", default=DEFAULT_CONFIG, show_default=True)
@click.option("--shards", default=1, show_default=True, type=click.IntRange(1, 256))
@click.option("--output-name", default=None, help="Also write the matrix to $GITHUB_OUTPUT under this name.")
@handle_errors
def sweep_plan(config: str, shards: int, output_name: str | None) -> None:
    """Print the shard matrix as one line of JSON (for strategy.matrix via fromJSON)."""
    from kernelopt_bot.github.sweep import plan

    cfg = load_config(config)
    matrix = json.dumps(plan(cfg, shards), separators=(",", ":"))
    if output_name:
        actions_io.set_output(output_name, matrix)
    click.echo(matrix)


@sweep.command("run")
@click.option("--config", "config", default=DEFAULT_CONFIG, show_default=True)
@click.option("--shard", "shard", required=True, help="I/N: which shard of N to run (1-based).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False))
@click.option("--repo-root", default=".", show_default=True, type=click.Path(file_okay=False))
@click.option("--gpus", default=None, metavar="all|N|I,J,...",
              help="Run the shard's targets on several GPUs at once, each a kernelopt optimize process on "
                   "one GPU: all, the first N, or these indices (default: one at a time in this process).")
@handle_errors
def sweep_run(config: str, shard: str, out: str, repo_root: str, gpus: str | None) -> None:
    """Run one shard's targets into OUT. A failing target is reported and the shard goes on."""
    from kernelopt_bot.github.flows import BotOutcome, Failure
    from kernelopt_bot.github.render import base_context, render, result_row
    from kernelopt_bot.github.sweep import run_shard
    from kernelopt_bot.shards import Shard

    parsed = Shard.parse(shard)
    index, total = parsed.number, parsed.total
    root = Path(repo_root).resolve()
    cfg, config_rel = _config(config, root)
    if gpus is None:
        outcomes = run_shard(cfg, RUNNER_FACTORY(root), index, total, Path(out), log=_log)
    else:
        from kernelopt_bot.gpu_pool import cuda_device_count, select_gpus

        outcomes = run_shard(cfg, None, index, total, Path(out), log=_log,
                             gpus=select_gpus(gpus, cuda_device_count()), repo_root=root)
    failures = [Failure(f"target {o.job.name} ({o.job.dtype}) failed: {o.result.error or 'unknown'}",
                        file=config_rel, line=cfg.target_lines.get(o.job.name), detail=o.result.error)
                for o in outcomes if o.failed]
    rows = [result_row(o.result) for o in outcomes]
    summary = render("summary.md.j2", **base_context(rows, title=f"sweep shard {index}/{total}", links=[],
                                                     note=""))
    _emit(BotOutcome(summary=summary, failures=failures))
    _log(f"shard {index}/{total}: {len(outcomes)} run(s), {len(failures)} failed")


@sweep.command("merge")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False))
@click.option("--config", "config", default=DEFAULT_CONFIG, show_default=True)
@click.option("--repo-root", default=".", show_default=True, type=click.Path(file_okay=False))
@click.option("--history", "history", default=None, type=click.Path(dir_okay=False),
              help="History JSON to compare with (default: history.json on the kernelopt/history branch).")
@click.option("--dry-run", is_flag=True, help="Publish nothing; write the sweep PR into OUT.")
@handle_errors
@_api_errors
def sweep_merge(dirs: tuple[str, ...], out: str, config: str, repo_root: str, history: str | None,
                dry_run: bool) -> None:
    """Merge shard results, compare with history, and publish one sweep PR."""
    from kernelopt_bot.github.dryrun import DryRunGateway

    root = Path(repo_root).resolve()
    cfg, config_rel = _config(config, root)
    repository = os.environ.get("GITHUB_REPOSITORY", "")
    gateway: Gateway
    if dry_run:
        gateway = DryRunGateway(root, repository or "local/repository",
                                default_branch=os.environ.get("KERNELOPT_DEFAULT_BRANCH", "main"))
    else:
        if not repository:
            raise BadInputError("GITHUB_REPOSITORY is not set (or use --dry-run)")
        gateway = github_gateway(repository)
    out_dir = Path(out).resolve()
    try:
        outcome = _merge_and_publish(cfg, gateway, [Path(d) for d in dirs], out_dir,
                                     Path(history) if history else None, root, config_rel)
    finally:
        if isinstance(gateway, DryRunGateway):
            gateway.finish(out_dir, {"command": "sweep merge"})
    _emit(outcome)
    _log(outcome.message)
