"""Nightly sweeps: plan shards, run one shard, merge shard results and publish once.

The Actions matrix is the distributed engine: ``plan`` prints the matrix, each shard job runs
its share of (target, dtype) jobs on a GPU runner and uploads its results folder, and ``merge``
reads every shard's folder, compares with history and opens or updates one PR from
``kernelopt/nightly`` into the default branch:

* a target whose new pack differs in kernels from the one on the default branch, or whose
  speedup moved by more than ``MOVE_THRESHOLD``, gets its pack file updated;
* a target that ran fine but verified nothing loses its pack file (its replacements no longer
  verify, e.g. a new torch changed the kernel sources);
* a target that failed keeps its pack and is reported: a failure is not evidence against it.

History (speedups per run) lives in ``history.json`` on the ``kernelopt/history`` branch, read
and written through the API (no external service); in dry runs it is a file passed in and
written to the output folder.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.config import KerneloptConfig
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.fleet import Fleet, FleetResult
from kernelopt_bot.github.dryrun import git
from kernelopt_bot.github.gateway import Gateway, ProposalRef
from kernelopt_bot.github.proposal import (
    HISTORY_BRANCH,
    HISTORY_FILE,
    NIGHTLY_BRANCH,
    README_PATH,
    Proposal,
    merged_packs,
    pack_file,
    pack_keys,
    readme,
)
from kernelopt_bot.github.render import SWEEP_MARKER, base_context, render, result_row
from kernelopt_bot.github.runner import (
    JobOutcome,
    PipelineRunner,
    TargetJob,
    fleet_job,
    job_folder,
    load_outcomes,
    make_jobs,
    record,
    run_jobs,
)
from kernelopt_bot.pack.format import KernelPack
from kernelopt_bot.shards import Shard

HISTORY_SCHEMA = "kernelopt-history/1"
HISTORY_KEEP = 200
MOVE_THRESHOLD = 0.02  # a speedup that moved by more than 2% updates the pack's recorded numbers
JOB_TIMEOUT_S = 1800.0  # per job on a GPU; a hang past it costs the job, not the shard


# --- plan and shards ------------------------------------------------------------------------------


def sweep_jobs(cfg: KerneloptConfig) -> list[TargetJob]:
    return make_jobs(cfg, cfg.active_targets())


def plan(cfg: KerneloptConfig, shards: int) -> dict[str, Any]:
    """The matrix: at most one shard per job, at least one shard (GitHub rejects an empty matrix)."""
    if shards < 1:
        raise BadInputError("--shards must be at least 1")
    jobs = sweep_jobs(cfg)
    n = max(1, min(shards, len(jobs)))
    include = []
    for i in range(1, n + 1):
        mine = [j.slug for k, j in enumerate(jobs) if k % n == i - 1]
        include.append({"shard": f"{i}/{n}", "index": i, "total": n, "jobs": ",".join(mine)})
    return {"include": include}


def shard_jobs(cfg: KerneloptConfig, index: int, total: int) -> list[TargetJob]:
    return Shard(index, total).take(sweep_jobs(cfg))


def run_shard(cfg: KerneloptConfig, runner: PipelineRunner | None, index: int, total: int, out: Path,
              log: Any = None, *, gpus: list[int] | None = None, repo_root: Path | None = None,
              job_timeout_s: float | None = None, cores: int | None = None) -> list[JobOutcome]:
    """Run one shard's jobs; failures are recorded, never raised.

    ``gpus=None`` runs them one after another with ``runner``, in this process (as the PR flows
    do). With ``gpus`` each job is a ``kernelopt optimize`` process on one of them
    (:mod:`kernelopt_bot.fleet`), entries resolved against ``repo_root``, and the results land in
    the same folders as a sequential run's.
    """
    out.mkdir(parents=True, exist_ok=True)
    jobs = shard_jobs(cfg, index, total)
    if gpus is None:
        if runner is None:
            raise ValueError("run_shard needs a runner without gpus")
        outcomes = run_jobs(runner, jobs, out, log=log)
        ran_on: dict[str, int | None] = {j.slug: None for j in jobs}
    else:
        outcomes, ran_on = run_jobs_on_gpus(jobs, out, gpus=gpus, repo_root=repo_root or Path.cwd(),
                                            job_timeout_s=job_timeout_s or job_timeout(cfg), log=log, cores=cores)
    # Named per shard: the merge job downloads every shard into one folder (merge-multiple).
    (out / f"shard-{index}-of-{total}.json").write_text(json.dumps({
        "shard": f"{index}/{total}", "jobs": [j.slug for j in jobs],
        "failed": [o.job.slug for o in outcomes if o.failed],
        "gpu": ran_on,
    }, indent=2) + "\n")
    return outcomes


# --- several GPUs ---------------------------------------------------------------------------------

def job_timeout(cfg: KerneloptConfig) -> float:
    """A job's deadline on a GPU: generous next to the search's wall budget, which does not cover
    capture, compilation and the end-to-end benchmark."""
    wall = cfg.budget.wall_seconds
    return max(JOB_TIMEOUT_S, 4 * wall) if wall else JOB_TIMEOUT_S


def run_jobs_on_gpus(jobs: list[TargetJob], out: Path, *, gpus: list[int], repo_root: Path, job_timeout_s: float,
                     log: Any = None, cores: int | None = None) -> tuple[list[JobOutcome], dict[str, int | None]]:
    """``run_jobs`` on several GPUs through the fleet: outcomes in job order, and which GPU ran each.

    A job whose process crashed, hung or failed like a GPU on every GPU it tried is recorded as
    failed with the reasons, so the shard's results stay complete.
    """
    folders = [job_folder(out, j) for j in jobs]
    fleet_jobs = [fleet_job(j, repo_root, folder.resolve(), job_timeout_s) for j, folder in zip(jobs, folders)]

    def finished(ran: FleetResult) -> None:
        if log is not None:
            retried = f", after {ran.attempts} attempts" if ran.attempts > 1 else ""
            status = ran.result.status + (f" ({ran.result.error})" if ran.result.error else "")
            log(f"{jobs[ran.index].slug}: {status} [gpu {ran.gpu}{retried}]")

    if log is not None:
        log(f"{len(jobs)} job(s) on {len(gpus)} GPU(s): {', '.join(map(str, gpus))}")
    results = Fleet(gpus, cores=cores, log=log).run(fleet_jobs, on_result=finished)
    outcomes = [record(job, ran.result, folder, ran.seconds) for job, ran, folder in zip(jobs, results, folders)]
    return outcomes, {job.slug: ran.gpu for job, ran in zip(jobs, results)}


# --- history --------------------------------------------------------------------------------------


def parse_history(text: str | None) -> dict[str, Any]:
    if not text:
        return {"schema": HISTORY_SCHEMA, "runs": []}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInputError(f"history: not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != HISTORY_SCHEMA or not isinstance(data.get("runs"), list):
        raise BadInputError(f"history: not a {HISTORY_SCHEMA} document")
    return data


def previous(history: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The latest recorded entry per job slug."""
    last: dict[str, dict[str, Any]] = {}
    for run in history["runs"]:
        for slug, entry in (run.get("targets") or {}).items():
            last[slug] = entry
    return last


