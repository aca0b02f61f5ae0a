"""The store: one SQLite file with runs, kernels, candidates, the verified-kernel cache and the
agents' experience memory.

Why SQLite through the standard library: it is one file a laptop, a self-hosted runner and a
nightly shard can all keep without a server, and the bot needs no extra dependency for it. Several
processes may share one file (one pipeline worker per GPU, a sweep merging shards while a run
finishes), so the file is opened in WAL mode with a 30 s busy timeout and every write is one
``BEGIN IMMEDIATE`` transaction: a writer waits for the lock instead of failing half way, and a
failed write leaves nothing behind.

The store never repairs or replaces a file it cannot read: a corrupt file, a file of another
program or a file written by a newer kernelopt is a :class:`StoreError` naming the path, and the
file is left exactly as it was. Bad input (a value JSON cannot hold, an unknown run, a pack entry
for another kernel) is refused before anything is written.

Row identity across machines: local ids (``run_id``, candidate ids) are SQLite rowids and differ
between files, so every row that can travel also has a ``uid``; :meth:`Store.export_json` and
:meth:`Store.import_json` match on those, which makes importing the same export twice a no-op.
Timestamps are Unix seconds (floats).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelopt_bot.errors import KerneloptError
from kernelopt_bot.folders import make_dirs
from kernelopt_bot.result import RunResult
from kernelopt_bot.stitch.pack import PackEntry, PackError, base_version

SCHEMA_VERSION = 1
"""The schema this code writes. Bump it and add a step to :data:`MIGRATIONS` together."""

EXPORT_FORMAT = "kernelopt-store"
DEFAULT_PATH = Path(".kernelopt") / "kernelopt.db"
BUSY_TIMEOUT_S = 30.0

MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}
"""``MIGRATIONS[v](conn)`` upgrades a version ``v`` file to ``v + 1`` inside the open transaction.

A fresh file is created at version 1 and then migrated like any old file, so a new file and an
upgraded one always have the same schema.
"""

_SCHEMA_V1 = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uid         TEXT NOT NULL UNIQUE,
    target      TEXT NOT NULL,
    device      TEXT NOT NULL,
    dtype       TEXT NOT NULL,
    status      TEXT NOT NULL,
    started_at  REAL NOT NULL,
    finished_at REAL,
    speedup     REAL,
    seconds     REAL,
    hardware    TEXT NOT NULL,
    versions    TEXT NOT NULL,
    budget      TEXT NOT NULL,
    result      TEXT
);
CREATE INDEX runs_target ON runs (target, device, dtype, finished_at);
CREATE TABLE kernels (
    run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kernel_key TEXT NOT NULL,
    name       TEXT NOT NULL,
    kind       TEXT NOT NULL,
    share      REAL,
    time_ms    REAL,
    PRIMARY KEY (run_id, kernel_key)
);
CREATE TABLE candidates (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uid         TEXT NOT NULL UNIQUE,
    run_id      INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kernel_key  TEXT NOT NULL,
    agent       TEXT NOT NULL,
    label       TEXT NOT NULL,
    source      TEXT,
    config      TEXT,
    verdict     TEXT NOT NULL,
    accepted    INTEGER NOT NULL,
    status      TEXT NOT NULL,
    speedup     REAL,
    tokens      INTEGER NOT NULL,
    cost_usd    REAL NOT NULL,
    gpu_seconds REAL NOT NULL,
    created_at  REAL NOT NULL
);
CREATE INDEX candidates_run ON candidates (run_id, kernel_key);
CREATE TABLE cache (
    kernel_key TEXT NOT NULL,
    gpu        TEXT NOT NULL,
    cc         TEXT NOT NULL,
    torch      TEXT NOT NULL,
    triton     TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('verified', 'negative')),
    entry      TEXT,
    speedup    REAL,
    reason     TEXT NOT NULL,
    run_id     INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    created_at REAL NOT NULL,
    uid        TEXT NOT NULL,
    PRIMARY KEY (kernel_key, gpu, cc, torch, triton)
);
CREATE TABLE cache_history (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    uid        TEXT NOT NULL UNIQUE,
    kernel_key TEXT NOT NULL,
    gpu        TEXT NOT NULL,
    cc         TEXT NOT NULL,
    torch      TEXT NOT NULL,
    triton     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    entry      TEXT,
    speedup    REAL,
    reason     TEXT NOT NULL,
    run_id     INTEGER REFERENCES runs (id) ON DELETE SET NULL,
    created_at REAL NOT NULL
);
CREATE INDEX cache_history_key ON cache_history (kernel_key);
CREATE TABLE memory (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    uid         TEXT NOT NULL UNIQUE,
    kernel_kind TEXT NOT NULL,
    gpu         TEXT NOT NULL,
    strategy    TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    speedup     REAL,
    note        TEXT NOT NULL,
    kernel_key  TEXT,
    created_at  REAL NOT NULL
);
CREATE INDEX memory_kind ON memory (kernel_kind, gpu);
"""


