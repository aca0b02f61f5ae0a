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
import select
import signal
import sys
import threading

from kernelopt_bot.harness.isolation import Channel


def _exit_with_the_parent(fd: int) -> None:
    """Die as soon as the parent's end of the channel closes.

    A parent killed at a deadline (the suite's, a sweep's, a CI job's) cannot clean up after
    itself, and this child runs in a session and namespaces of its own, out of reach of the
    caller's process-group kill. Without this it would go on using the CPU and GPU, and write into
    a run that is over. ``POLLRDHUP`` reports the peer's close without consuming the messages the
    entry reads from the same socket. Killing our own process group takes this child's children
    with it (in a PID namespace, the kernel ends the rest when this, its first process, exits).
    """
    events = getattr(select, "POLLRDHUP", 0)
    if not events:  # not Linux: the deadline kill of the parent is all there is
        return

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, events)
        while True:
            for _fd, happened in poller.poll():
                if happened & (events | select.POLLHUP | select.POLLERR | select.POLLNVAL):
                    with contextlib.suppress(OSError):
                        os.killpg(os.getpgrp(), signal.SIGKILL)
                    os._exit(3)

    threading.Thread(target=watch, name="kernelopt-parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    _exit_with_the_parent(int(argv[1]))
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
