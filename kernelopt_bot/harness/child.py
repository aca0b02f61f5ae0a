"""Entry point of every isolated child: ``python -m kernelopt_bot.harness.child <fd>``.

The trusted parent (:func:`kernelopt_bot.harness.isolation.spawn_isolated`) passes one socket as
file descriptor ``fd`` and sends ``(entry, args)`` over it: the import path of a module-level
function and its arguments. The child calls ``entry(conn, *args)``; from then on that function
and the parent talk over the same channel.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from kernelopt_bot.harness.isolation import Channel


def main(argv: list[str]) -> int:
    conn = Channel(int(argv[1]))
    try:
        entry, args = conn.recv()
    except EOFError:
        return 3  # the parent went away before asking anything
    except OSError as exc:
        print(f"kernelopt child: {exc}", file=sys.stderr)
        return 3
    module_name, _, fn_name = entry.rpartition(".")
    fn = getattr(importlib.import_module(module_name), fn_name)
    fn(conn, *args)
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # Exit now: threads the entry left behind (a compile past its deadline, a candidate's own
    # thread, Inductor's workers) would otherwise hold the process until the parent kills it.
    os._exit(code)
