"""Engines for the supervisor's tests: real child processes (started by ``spawn_isolated``) that
speak the engine's protocol and go down the ways a real engine can, in the middle of announced
work. The supervisor under test is the real one; only what the engine does is scripted here, by
the request's ``script`` (what to do while no work is quarantined)."""

from __future__ import annotations

import ctypes
import json
import os
import time
from typing import Any

from kernelopt_bot.harness.isolation import Channel


def engine(conn: Channel, request: dict[str, Any]) -> None:
    script = request["script"]
    quarantine = request.get("quarantine") or {}
    conn.send(("log", f"engine up; quarantine {sorted(quarantine)}"))
    if script == "crash outside work":
        os._exit(9)
    for key in request.get("keys", ["variant-a"]):
        if key in quarantine:
            continue  # skipped, as a real engine's quarantine does
        conn.send(("begin", {"key": key, "label": f"timing {key}", "deadline_s": request.get("deadline_s", 30),
                             "ends_run": request.get("ends_run")}))
        if script == "crash in work" or (script == "crash in every work"):
            ctypes.string_at(0)  # a real segmentation fault (a signal sent to itself is ignored by a namespace's PID 1)
        if script == "hang in work":
            time.sleep(3600)
        if script == "poisoned in work":
            conn.send(("poisoned", {"key": key, "label": f"timing {key}", "reason": "CUDA error: an illegal memory access"}))
            os._exit(4)
        conn.send(("end", key))
    conn.send(("done", json.dumps({"quarantine": quarantine, "restarts": request.get("restarts") or []})))
    conn.close()
