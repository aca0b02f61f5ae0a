"""What an attacker's code would try, as a sandbox job and as a model file (tests/test_isolation.py).

``look_for_secrets`` reads the secrets every way a process of the run could: its own environment,
its parent's ``/proc/<ppid>/environ`` and memory, every ``/proc/*/environ`` it can see, and a TCP
connection to a port on the loopback. No torch at module level: the sandbox tests stay cheap.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import time
from typing import Any


def look_for_secrets(port: int) -> dict[str, Any]:
    found: dict[str, Any] = {"pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid(),
                             "environ": dict(os.environ), "proc": {}}
    paths = sorted(set(glob.glob("/proc/[0-9]*/environ")) | {f"/proc/{os.getppid()}/environ"})
    for path in paths:
        try:
            with open(path, "rb") as f:
                found["proc"][path] = f.read().decode(errors="replace")
        except OSError as exc:
            found["proc"][path] = f"unreadable: {type(exc).__name__}"
    try:
        with open(f"/proc/{os.getppid()}/mem", "rb") as f:
            found["parent_mem"] = f"readable ({len(f.read(1))} byte)"
    except OSError as exc:
        found["parent_mem"] = f"unreadable: {type(exc).__name__}"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            sock.sendall(b"leak")
            found["connect"] = "connected"
    except OSError as exc:
        found["connect"] = f"failed: {type(exc).__name__}: {exc}"
    return found


def probe_job(payload: dict[str, Any]) -> dict[str, Any]:
    """A sandbox job: what a candidate running inside gate 2 could see."""
    return look_for_secrets(int(payload["port"]))


def sleep_job(payload: dict[str, Any]) -> None:
    time.sleep(float(payload["seconds"]))


def raise_job(payload: dict[str, Any]) -> None:
    raise ValueError("the job's own failure")


def segfault_job(payload: dict[str, Any]) -> None:
    """A real crash (a signal sent to oneself would be ignored by PID 1 of a PID namespace)."""
    import ctypes

    ctypes.string_at(0)


def allocate_job(payload: dict[str, Any]) -> int:
    return len(bytearray(int(payload["bytes"])))


MODEL_FILE = '''
import json, os, sys
sys.path.insert(0, {tests!r})
import torch
from isolation_probe import look_for_secrets

_found = look_for_secrets({port})
with open(os.path.join({out!r}, "probe-%d-%d.json" % (os.getpid(), id(_found))), "w") as _f:
    json.dump(_found, _f)


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''


def model_file(port: int, out: str) -> str:
    """A target whose module code looks for secrets at import and writes what it found into ``out``."""
    return MODEL_FILE.format(tests=os.path.dirname(os.path.abspath(__file__)), port=port, out=out)


def findings(out: str) -> list[dict[str, Any]]:
    result = []
    for path in sorted(glob.glob(os.path.join(out, "probe-*.json"))):
        with open(path) as f:
            result.append(json.load(f))
    return result


def heartbeat(conn: Any, path: str) -> None:
    """An isolated child's entry that writes a growing counter to ``path`` until it is killed. Each beat
    replaces the file whole (write aside, then rename), so a reader never sees it truncated and empty."""
    beat = 0
    while True:
        beat += 1
        with open(path + ".next", "w") as f:
            f.write(str(beat))
        os.replace(path + ".next", path)
        time.sleep(0.1)


def spawn_heartbeat_and_wait(path: str) -> None:
    """A trusted parent: starts an isolated heartbeat child, then waits to be killed."""
    from kernelopt_bot.harness.isolation import spawn_isolated

    child = spawn_isolated("tests.isolation_probe.heartbeat", path, writable=[os.path.dirname(path)])
    time.sleep(600)
    child.close()


def environment_names(payload: dict) -> list[str]:
    """A sandbox job: the environment variable names a sandboxed job sees (no secret may be among them)."""
    import os

    return sorted(os.environ)
