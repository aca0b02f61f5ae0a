"""The verified-kernel cache: what a search found for one kernel on one GPU and compiler versions.

A kernel verified once (or searched without success) is not searched again on the same stack:
the same fused kernels recur across models and runs. A row is found by the kernel's key, the GPU,
its compute capability and the torch and Triton versions without their local build tags. Every
write is also appended to a history, which outlives :meth:`VerifiedKernelCache.invalidate`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernelopt_bot.pack.format import PackEntry, PackError, base_version
from kernelopt_bot.store.database import (
    Database,
    StoreError,
    checked_text,
    json_text,
    new_uid,
    number_or_none,
)
from kernelopt_bot.store.runs import require_run


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


class VerifiedKernelCache:
    """The cache and cache_history tables of one store file."""

    def __init__(self, database: Database) -> None:
        self._database = database

    def record_verified(
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
        appended to :meth:`history`. The entry is checked as a pack entry for this kernel first,
        so the cache never holds something a pack would refuse.
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
        document, measured = json_text(parsed.to_json(), "entry"), number_or_none(speedup, "speedup")
        key = _cache_key(kernel_key, gpu, cc, torch_version, triton_version)
        self._write(key, "verified", document, measured, "verified", run_id)

    def record_negative(
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
        reason = checked_text(reason, "reason")
        key = _cache_key(kernel_key, gpu, cc, torch_version, triton_version)
        self._write(key, "negative", None, None, reason, run_id)

    def withdraw(
        self, kernel_key: str, gpu: str, cc: str | None, torch_version: str, triton_version: str,
        run_id: int | None,
    ) -> None:
        """A verified entry that did not hold up end to end (the final benchmark, on fresh
        processes, found it short of gamma) is replaced by a negative for the same key; other
        GPUs' and versions' rows stay. The history keeps both writes."""
        key = _cache_key(kernel_key, gpu, cc, torch_version, triton_version)
        self._write(key, "negative", None, None,
                    "a replacement passed the gates but not the final end-to-end benchmark", run_id,
                    replace=True)

    def _write(
        self,
        key: tuple[str, str, str, str, str],
        kind: str,
        entry: str | None,
        speedup: float | None,
        reason: str,
        run_id: int | None,
        replace: bool = False,
    ) -> None:
        """One cache write (already checked): appended to the history, and kept as the answer
        for its key if it ranks above the one there (``replace``: whatever is there)."""
        row = {
            "uid": new_uid(),
            "kind": kind,
            "entry": entry,
            "speedup": speedup,
            "reason": reason,
            "run_id": None if run_id is None else int(run_id),
            "created_at": time.time(),
        }
        with self._database.write() as conn:
            if run_id is not None:
                require_run(self._database, conn, run_id)
            insert_history_row(conn, key, row)
            if replace:
                conn.execute("DELETE FROM cache WHERE kernel_key = ? AND gpu = ? AND cc = ? AND torch = ? "
                             "AND triton = ?", key)
            merge_cache_row(conn, key, row)

    def lookup(
        self, kernel_key: str, gpu: str, cc: str | None, torch_version: str, triton_version: str
    ) -> CacheHit | None:
        """The cache's answer for this exact kernel, GPU, compute capability and versions (local
        build tags ignored), or ``None``: then the kernel has to be searched."""
        key = _cache_key(kernel_key, gpu, cc, torch_version, triton_version)
        row = self._database.row(
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

    def history(self, kernel_key: str | None = None) -> list[dict[str, Any]]:
        """Every cache write, newest first: what was verified or given up on, when and where."""
        where, params = ("WHERE kernel_key = ?", (kernel_key,)) if kernel_key is not None else ("", ())
        rows = self._database.rows(
            f"SELECT * FROM cache_history {where} ORDER BY created_at DESC, id DESC", params
        )
        return [_cache_dict(r) for r in rows]

    def invalidate(self, kernel_key: str | None = None) -> int:
        """Drop cache rows (all, or one kernel's on every GPU and version); returns how many.
        The history stays."""
        with self._database.write() as conn:
            if kernel_key is None:
                cur = conn.execute("DELETE FROM cache")
            else:
                cur = conn.execute("DELETE FROM cache WHERE kernel_key = ?", (kernel_key,))
            return int(cur.rowcount)


def insert_history_row(conn: sqlite3.Connection, key: tuple[str, ...], row: Mapping[str, Any]) -> int:
    """Append one cache write to the history; a row already there (same ``uid``) is kept as is."""
    cur = conn.execute(
        "INSERT INTO cache_history (uid, kernel_key, gpu, cc, torch, triton, kind, entry, speedup, "
        "reason, run_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING",
        (row["uid"], *key, row["kind"], row["entry"], row["speedup"], row["reason"], row["run_id"],
         row["created_at"]),
    )  # fmt: skip
    return cur.rowcount


def merge_cache_row(conn: sqlite3.Connection, key: tuple[str, ...], row: Mapping[str, Any]) -> int:
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


def _cache_key(
    kernel_key: str, gpu: str, cc: str | None, torch_version: str, triton_version: str
) -> tuple[str, str, str, str, str]:
    """The five fields a cache row is found by; ``None`` compute capability is stored as ``""``
    because SQL NULLs never compare equal in a primary key."""
    return (
        checked_text(kernel_key, "kernel_key"),
        checked_text(gpu, "gpu").strip(),
        "" if cc is None else str(cc).strip(),
        base_version(checked_text(torch_version, "torch_version")),
        base_version(checked_text(triton_version, "triton_version")),
    )


def _cache_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    d = dict(row)
    d["entry"] = None if d["entry"] is None else json.loads(d["entry"])
    d["cc"] = d["cc"] or None
    return d
