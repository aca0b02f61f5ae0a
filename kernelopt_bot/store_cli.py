"""``kernelopt store ...``: what the store holds, and moving it between machines.

Every ``optimize`` records its run, the kernels it profiled, every candidate with its verdict, and
the verified-kernel cache (a kernel verified once is not searched again on the same GPU and
versions). These commands read that back (``runs``, ``show``, ``cache``), drop cache rows
(``forget``: after a driver upgrade, say), and carry the store between runners that share no disk
(``export`` on the nightly runner, ``import`` before a PR run: the same fused kernels recur across
models, so a cache verified on one runner saves another the search). Nothing here needs torch.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import click

from kernelopt_bot.errors import BadInputError, KerneloptError

STORE_OPTION = click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False),
                            help="SQLite store (default .kernelopt/kernelopt.db or $KERNELOPT_DB).")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _open(store_path: str | None, must_exist: bool = True) -> Any:
    from kernelopt_bot.store import Store

    path = Path(store_path) if store_path else Store.default_path()
    if must_exist and not path.is_file():
        raise BadInputError(f"no store at {path} (runs of `kernelopt optimize` write it; --store names another)")
    return Store(path)


def _fail(exc: KerneloptError) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(exc.exit_code)


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title))
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console(width=160).print(table)


@click.group()
def store() -> None:
    """What the store holds (runs, candidates, the verified-kernel cache), and moving it between runners."""


@store.command()
@STORE_OPTION
@click.option("--target", default=None, help="Only runs of this target (as it was given to optimize).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
@JSON_OPTION
def runs(store_path: str | None, target: str | None, limit: int, as_json: bool) -> None:
    """The latest runs, newest first."""
    try:
        with _open(store_path) as db:
            found = db.runs.recent(target=target, limit=limit)
    except KerneloptError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in r.items() if k != "result"} for r in found], default=str))
        return
    _table(f"{len(found)} run(s)", ("id", "target", "device", "dtype", "status", "finished", "speedup", "seconds"),
           [[str(r["id"]), r["target"], r["device"], r["dtype"], r["status"], _when(r["finished_at"]),
             _num(r["speedup"], ".3f"), _num(r["seconds"], ".0f")] for r in found])


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
    try:
        if (run_id is None) == (latest_target is None):
            raise BadInputError("give a RUN_ID or --latest TARGET")
        with _open(store_path) as db:
            if latest_target is not None:
                result = db.runs.latest_result(latest_target, device, dtype)
                if result is None:
                    raise BadInputError(f"no finished run of {latest_target} on {device} in {dtype}")
                doc: dict[str, Any] = {"latest": result.to_json()}
            else:
                known = {r["id"] for r in db.runs.recent(limit=1_000_000)}
                if run_id not in known:
                    raise BadInputError(f"no run {run_id} in the store")
                doc = {"run": run_id, "kernels": db.runs.kernels(run_id),
                       "candidates": db.runs.candidates(run_id)}
    except KerneloptError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(doc, default=str))
        return
    if "latest" in doc:
        r = doc["latest"]
        click.echo(f"{r['target']} [{r['device']}, {r['dtype']}]: {r['status']}, speedup {_num(r.get('speedup'), '.3f')}")
        for k in r.get("kernels") or []:
            click.echo(f"  {k['name']}: {k['status']} {k.get('detail') or ''}".rstrip())
        return
    _table(f"run {run_id}: {len(doc['kernels'])} kernel(s)", ("kernel", "kind", "share", "time ms"),
           [[k["name"], k["kind"], _num(k["share"], ".1%"), _num(k["time_ms"], ".4f")] for k in doc["kernels"]])
    _table(f"run {run_id}: {len(doc['candidates'])} candidate(s)", ("kernel", "agent", "candidate", "verdict"),
           [[c["kernel_key"][:12], c["agent"], c["label"], c["verdict"].get("status", "-")] for c in doc["candidates"]])


@store.command()
@STORE_OPTION
@click.option("--kernel", "kernel_key", default=None, help="One kernel's history (its key).")
@JSON_OPTION
def cache(store_path: str | None, kernel_key: str | None, as_json: bool) -> None:
    """The verified-kernel cache's history, newest first: what was verified or given up on, where."""
    try:
        with _open(store_path) as db:
            history = db.cache.history(kernel_key)
    except KerneloptError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(history, default=str))
        return
    _table(f"{len(history)} cache write(s)", ("kernel", "gpu", "torch", "triton", "kind", "speedup", "when", "why"),
           [[h["kernel_key"][:12], h["gpu"], h["torch"], h["triton"], h["kind"], _num(h["speedup"], ".3f"),
             _when(h["created_at"]), h["reason"][:60]] for h in history])


@store.command()
@STORE_OPTION
@click.option("--kernel", "kernel_key", default=None, help="Only this kernel's rows (every GPU and version).")
@click.option("--all", "everything", is_flag=True, help="Every cache row (required without --kernel).")
def forget(store_path: str | None, kernel_key: str | None, everything: bool) -> None:
    """Drop verified-kernel cache rows, so the next run searches those kernels again (history stays)."""
    try:
        if (kernel_key is None) != everything:
            if kernel_key is None:
                raise BadInputError("give --kernel KEY, or --all to drop every cache row")
            raise BadInputError("give --kernel KEY or --all, not both")
        with _open(store_path) as db:
            dropped = db.cache.invalidate(kernel_key)
    except KerneloptError as exc:
        _fail(exc)
    click.echo(f"dropped {dropped} cache row(s)")


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
        _fail(BadInputError(f"cannot write {out_path}: {exc.strerror or exc}"))
    except KerneloptError as exc:
        _fail(exc)
    click.echo(f"wrote {out_path}: {len(doc.get('runs', []))} run(s), {len(doc.get('cache', []))} cache row(s)")


@store.command(name="import")
@STORE_OPTION
@click.argument("in_path", metavar="FILE", type=click.Path(dir_okay=False))
def import_store(store_path: str | None, in_path: str) -> None:
    """Merge FILE (from `kernelopt store export`) into the store; importing twice adds nothing."""
    try:
        try:
            doc = json.loads(Path(in_path).read_text())
        except (OSError, ValueError) as exc:
            raise BadInputError(f"{in_path}: not a readable JSON file ({exc})") from exc
        if not isinstance(doc, dict):
            raise BadInputError(f"{in_path}: not a store export")
        with _open(store_path, must_exist=False) as db:
            changed = db.transfer.import_json(doc)
    except KerneloptError as exc:
        _fail(exc)
    click.echo(f"imported {in_path}: {changed} row(s) added or changed")