class StoreError(KerneloptError):
    """The store file cannot be used (corrupt, foreign, too new, locked) or input was refused."""


@dataclass(frozen=True)
class CacheHit:
    """What the cache knows about one kernel on one GPU and compiler versions.

    ``kind`` is ``"verified"`` (``entry`` is a :meth:`PackEntry.to_json` dict that passed every
    gate) or ``"negative"`` (searched, nothing passed; ``entry`` is ``None``). Either way an
    unchanged kernel need not be searched again.
    """

    kind: str
    entry: dict[str, Any] | None
    speedup: float | None
    reason: str
    run_id: int | None
    created_at: float

    @property
    def verified(self) -> bool:
        return self.kind == "verified"

    def pack_entry(self) -> PackEntry | None:
        """The cached replacement as a :class:`PackEntry`, ready to add to a pack."""
        return PackEntry.from_json(self.entry) if self.entry is not None else None


class Store:
    """One store file. Safe to open from several processes at once; one object per thread is not
    required (calls are serialized by a lock), but each process needs its own ``Store``.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else self.default_path()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        memory = str(self.path) == ":memory:"
        if not memory:
            try:
                make_dirs(self.path.parent)  # a .gitignore in what it creates (.kernelopt/)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for store {self.path}: {exc}") from exc
            if self.path.is_dir():
                raise StoreError(f"store path {self.path} is a directory, not a file")
        try:
            conn = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
        try:
            self._open(conn, memory)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    @staticmethod
    def default_path() -> Path:
        """``$KERNELOPT_DB`` if set, else ``.kernelopt/kernelopt.db`` under the working directory
        (per project, like ``.git``; CI points the variable at a cached or restored file)."""
        env = os.environ.get("KERNELOPT_DB")
        return Path(env) if env else DEFAULT_PATH

    # -- opening ---------------------------------------------------------------------------------

    def _open(self, conn: sqlite3.Connection, memory: bool) -> None:
        """Check the file before writing anything to it, then create or migrate its schema."""
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            version = self._file_version(conn)
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"store {self.path} is not a readable kernelopt database ({exc}); it was left "
                "untouched: move it aside or set KERNELOPT_DB to another path"
            ) from exc
        self._check_version(version)
        try:
            if not memory:
                self._enable_wal(conn)
            if version is None or version < SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Another process may have created or migrated the file since we looked.
                    version = self._file_version(conn)
                    self._check_version(version)
                    if version is None:
                        for statement in _split_sql(_SCHEMA_V1):
                            conn.execute(statement)
                        self._set_meta(conn, "app", "kernelopt")
                        self._set_meta(conn, "created_at", repr(time.time()))
                        version = 1
                    for v in range(version, SCHEMA_VERSION):
                        step = MIGRATIONS.get(v)
                        if step is None:
                            raise StoreError(
                                f"store {self.path} has schema version {v} and there is no "
                                f"migration from it to {v + 1}"
                            )
                        step(conn)
                    self._set_meta(conn, "schema_version", str(SCHEMA_VERSION))
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise StoreError(f"cannot prepare store {self.path}: {exc}") from exc

    def _file_version(self, conn: sqlite3.Connection) -> int | None:
        """The file's schema version; ``None`` for an empty (new) file."""
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables.discard("sqlite_sequence")
        if not tables:
            return None
        app = None
        if "meta" in tables:
            app = conn.execute("SELECT value FROM meta WHERE key = 'app'").fetchone()
        if app is None or app[0] != "kernelopt":
            raise StoreError(
                f"{self.path} is an SQLite database but not a kernelopt store "
                f"(tables: {', '.join(sorted(tables))}); it was left untouched"
            )
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise StoreError(f"store {self.path} has no valid schema_version in its meta table") from None

    def _check_version(self, version: int | None) -> None:
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"store {self.path} has schema version {version}, newer than this kernelopt "
                f"understands ({SCHEMA_VERSION}); upgrade kernelopt-bot or use another store"
            )

    @staticmethod
    def _enable_wal(conn: sqlite3.Connection) -> None:
        """WAL lets readers and one writer work at once. Switching needs a moment's exclusive
        access, so a process opening the file while another writes retries briefly."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @property
    def schema_version(self) -> int:
        row = self._one("SELECT value FROM meta WHERE key = 'schema_version'")
        return int(row["value"])

    # -- transactions ----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {self.path} is closed")
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. ``BEGIN IMMEDIATE`` takes the write lock up front, so two
        processes never deadlock upgrading read locks; on any error nothing is kept."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: cannot start a write: {exc}") from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"store {self.path}: write failed: {exc}") from exc
                raise

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Several reads that see one consistent state (a read transaction; writers in other
        processes carry on, WAL keeps our view fixed)."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN")
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: read failed: {exc}") from exc
            try:
                yield
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        with self._lock:
            conn = self._connection()
            try:
                cur = conn.execute(sql, params)
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: read failed: {exc}") from exc

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    # -- runs ------------------------------------------------------------------------------------

    def start_run(
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
            _uid(),
            _text(target, "target"),
            _text(device, "device"),
            _text(dtype, "dtype"),
            "running",
            time.time(),
            _json(dict(hardware), "hardware"),
            _json(dict(versions), "versions"),
            _json(dict(budget), "budget"),
        )
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO runs (uid, target, device, dtype, status, started_at, hardware, versions, "
                "budget) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            return int(cur.lastrowid)

    def finish_run(self, run_id: int, result: RunResult) -> None:
        """Attach the run's :class:`RunResult` (as its JSON document) and its headline numbers."""
        doc = _json(result.to_json(), "result")
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, speedup = ?, seconds = ?, result = ? "
                "WHERE id = ?",
                (
                    _text(result.status, "status"),
                    time.time(),
                    _float(result.speedup, "speedup"),
                    _float(result.seconds, "seconds"),
                    doc,
                    int(run_id),
                ),
            )
            if cur.rowcount != 1:
                raise StoreError(f"store {self.path}: no run {run_id}")

    def run(self, run_id: int) -> dict[str, Any]:
        row = self._one("SELECT * FROM runs WHERE id = ?", (int(run_id),))
        if row is None:
            raise StoreError(f"store {self.path}: no run {run_id}")
        return _run_dict(row)

    def runs(self, target: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Runs newest first (by start time), optionally of one target."""
        where, params = ("WHERE target = ?", (target,)) if target is not None else ("", ())
        rows = self._all(
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
        row = self._one(
            "SELECT result FROM runs WHERE target = ? AND device = ? AND dtype = ? "
            f"AND result IS NOT NULL {status} ORDER BY finished_at DESC, id DESC LIMIT 1",
            (target, device, dtype),
        )
        if row is None:
            return None
        try:
            return RunResult.from_json(json.loads(row["result"]))
        except (ValueError, TypeError) as exc:
            raise StoreError(f"store {self.path}: stored result of {target} cannot be read: {exc}") from exc

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
            _text(kernel_key, "kernel_key"),
            _text(name, "name"),
            _text(kind, "kind"),
            _float(share, "share"),
            _float(time_ms, "time_ms"),
        )
        with self._write() as conn:
            self._require_run(conn, run_id)
            conn.execute(
                "INSERT INTO kernels (run_id, kernel_key, name, kind, share, time_ms) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, kernel_key) DO UPDATE SET "
                "name = excluded.name, kind = excluded.kind, share = excluded.share, "
                "time_ms = excluded.time_ms",
                row,
            )

    def kernels(self, run_id: int) -> list[dict[str, Any]]:
        """A run's kernels, heaviest first."""
        rows = self._all(
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
            _uid(),
            int(run_id),
            _text(kernel_key, "kernel_key"),
            _text(agent, "agent"),
            _text(label, "label"),
            source,
            None if config is None else _json(dict(config), "config"),
            _json(verdict, "verdict"),
            int(accepted),
            status,
            _float(speedup, "speedup"),
            _int(tokens, "tokens"),
            _float(cost_usd, "cost_usd") or 0.0,
            _float(gpu_seconds, "gpu_seconds") or 0.0,
            time.time(),
        )
        with self._write() as conn:
            self._require_run(conn, run_id)
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
        rows = self._all(f"SELECT * FROM candidates {where} ORDER BY created_at, id", params)
        return [_candidate_dict(r) for r in rows]

    def _require_run(self, conn: sqlite3.Connection, run_id: int) -> None:
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (int(run_id),)).fetchone() is None:
            raise StoreError(f"store {self.path}: no run {run_id}")

    # -- verified-kernel cache -------------------------------------------------------------------

    def cache_verified(
        self,
        kernel_key: str,
        gpu: str,
        cc: str | None,
        torch_version: str,
        triton_version: str,
        entry: Mapping[str, Any] | PackEntry,
        speedup: float | None,
        run_id: int | None,
    ) -> None:
        """Remember a replacement that passed every gate for this kernel, GPU and versions.

        The latest verification wins (a newer measurement of the same code on the same stack is
        the better estimate, and an earlier high number may have been noise); every write is also
        appended to :meth:`cache_history`. The entry is checked as a pack entry for this kernel
        first, so the cache never holds something a pack would refuse.
        """
        if isinstance(entry, PackEntry):
            entry = entry.to_json()
        try:
            parsed = PackEntry.from_json(dict(entry))
        except (PackError, TypeError, ValueError) as exc:
            raise StoreError(f"refusing to cache an invalid pack entry: {exc}") from exc
        if parsed.key != kernel_key:
            raise StoreError(
                f"refusing to cache: pack entry is for kernel {parsed.key[:12]}, not {kernel_key[:12]}"
            )
        self._cache_write(
            kernel_key, gpu, cc, torch_version, triton_version, "verified",
            _json(parsed.to_json(), "entry"), _float(speedup, "speedup"), "verified", run_id,
        )  # fmt: skip

    def cache_negative(
        self,
        kernel_key: str,
        gpu: str,
        cc: str | None,
        torch_version: str,
        triton_version: str,
        reason: str,
        run_id: int | None,
    ) -> None:
        """Remember that this kernel was searched here and nothing passed, so an unchanged
        kernel is not searched again. A negative never replaces a verified entry for the same
        key: that replacement still passed every gate on this exact stack (use
        :meth:`invalidate` to drop it). The attempt is still recorded in the history."""
        self._cache_write(
            kernel_key, gpu, cc, torch_version, triton_version, "negative",
            None, None, _text(reason, "reason"), run_id,
        )  # fmt: skip

    def _cache_write(
        self,
        kernel_key: str,
        gpu: str,
        cc: str | None,
        torch_version: str,
        triton_version: str,
        kind: str,
        entry: str | None,
        speedup: float | None,
        reason: str,
        run_id: int | None,
    ) -> None:
        key = _cache_key(kernel_key, gpu, cc, torch_version, triton_version)
        row = {
            "uid": _uid(),
            "kind": kind,
            "entry": entry,
            "speedup": speedup,
            "reason": reason,
            "run_id": None if run_id is None else int(run_id),
            "created_at": time.time(),
        }
        with self._write() as conn:
            if run_id is not None:
                self._require_run(conn, run_id)
            _insert_history(conn, key, row)
            _upsert_cache(conn, key, row)

    def lookup(
        self, kernel_key: str, gpu: str, cc: str | None, torch_version: str, triton_version: str
    ) -> CacheHit | None:
        """The cache's answer for this exact kernel, GPU, compute capability and versions (local
        build tags ignored), or ``None``: then the kernel has to be searched."""
        key = _cache_key(kernel_key, gpu, cc, torch_version, triton_version)
        row = self._one(
            "SELECT kind, entry, speedup, reason, run_id, created_at FROM cache WHERE kernel_key = ? "
            "AND gpu = ? AND cc = ? AND torch = ? AND triton = ?",
            key,
        )
        if row is None:
            return None
        return CacheHit(
            kind=row["kind"],
            entry=None if row["entry"] is None else json.loads(row["entry"]),
            speedup=row["speedup"],
            reason=row["reason"],
            run_id=row["run_id"],
            created_at=row["created_at"],
        )

    def cache_history(self, kernel_key: str | None = None) -> list[dict[str, Any]]:
        """Every cache write, newest first: what was verified or given up on, when and where."""
        where, params = ("WHERE kernel_key = ?", (kernel_key,)) if kernel_key is not None else ("", ())
        rows = self._all(f"SELECT * FROM cache_history {where} ORDER BY created_at DESC, id DESC", params)
        return [_cache_dict(r) for r in rows]

    def invalidate(self, kernel_key: str | None = None) -> int:
        """Drop cache rows (all, or one kernel's on every GPU and version); returns how many.
        The history stays."""
        with self._write() as conn:
            if kernel_key is None:
                cur = conn.execute("DELETE FROM cache")
            else:
                cur = conn.execute("DELETE FROM cache WHERE kernel_key = ?", (kernel_key,))
            return int(cur.rowcount)

    # -- experience memory -----------------------------------------------------------------------

    def remember(
        self,
        kernel_kind: str,
        gpu: str,
        strategy: str,
        outcome: str,
        speedup: float | None,
        note: str,
        kernel_key: str | None = None,
    ) -> int:
        """One lesson for later searches: which strategy was tried on which kind of kernel on
        which GPU, and how it went (``outcome`` is ``"accepted"`` or what stopped it, e.g.
        ``"rejected by correctness"``)."""
        row = (
            _uid(),
            _text(kernel_kind, "kernel_kind"),
            _text(gpu, "gpu").strip(),
            _text(strategy, "strategy"),
            _text(outcome, "outcome"),
            _float(speedup, "speedup"),
            _text(note, "note"),
            None if kernel_key is None else _text(kernel_key, "kernel_key"),
            time.time(),
        )
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO memory (uid, kernel_kind, gpu, strategy, outcome, speedup, note, kernel_key, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
            return int(cur.lastrowid)

    def recall(self, kernel_kind: str, gpu: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """Lessons for a kernel kind (on one GPU, or any), most useful first: accepted strategies
        by speedup (highest first, unmeasured after measured), then failures newest first so the
        agents do not repeat them."""
        where, params = "WHERE kernel_kind = ?", (kernel_kind,)
        if gpu is not None:
            where, params = where + " AND gpu = ?", (*params, gpu.strip())
        rows = self._all(
            f"SELECT id, kernel_kind, gpu, strategy, outcome, speedup, note, kernel_key, created_at "
            f"FROM memory {where} ORDER BY (outcome = 'accepted') DESC, "
            "CASE WHEN outcome = 'accepted' THEN speedup END DESC NULLS LAST, created_at DESC, id DESC "
            "LIMIT ?",
            (*params, int(limit)),
        )
        return [dict(r) for r in rows]

    # -- export / import -------------------------------------------------------------------------

    def export_json(self) -> dict[str, Any]:
        """Everything in the store as plain JSON data, rows referring to runs by ``uid``: for CI
        runners without a persistent disk, which keep history on a branch or as an artifact."""
        with self._snapshot():
            runs = self._all("SELECT * FROM runs ORDER BY id")
            uid_of = {r["id"]: r["uid"] for r in runs}

            def portable(sql: str) -> list[dict[str, Any]]:
                """Rows without local ids; a run is named by its uid."""
                out = []
                for row in self._all(sql):
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
        with self._write() as conn:
            try:
                return self._import(conn, data)
            except (
                sqlite3.IntegrityError,
                sqlite3.InterfaceError,
                sqlite3.ProgrammingError,
                AttributeError,
                KeyError,
                TypeError,
                ValueError,
            ) as exc:
                raise StoreError(f"store {self.path}: malformed export, nothing imported: {exc!r}") from exc

    def _import(self, conn: sqlite3.Connection, data: Mapping[str, Any]) -> int:
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
            changed += _insert_history(conn, key, {**h, "run_id": local_run(h.get("run_uid"), False)})
        for c in data.get("cache", []):
            key = (c["kernel_key"], c["gpu"], c["cc"], c["torch"], c["triton"])
            changed += _upsert_cache(conn, key, {**c, "run_id": local_run(c.get("run_uid"), False)})
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


# -- helpers ---------------------------------------------------------------------------------------


def _split_sql(script: str) -> list[str]:
    """Statements of a DDL script, so they run inside our own transaction (``executescript``
    would commit first)."""
    return [s.strip() for s in script.split(";") if s.strip()]


def _uid() -> str:
    return uuid.uuid4().hex


def _cache_key(
    kernel_key: str, gpu: str, cc: str | None, torch_version: str, triton_version: str
) -> tuple[str, str, str, str, str]:
    """The five fields a cache row is found by; ``None`` compute capability is stored as ``""``
    because SQL NULLs never compare equal in a primary key."""
    return (
        _text(kernel_key, "kernel_key"),
        _text(gpu, "gpu").strip(),
        "" if cc is None else str(cc).strip(),
        base_version(_text(torch_version, "torch_version")),
        base_version(_text(triton_version, "triton_version")),
    )


def _insert_history(conn: sqlite3.Connection, key: tuple[str, ...], row: Mapping[str, Any]) -> int:
    cur = conn.execute(
        "INSERT INTO cache_history (uid, kernel_key, gpu, cc, torch, triton, kind, entry, speedup, "
        "reason, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING",
        (row["uid"], *key, row["kind"], row["entry"], row["speedup"], row["reason"], row["run_id"],
         row["created_at"]),
    )  # fmt: skip
    return cur.rowcount


def _upsert_cache(conn: sqlite3.Connection, key: tuple[str, ...], row: Mapping[str, Any]) -> int:
    """Write a cache row if it ranks above the one there: verified beats negative, then newer
    beats older. One rule for live writes and imports keeps merging order-independent."""
    if row["kind"] not in ("verified", "negative"):
        raise ValueError(f"cache kind must be 'verified' or 'negative', got {row['kind']!r}")
    have = conn.execute(
        "SELECT kind, created_at FROM cache WHERE kernel_key = ? AND gpu = ? AND cc = ? AND torch = ? "
        "AND triton = ?",
        key,
    ).fetchone()
    if have is not None:
        new_rank = (row["kind"] == "verified", row["created_at"])
        old_rank = (have[0] == "verified", have[1])
        if new_rank <= old_rank:
            return 0
    conn.execute(
        "INSERT INTO cache (kernel_key, gpu, cc, torch, triton, kind, entry, speedup, reason, run_id, "
        "created_at, uid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (kernel_key, gpu, cc, torch, triton) DO UPDATE SET kind = excluded.kind, "
        "entry = excluded.entry, speedup = excluded.speedup, reason = excluded.reason, "
        "run_id = excluded.run_id, created_at = excluded.created_at, uid = excluded.uid",
        (*key, row["kind"], row["entry"], row["speedup"], row["reason"], row["run_id"], row["created_at"],
         row["uid"]),
    )  # fmt: skip
    return 1


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


def _cache_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    d = dict(row)
    d["entry"] = None if d["entry"] is None else json.loads(d["entry"])
    d["cc"] = d["cc"] or None
    return d


def _json(value: Any, what: str) -> str:
    """JSON text, refusing what JSON cannot hold (before anything is written)."""
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} cannot be stored as JSON: {exc}") from exc


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise StoreError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _float(value: Any, what: str) -> float | None:
    """A number or ``None``; NaN and infinities become ``None`` (SQLite would store NaN as NULL
    anyway, and "not measured" is what they mean here)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StoreError(f"{what} must be a number or None, got {value!r}")
    value = float(value)
    return value if math.isfinite(value) else None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StoreError(f"{what} must be an int, got {value!r}")
    return value