def history_entry(outcomes: list[JobOutcome], sha: str) -> dict[str, Any]:
    targets = {}
    for o in outcomes:
        keys: list[str] = []
        if not o.failed and o.pack is not None:
            keys = sorted(o.pack.entries)
        targets[o.job.slug] = {"status": o.result.status, "speedup": o.result.speedup,
                               "verified": o.result.verified_kernels, "keys": keys}
    return {"time": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "sha": sha,
            "targets": targets}


# --- merge ----------------------------------------------------------------------------------------


@dataclass
class Change:
    path: str
    action: str  # added, updated, dropped
    reason: str = ""


@dataclass
class MergeResult:
    outcomes: list[JobOutcome]
    rows: list[dict[str, Any]]
    changes: list[Change]
    files: dict[str, str | None]
    regressions: list[str]
    history: dict[str, Any]
    shards: int
    report: str = ""
    proposal: ProposalRef | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _dtype_speedups(text: str | None) -> dict[str, float | None]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    dtypes = ((data.get("measured") or {}).get("dtypes") or {}) if isinstance(data, dict) else {}
    return {k: (v or {}).get("speedup") for k, v in dtypes.items() if isinstance(v, dict)}


def _moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old != new
    return abs(new / old - 1.0) > MOVE_THRESHOLD if old else True


