"""Export and import of a whole store as one JSON document, to carry it between runners that share
no disk: a cache verified on one runner saves another the search.

Row identity across machines: local ids (``run_id``, candidate ids) are SQLite rowids and differ
between files, so every row that can travel also has a ``uid``; :meth:`Transfer.export_json` and
:meth:`Transfer.import_json` match on those, which makes importing the same export twice a no-op.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from kernelopt_bot.store.cache import insert_history_row, merge_cache_row
from kernelopt_bot.store.database import SCHEMA_VERSION, Database, StoreError

EXPORT_FORMAT = "kernelopt-store"


class Transfer:
    """Every table of one store file, as one JSON document out and merged back in."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def export_json(self) -> dict[str, Any]:
        """Everything in the store as plain JSON data, rows referring to runs by ``uid``: for CI
        runners without a persistent disk, which keep history on a branch or as an artifact."""
        database = self._database
        with database.snapshot():
            runs = database.rows("SELECT * FROM runs ORDER BY id")
            uid_of = {r["id"]: r["uid"] for r in runs}

            def portable(sql: str) -> list[dict[str, Any]]:
                """Rows without local ids; a run is named by its uid."""
                out = []
                for row in database.rows(sql):
                    d = {k: v for k, v in row.items() if k not in ("id", "run_id")}
                    if "run_id" in row:
                        d["run_uid"] = uid_of.get(row["run_id"])
                    out.append(d)
                return out

            return {
                "format": EXPORT_FORMAT,
                "schema_version": SCHEMA_VERSION,
                "exported_at": time.time(),
                "runs": [{k: v for k, v in r.items() if k != "id"} for r in runs],
                "kernels": portable("SELECT * FROM kernels ORDER BY run_id, kernel_key"),
                "candidates": portable("SELECT * FROM candidates ORDER BY id"),
                "cache": portable("SELECT * FROM cache ORDER BY kernel_key, gpu, cc, torch, triton"),
                "cache_history": portable("SELECT * FROM cache_history ORDER BY id"),
                "memory": portable("SELECT * FROM memory ORDER BY id"),
            }

    def import_json(self, data: Mapping[str, Any]) -> int:
        """Merge an :meth:`export_json` document; returns how many rows were added or changed.

        Rows are matched by ``uid`` (and the cache by its key), so importing the same export
        twice adds nothing. A run known here is updated only if the import has a newer finish;
        cache rows follow the live rule (verified beats negative, then newer wins). The whole
        import is one transaction: a malformed document changes nothing.
        """
        if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
            raise StoreError(f"not a {EXPORT_FORMAT} export")
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise StoreError(
                f"export has schema version {version!r}; this kernelopt reads up to {SCHEMA_VERSION}"
            )
        with self._database.write() as conn:
            try:
                return _merge(conn, data)
            except (
                sqlite3.IntegrityError,
                sqlite3.InterfaceError,
                sqlite3.ProgrammingError,
                AttributeError,
                KeyError,
                TypeError,
                ValueError,
            ) as exc:
                raise StoreError(
                    f"store {self._database.path}: malformed export, nothing imported: {exc!r}"
                ) from exc


def _merge(conn: sqlite3.Connection, data: Mapping[str, Any]) -> int:
    """The rows of an export written into the open transaction; returns how many changed."""
    changed = 0
    run_cols = (
        "uid", "target", "device", "dtype", "status", "started_at", "finished_at", "speedup",
        "seconds", "hardware", "versions", "budget", "result",
    )  # fmt: skip
    for r in data.get("runs", []):
        values = tuple(r.get(c) for c in run_cols)
        local = conn.execute("SELECT id, finished_at FROM runs WHERE uid = ?", (r["uid"],)).fetchone()
        if local is None:
            conn.execute(
                f"INSERT INTO runs ({', '.join(run_cols)}) VALUES ({', '.join('?' * len(run_cols))})",
                values,
            )
            changed += 1
        elif r.get("finished_at") is not None and (local[1] is None or r["finished_at"] > local[1]):
            sets = ", ".join(f"{c} = ?" for c in run_cols[1:])
            conn.execute(f"UPDATE runs SET {sets} WHERE uid = ?", (*values[1:], r["uid"]))
            changed += 1
    ids = dict(conn.execute("SELECT uid, id FROM runs").fetchall())

    def local_run(uid: str | None, required: bool) -> int | None:
        if uid is None or uid not in ids:
            if required:
                raise ValueError(f"row refers to run {uid!r}, which is not in the export or the store")
            return None
        return ids[uid]

    for k in data.get("kernels", []):
        cur = conn.execute(
            "INSERT INTO kernels (run_id, kernel_key, name, kind, share, time_ms) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, kernel_key) DO NOTHING",
            (local_run(k["run_uid"], True), k["kernel_key"], k["name"], k["kind"], k.get("share"),
             k.get("time_ms")),
        )  # fmt: skip
        changed += cur.rowcount
    cand_cols = (
        "uid", "kernel_key", "agent", "label", "source", "config", "verdict", "accepted", "status",
        "speedup", "tokens", "cost_usd", "gpu_seconds", "created_at",
    )  # fmt: skip
    for c in data.get("candidates", []):
        cur = conn.execute(
            f"INSERT INTO candidates (run_id, {', '.join(cand_cols)}) "
            f"VALUES (?, {', '.join('?' * len(cand_cols))}) ON CONFLICT (uid) DO NOTHING",
            (local_run(c["run_uid"], True), *(c[k] for k in cand_cols)),
        )
        changed += cur.rowcount
    for h in data.get("cache_history", []):
        key = (h["kernel_key"], h["gpu"], h["cc"], h["torch"], h["triton"])
        changed += insert_history_row(conn, key, {**h, "run_id": local_run(h.get("run_uid"), False)})
    for c in data.get("cache", []):
        key = (c["kernel_key"], c["gpu"], c["cc"], c["torch"], c["triton"])
        changed += merge_cache_row(conn, key, {**c, "run_id": local_run(c.get("run_uid"), False)})
    mem_cols = (
        "uid", "kernel_kind", "gpu", "strategy", "outcome", "speedup", "note", "kernel_key", "created_at",
    )  # fmt: skip
    for m in data.get("memory", []):
        cur = conn.execute(
            f"INSERT INTO memory ({', '.join(mem_cols)}) VALUES ({', '.join('?' * len(mem_cols))}) "
            "ON CONFLICT (uid) DO NOTHING",
            tuple(m.get(k) for k in mem_cols),
        )
        changed += cur.rowcount
    return changed
