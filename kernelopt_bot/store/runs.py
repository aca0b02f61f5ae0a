"""The run log: every ``optimize`` run, the kernels its profile found and every candidate tried.

A run is recorded before any work starts and finished with its :class:`RunResult`, so a run that
crashes still says what was attempted and on what; rejected candidates are kept as well, since
the usage numbers and the agents' memory are made of them. Runs are the rows the rest of the
store points at (cache rows name the run that verified them): :func:`require_run` is the one
check that such a run exists.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from kernelopt_bot.result import RunResult
from kernelopt_bot.store.database import (
    Database,
    StoreError,
    checked_int,
    checked_text,
    json_text,
    new_uid,
    number_or_none,
)


class RunLog:
    """The runs, kernels and candidates tables of one store file."""

    def __init__(self, database: Database) -> None:
        self._database = database

    # -- runs ------------------------------------------------------------------------------------

    def start(
        self,
        target: str,
        device: str,
        dtype: str,
        hardware: Mapping[str, Any],
        versions: Mapping[str, Any],
        budget: Mapping[str, Any],
    ) -> int:
        """Record that a run began, before any work: a run that crashes still leaves a row
        (status ``running``) that says what was attempted and on what."""
        row = (
            new_uid(),
            checked_text(target, "target"),
            checked_text(device, "device"),
            checked_text(dtype, "dtype"),
            "running",
            time.time(),
            json_text(dict(hardware), "hardware"),
            json_text(dict(versions), "versions"),
            json_text(dict(budget), "budget"),
        )
        with self._database.write() as conn:
            cur = conn.execute(
                "INSERT INTO runs (uid, target, device, dtype, status, started_at, hardware, versions, "
                "budget) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            return int(cur.lastrowid)

    def finish(self, run_id: int, result: RunResult) -> None:
        """Attach the run's :class:`RunResult` (as its JSON document) and its headline numbers."""
        doc = json_text(result.to_json(), "result")
        with self._database.write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, speedup = ?, seconds = ?, result = ? "
                "WHERE id = ?",
                (
                    checked_text(result.status, "status"),
                    time.time(),
                    number_or_none(result.speedup, "speedup"),
                    number_or_none(result.seconds, "seconds"),
                    doc,
                    int(run_id),
                ),
            )
            if cur.rowcount != 1:
                raise StoreError(f"store {self._database.path}: no run {run_id}")

    def get(self, run_id: int) -> dict[str, Any]:
        row = self._database.row("SELECT * FROM runs WHERE id = ?", (int(run_id),))
        if row is None:
            raise StoreError(f"store {self._database.path}: no run {run_id}")
        return _run_dict(row)

    def recent(self, target: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Runs newest first (by start time), optionally of one target."""
        where, params = ("WHERE target = ?", (target,)) if target is not None else ("", ())
        rows = self._database.rows(
            f"SELECT * FROM runs {where} ORDER BY started_at DESC, id DESC LIMIT ?", (*params, int(limit))
        )
        return [_run_dict(r) for r in rows]

    def latest_result(
        self, target: str, device: str, dtype: str, *, ok_only: bool = True
    ) -> RunResult | None:
        """The newest finished result of this target on this device and dtype, for a sweep to
        compare against. Failed runs are skipped unless ``ok_only=False``: a failure is no
        baseline to measure a regression from."""
        status = "AND status = 'ok'" if ok_only else ""
        row = self._database.row(
            "SELECT result FROM runs WHERE target = ? AND device = ? AND dtype = ? "
            f"AND result IS NOT NULL {status} ORDER BY finished_at DESC, id DESC LIMIT 1",
            (target, device, dtype),
        )
        if row is None:
            return None
        try:
            return RunResult.from_json(json.loads(row["result"]))
        except (ValueError, TypeError) as exc:
            raise StoreError(
                f"store {self._database.path}: stored result of {target} cannot be read: {exc}"
            ) from exc

    # -- kernels and candidates ------------------------------------------------------------------

    def record_kernel(
        self,
        run_id: int,
        kernel_key: str,
        name: str,
        kind: str,
        share: float | None,
        time_ms: float | None,
    ) -> None:
        """One kernel of a run's profile. Recording the same kernel twice updates it."""
        row = (
            int(run_id),
            checked_text(kernel_key, "kernel_key"),
            checked_text(name, "name"),
            checked_text(kind, "kind"),
            number_or_none(share, "share"),
            number_or_none(time_ms, "time_ms"),
        )
        with self._database.write() as conn:
            require_run(self._database, conn, run_id)
            conn.execute(
                "INSERT INTO kernels (run_id, kernel_key, name, kind, share, time_ms) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, kernel_key) DO UPDATE SET "
                "name = excluded.name, kind = excluded.kind, share = excluded.share, "
                "time_ms = excluded.time_ms",
                row,
            )

    def kernels(self, run_id: int) -> list[dict[str, Any]]:
        """A run's kernels, heaviest first."""
        rows = self._database.rows(
            "SELECT run_id, kernel_key, name, kind, share, time_ms FROM kernels WHERE run_id = ? "
            "ORDER BY share DESC NULLS LAST, time_ms DESC NULLS LAST, kernel_key",
            (int(run_id),),
        )
        return [dict(r) for r in rows]

    def record_candidate(
        self,
        run_id: int,
        kernel_key: str,
        agent: str,
        label: str,
        source: str | None,
        config: Mapping[str, Any] | None,
        verdict: Mapping[str, Any] | Any,
        speedup: float | None,
        tokens: int = 0,
        cost_usd: float = 0.0,
        gpu_seconds: float = 0.0,
    ) -> int:
        """One candidate and its verdict (``Verdict.to_json()``; a ``Verdict`` is accepted too).
        Rejected candidates are kept as well: they are what the usage numbers and the agents'
        memory are made of."""
        if hasattr(verdict, "to_json"):
            verdict = verdict.to_json()
        if not isinstance(verdict, Mapping):
            raise StoreError(f"verdict must be a dict, got {type(verdict).__name__}")
        if source is not None and not isinstance(source, str):
            raise StoreError(f"candidate source must be a string, got {type(source).__name__}")
        verdict = dict(verdict)
        accepted = bool(verdict.get("accepted"))
        status = str(verdict.get("status") or ("accepted" if accepted else "rejected"))
        row = (
            new_uid(),
            int(run_id),
            checked_text(kernel_key, "kernel_key"),
            checked_text(agent, "agent"),
            checked_text(label, "label"),
            source,
            None if config is None else json_text(dict(config), "config"),
            json_text(verdict, "verdict"),
            int(accepted),
            status,
            number_or_none(speedup, "speedup"),
            checked_int(tokens, "tokens"),
            number_or_none(cost_usd, "cost_usd") or 0.0,
            number_or_none(gpu_seconds, "gpu_seconds") or 0.0,
            time.time(),
        )
        with self._database.write() as conn:
            require_run(self._database, conn, run_id)
            cur = conn.execute(
                "INSERT INTO candidates (uid, run_id, kernel_key, agent, label, source, config, verdict, "
                "accepted, status, speedup, tokens, cost_usd, gpu_seconds, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            return int(cur.lastrowid)

    def candidates(self, run_id: int, kernel_key: str | None = None) -> list[dict[str, Any]]:
        """A run's candidates in the order they were tried."""
        where, params = "WHERE run_id = ?", (int(run_id),)
        if kernel_key is not None:
            where, params = where + " AND kernel_key = ?", (*params, kernel_key)
        rows = self._database.rows(f"SELECT * FROM candidates {where} ORDER BY created_at, id", params)
        return [_candidate_dict(r) for r in rows]


def require_run(database: Database, conn: sqlite3.Connection, run_id: int) -> None:
    """Refuse a row that names a run this file does not have, with the run in the message (the
    foreign key alone would fail later, as an anonymous integrity error)."""
    if conn.execute("SELECT 1 FROM runs WHERE id = ?", (int(run_id),)).fetchone() is None:
        raise StoreError(f"store {database.path}: no run {run_id}")


def _run_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    d = dict(row)
    for k in ("hardware", "versions", "budget", "result"):
        d[k] = None if d[k] is None else json.loads(d[k])
    return d


def _candidate_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    d = dict(row)
    d["config"] = None if d["config"] is None else json.loads(d["config"])
    d["verdict"] = json.loads(d["verdict"])
    d["accepted"] = bool(d["accepted"])
    return d