def decide(cfg: KerneloptConfig, outcomes: list[JobOutcome], current: dict[str, str | None],
           readme_text: str | None = None) -> tuple[list[Change], dict[str, str | None], dict[str, str]]:
    """Pack changes against the packs on the default branch (``current``: target -> pack text)."""
    by_target: dict[str, list[JobOutcome]] = defaultdict(list)
    for o in outcomes:
        by_target[o.job.name].append(o)
    packs = merged_packs(outcomes)
    changes: list[Change] = []
    files: dict[str, str | None] = {}
    action_of: dict[str, str] = {}
    for name, outs in sorted(by_target.items()):
        path = pack_file(name)
        old = current.get(name)
        if any(o.failed for o in outs):
            action_of[name] = "kept (a run failed)" if old else "none (a run failed)"
            continue
        new: KernelPack | None = packs.get(name)
        if new is None:
            if old:
                changes.append(Change(path, "dropped", "no replacement verifies any more"))
                files[path] = None
                action_of[name] = "dropped"
            else:
                action_of[name] = "none"
            continue
        text = new.dumps()
        if not old:
            changes.append(Change(path, "added", f"{len(new)} verified replacement(s)"))
            files[path] = text
            action_of[name] = "added"
            continue
        old_keys, new_keys = pack_keys(old), set(new.entries)
        if old_keys != new_keys:
            gone, added = len(old_keys - new_keys), len(new_keys - old_keys)
            changes.append(Change(path, "updated", f"kernels changed: {added} new, {gone} no longer verified"))
            files[path] = text
            action_of[name] = "updated"
            continue
        old_s, new_s = _dtype_speedups(old), _dtype_speedups(text)
        moved = [d for d in sorted(set(old_s) | set(new_s)) if _moved(old_s.get(d), new_s.get(d))]
        if moved:
            changes.append(Change(path, "updated", "speedup moved for " + ", ".join(moved)))
            files[path] = text
            action_of[name] = "updated"
        else:
            action_of[name] = "unchanged"
    if files:
        remaining = {n for n, t in current.items() if t}
        for p, c in files.items():
            (remaining.add if c is not None else remaining.discard)(Path(p).stem)
        if remaining:
            files[README_PATH] = readme(sorted(remaining))
        elif readme_text:
            files[README_PATH] = None
    return changes, files, action_of


