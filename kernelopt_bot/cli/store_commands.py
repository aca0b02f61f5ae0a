"""``kernelopt store ...``: what the store holds, and moving it between machines.

Every ``optimize`` records its run, the kernels it profiled, every candidate with its verdict, and
the verified-kernel cache (a kernel verified once is not searched again on the same GPU and
versions). These commands read that back (``runs``, ``show``, ``cache``), drop cache rows
(``forget``: after a driver upgrade, say), and carry the store between runners that share no disk
(``export`` on the nightly runner, ``import`` before a PR run: the same fused kernels recur across
models, so a cache verified on one runner saves another the search). Nothing here needs torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kernelopt_bot.cli import options, render
from kernelopt_bot.cli.reports import LatestRun, RunDetail, RunList
from kernelopt_bot.errors import BadInputError, KerneloptError

if TYPE_CHECKING:
    from kernelopt_bot.store import Store

STORE_OPTION = click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False),
                            help="SQLite store (default .kernelopt/kernelopt.db or $KERNELOPT_DB).")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _open(store_path: str | None, must_exist: bool = True) -> Store:
    from kernelopt_bot.store import Store

    path = Path(store_path) if store_path else Store.default_path()
    if must_exist and not path.is_file():
        raise BadInputError(f"no store at {path} (runs of `kernelopt optimize` write it; --store names another)")
    return Store(path)


class _StoreGroup(click.Group):
    """Our errors in any ``store`` command end as one line and their exit code. Narrower than the
    other commands' ``handle_errors``: anything else is not caught here, as it never was."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KerneloptError as exc:
            options.fail(str(exc), exc.exit_code)


@click.group(cls=_StoreGroup)
def store() -> None:
    """What the store holds (runs, candidates, the verified-kernel cache), and moving it between runners."""


@store.command()
@STORE_OPTION
@click.option("--target", default=None, help="Only runs of this target (as it was given to optimize).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
@JSON_OPTION
def runs(store_path: str | None, target: str | None, limit: int, as_json: bool) -> None:
    """The latest runs, newest first."""
    with _open(store_path) as db:
        found = RunList(db.runs.recent(target=target, limit=limit))
    if as_json:
        click.echo(json.dumps(found.to_json(), default=str))
        return
    render.store_runs(found)


@store.command()
@STORE_OPTION
@click.argument("run_id", required=False, type=int)
@click.option("--latest", "latest_target", default=None, metavar="TARGET",
              help="Instead of RUN_ID: the newest finished result of TARGET (with --device and --dtype).")
@click.option("--device", default="cuda", show_default=True)
@click.option("--dtype", default="fp32", show_default=True)
@JSON_OPTION
def show(store_path: str | None, run_id: int | None, latest_target: str | None, device: str, dtype: str,
         as_json: bool) -> None:
    """One run: its kernels and every candidate with its verdict; or the latest result of a target."""
    if (run_id is None) == (latest_target is None):
        raise BadInputError("give a RUN_ID or --latest TARGET")
    report: LatestRun | RunDetail
    with _open(store_path) as db:
        if latest_target is not None:
            result = db.runs.latest_result(latest_target, device, dtype)
            if result is None:
                raise BadInputError(f"no finished run of {latest_target} on {device} in {dtype}")
            report = LatestRun(result)
        else:
            known = {r["id"] for r in db.runs.recent(limit=1_000_000)}
            if run_id not in known:
                raise BadInputError(f"no run {run_id} in the store")
            report = RunDetail(run_id, db.runs.kernels(run_id), db.runs.candidates(run_id))
    if as_json:
        click.echo(json.dumps(report.to_json(), default=str))
    elif isinstance(report, LatestRun):
        render.store_latest(report)
    else:
        render.store_run(report)


@store.command()
@STORE_OPTION
@click.option("--kernel", "kernel_key", default=None, help="One kernel's history (its key).")
@JSON_OPTION
def cache(store_path: str | None, kernel_key: str | None, as_json: bool) -> None:
    """The verified-kernel cache's history, newest first: what was verified or given up on, where."""
    with _open(store_path) as db:
        history = db.cache.history(kernel_key)
    if as_json:
        click.echo(json.dumps(history, default=str))
        return
    render.store_cache(history)


@store.command()
@STORE_OPTION
@click.option("--kernel", "kernel_key", default=None, help="Only this kernel's rows (every GPU and version).")
@click.option("--all", "everything", is_flag=True, help="Every cache row (required without --kernel).")
def forget(store_path: str | None, kernel_key: str | None, everything: bool) -> None:
    """Drop verified-kernel cache rows, so the next run searches those kernels again (history stays)."""
    if (kernel_key is None) != everything:
        if kernel_key is None:
            raise BadInputError("give --kernel KEY, or --all to drop every cache row")
        raise BadInputError("give --kernel KEY or --all, not both")
    with _open(store_path) as db:
        dropped = db.cache.invalidate(kernel_key)
    render.store_dropped(dropped)


@store.command(name="export")
@STORE_OPTION
@click.argument("out_path", metavar="FILE", type=click.Path(dir_okay=False))
def export_store(store_path: str | None, out_path: str) -> None:
    """Write the whole store as JSON (runs, candidates, the cache, the agents' memory) to FILE."""
    try:
        with _open(store_path) as db:
            doc = db.transfer.export_json()
        Path(out_path).write_text(json.dumps(doc, sort_keys=True) + "\n")
    except OSError as exc:
        raise BadInputError(f"cannot write {out_path}: {exc.strerror or exc}") from exc
    render.store_exported(out_path, len(doc.get("runs", [])), len(doc.get("cache", [])))


@store.command(name="import")
@STORE_OPTION
@click.argument("in_path", metavar="FILE", type=click.Path(dir_okay=False))
def import_store(store_path: str | None, in_path: str) -> None:
    """Merge FILE (from `kernelopt store export`) into the store; importing twice adds nothing."""
    doc = _read_export(in_path)
    with _open(store_path, must_exist=False) as db:
        changed = db.transfer.import_json(doc)
    render.store_imported(in_path, changed)


def _read_export(path: str) -> dict[str, Any]:
    """A file ``store export`` wrote, as JSON; anything else is bad input."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BadInputError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(doc, dict):
        raise BadInputError(f"{path}: not a store export")
    return doc
