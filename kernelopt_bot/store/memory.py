"""The agents' experience memory: which strategy was tried on which kind of kernel on which GPU,
and how it went, so later searches start from what worked and skip what failed.

Lessons are kept by kernel kind rather than by kernel key: a strategy that helped one pointwise
kernel on an H200 is worth trying first on the next one, which has another key.
"""

from __future__ import annotations

import time
from typing import Any

from kernelopt_bot.store.database import Database, checked_text, new_uid, number_or_none


class AgentMemory:
    """The memory table of one store file."""

    def __init__(self, database: Database) -> None:
        self._database = database

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
            new_uid(),
            checked_text(kernel_kind, "kernel_kind"),
            checked_text(gpu, "gpu").strip(),
            checked_text(strategy, "strategy"),
            checked_text(outcome, "outcome"),
            number_or_none(speedup, "speedup"),
            checked_text(note, "note"),
            None if kernel_key is None else checked_text(kernel_key, "kernel_key"),
            time.time(),
        )
        with self._database.write() as conn:
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
        rows = self._database.rows(
            f"SELECT id, kernel_kind, gpu, strategy, outcome, speedup, note, kernel_key, created_at "
            f"FROM memory {where} ORDER BY (outcome = 'accepted') DESC, "
            "CASE WHEN outcome = 'accepted' THEN speedup END DESC NULLS LAST, created_at DESC, id DESC "
            "LIMIT ?",
            (*params, int(limit)),
        )
        return [dict(r) for r in rows]