def merge(cfg: KerneloptConfig, dirs: list[Path], gateway: Gateway, *, history_text: str | None,
          head_sha: str, history_on_branch: bool = False) -> MergeResult:
    """The shards' results against the packs on the default branch and the history.
    ``history_on_branch``: the history came from :data:`HISTORY_BRANCH`, where an unreadable one
    (a hand edit gone wrong) is reported and replaced, git keeping the old one; it stopped every
    later sweep with exit 2. A file the user named (``--history``) that is unreadable still is."""
    outcomes = load_outcomes(dirs, cfg=cfg, allow_source=True)  # shards run the default branch's code
    shards = sum(1 for d in dirs for _ in Path(d).rglob("shard-*-of-*.json")) or len(dirs)
    history_problem = ""
    try:
        history = parse_history(history_text)
    except BadInputError as exc:
        if not history_on_branch:
            raise
        history, history_problem = parse_history(None), (
            f"{HISTORY_FILE} on {HISTORY_BRANCH} could not be read ({exc}); this sweep starts a new history "
            "(the branch's git history keeps the old file)")
    prev = previous(history)
    default = gateway.default_branch()
    current: dict[str, str | None] = {t.name: gateway.read_file(pack_file(t.name), ref=default) for t in cfg.targets}
    changes, files, action_of = decide(cfg, outcomes, current, gateway.read_file(README_PATH, ref=default))
    rows, regressions = [], []
    for o in outcomes:
        row = result_row(o.result)
        before = prev.get(o.job.slug) or {}
        row["previous"] = before.get("speedup")
        row["delta"] = (o.result.speedup / row["previous"] - 1.0) if o.result.speedup and row["previous"] else None
        row["pack_action"] = action_of.get(o.job.name, "none")
        rows.append(row)
        if before.get("status") == "ok" and o.failed:
            regressions.append(f"{o.job.slug}: ran last time, failed now")
        elif row["delta"] is not None and row["delta"] < -MOVE_THRESHOLD:
            regressions.append(f"{o.job.slug}: speedup {row['previous']:.3f}x → {o.result.speedup:.3f}x")
        if before.get("verified", 0) > o.result.verified_kernels and not o.failed:
            regressions.append(f"{o.job.slug}: verified kernels {before.get('verified')} → "
                               f"{o.result.verified_kernels}")
    history["runs"].append(history_entry(outcomes, head_sha))
    history["runs"] = history["runs"][-HISTORY_KEEP:]
    report = render("sweep.md.j2", **base_context(rows, head_sha=head_sha, shards=shards, changes=changes,
                                                  regressions=regressions, history_problem=history_problem))
    return MergeResult(outcomes, rows, changes, files, regressions, history, shards, report)


def publish_merge(cfg: KerneloptConfig, gateway: Gateway, result: MergeResult, head_sha: str) -> ProposalRef | None:
    """One sweep PR (or its closing), then the history commit."""
    default = gateway.default_branch()
    if result.files:
        proposal = Proposal(
            branch=NIGHTLY_BRANCH, base=default, parent_sha=head_sha, files=result.files,
            title=f"kernelopt nightly: {len(result.changes)} pack change(s)", body=result.report,
            commit_message="kernelopt nightly sweep\n\n" + "\n".join(
                f"- {c.path}: {c.action} ({c.reason})" for c in result.changes),
            draft=cfg.publish.draft, labels=list(cfg.publish.labels), reviewers=list(cfg.publish.reviewers))
        ref = gateway.publish_proposal(proposal, max_open=cfg.publish.max_open_proposals)
    else:
        closed = gateway.close_proposal(NIGHTLY_BRANCH, f"{SWEEP_MARKER}\nClosing: the nightly sweep at "
                                        f"{head_sha[:12]} found the packs on {default} current; nothing to propose.")
        ref = closed
    result.proposal = ref
    if not gateway.dry_run:
        gateway.commit_files(HISTORY_BRANCH, {HISTORY_FILE: json.dumps(result.history, indent=2) + "\n"},
                             f"kernelopt history: sweep at {head_sha[:12]}")
    return ref


def default_head(gateway: Gateway, root: Path) -> str:
    sha = gateway.branch_sha(gateway.default_branch())
    if sha:
        return sha
    local = git(root, "rev-parse", "HEAD")
    return local.strip() if local else "0" * 40


def read_history(gateway: Gateway, history_file: Path | None) -> str | None:
    if history_file is not None:
        return history_file.read_text(encoding="utf-8") if history_file.is_file() else None
    if gateway.dry_run:
        return None
    return gateway.read_file(HISTORY_FILE, ref=HISTORY_BRANCH)
