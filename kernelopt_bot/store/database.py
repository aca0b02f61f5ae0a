"""The store's SQLite file: opening it, its schema and migrations, transactions, and the checks
every value passes before it is written.

Several processes may share one file (one pipeline worker per GPU, a sweep merging shards while a
run finishes), so the file is opened in WAL mode with a 30 s busy timeout and every write is one
``BEGIN IMMEDIATE`` transaction: a writer waits for the lock instead of failing half way, and a
failed write leaves nothing behind.

The store never repairs or replaces a file it cannot read: a corrupt file, a file of another
program or a file written by a newer kernelopt is a :class:`StoreError` naming the path, and the
file is left exactly as it was. Bad input (a value JSON cannot hold, an unknown run) is refused
before anything is written. Timestamps are Unix seconds (floats).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from kernelopt_bot.errors import KerneloptError
from kernelopt_bot.folders import make_dirs

SCHEMA_VERSION = 1
"""The schema this code writes. Bump it and add a step to :data:`MIGRATIONS` together."""

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
"""The whole file's schema in one place: tables refer to each other (runs are the parent of
kernels, candidates and cache rows), and one schema version covers them all."""


def _split_sql(script: str) -> list[str]:
    """Statements of a DDL script, so they run inside our own transaction (``executescript``
    would commit first)."""
    return [s.strip() for s in script.split(";") if s.strip()]


_Opened = TypeVar("_Opened", bound="Database")


class StoreError(KerneloptError):
    """The store file cannot be used (corrupt, foreign, too new, locked) or input was refused."""


class UnreadableStore(StoreError):
    """The file named as the store is not a kernelopt database (not SQLite, or another program's):
    what the user pointed us at (exit 2, bad input), like a pack that is not JSON."""

    exit_code = 2


class Database:
    """One open store file: its connection, schema and transactions, for the store's jobs to
    read and write through. Safe to open from several processes at once; one object per thread
    is not required (calls are serialized by a lock), but each process needs its own.
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
            raise UnreadableStore(
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
            raise UnreadableStore(
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

    def __enter__(self: _Opened) -> _Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    @property
    def schema_version(self) -> int:
        row = self.row("SELECT value FROM meta WHERE key = 'schema_version'")
        return int(row["value"])

    # -- transactions ----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {self.path} is closed")
        return self._conn

    def _begin(self, statement: str, failure: str) -> sqlite3.Connection:
        """Start a transaction (the caller holds the lock); ``failure`` says what could not be
        done if the file refuses."""
        conn = self._connection()
        try:
            conn.execute(statement)
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: {failure}: {exc}") from exc
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction. ``BEGIN IMMEDIATE`` takes the write lock up front, so two
        processes never deadlock upgrading read locks; on any error nothing is kept."""
        with self._lock:
            conn = self._begin("BEGIN IMMEDIATE", "cannot start a write")
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
    def snapshot(self) -> Iterator[None]:
        """Several reads that see one consistent state (a read transaction; writers in other
        processes carry on, WAL keeps our view fixed)."""
        with self._lock:
            conn = self._begin("BEGIN", "read failed")
            try:
                yield
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """Every row of a query, each as a dict by column name."""
        with self._lock:
            conn = self._connection()
            try:
                cur = conn.execute(sql, params)
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: read failed: {exc}") from exc

    def row(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """The first row of a query, or ``None``."""
        found = self.rows(sql, params)
        return found[0] if found else None


# -- values ----------------------------------------------------------------------------------------
# Every value is checked before a write starts, so bad input never leaves half a row behind.


def new_uid() -> str:
    """A row's identity across store files (local ids are rowids and differ between files)."""
    return uuid.uuid4().hex


def json_text(value: Any, what: str) -> str:
    """JSON text, refusing what JSON cannot hold (before anything is written)."""
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} cannot be stored as JSON: {exc}") from exc


def checked_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise StoreError(f"{what} must be a string, got {type(value).__name__}")
    return value


def number_or_none(value: Any, what: str) -> float | None:
    """A number or ``None``; NaN and infinities become ``None`` (SQLite would store NaN as NULL
    anyway, and "not measured" is what they mean here)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StoreError(f"{what} must be a number or None, got {value!r}")
    value = float(value)
    return value if math.isfinite(value) else None


def checked_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StoreError(f"{what} must be an int, got {value!r}")
    return value
