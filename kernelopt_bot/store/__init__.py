"""The store: one SQLite file with runs, kernels, candidates, the verified-kernel cache and the
agents' experience memory.

Why SQLite through the standard library: it is one file a laptop, a self-hosted runner and a
nightly shard can all keep without a server, and the bot needs no extra dependency for it.

One module per job, each a small class over the open file:

* ``database``: the file itself (opening, schema and migrations, transactions, value checks);
* ``runs``: the run log (runs, their kernels and candidates), as ``store.runs``;
* ``cache``: the verified-kernel cache, as ``store.cache``;
* ``memory``: the agents' experience memory, as ``store.memory``;
* ``transfer``: export and import of the whole file between runners, as ``store.transfer``.
"""

from __future__ import annotations

from pathlib import Path

from kernelopt_bot.pack.format import base_version
from kernelopt_bot.store.cache import CacheHit, VerifiedKernelCache
from kernelopt_bot.store.database import Database, StoreError
from kernelopt_bot.store.memory import AgentMemory
from kernelopt_bot.store.runs import RunLog
from kernelopt_bot.store.transfer import Transfer

__all__ = [
    "AgentMemory",
    "CacheHit",
    "Database",
    "RunLog",
    "Store",
    "StoreError",
    "Transfer",
    "VerifiedKernelCache",
    "base_version",
]


class Store(Database):
    """One open store file with its jobs side by side: ``store.runs``, ``store.cache``,
    ``store.memory`` and ``store.transfer``.

    The store is the database it opens (path, schema version, closing, ``with``) rather than a
    wrapper around one, so nothing of the file's lifetime is said twice; the jobs each hold the
    same open file and refuse with a :class:`StoreError` once it is closed.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__(path)
        self.runs = RunLog(self)
        self.cache = VerifiedKernelCache(self)
        self.memory = AgentMemory(self)
        self.transfer = Transfer(self)
