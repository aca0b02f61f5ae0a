"""The parent's side of the engine: relay its messages, and replace it when a piece of its work
brings it down.

The engine announces each risky piece of work (:class:`~kernelopt_bot.harness.work_watch.WorkWatch`:
``begin`` with a deadline, ``end``). When the engine dies, reports a poisoned device, or outlives
the deadline of the work it is in, that work is what failed: a new engine starts with the work in
its *quarantine* (it skips it and records it as that candidate's failure) and the run goes on,
within the same wall budget (the run's start is not reset). An engine that dies outside any
watched work (loading or compiling the target) is the run's failure: starting another would only
do the same again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.harness.isolation import IsolatedProcess, describe_exit

MAX_RESTARTS = 2  # engines replaced per run; a third casualty fails the run
POLL_S = 1.0


@dataclass
class Supervised:
    """What came of an engine (and its replacements): its result's JSON text, or why there is none."""

    result_json: str | None = None
    error: str | None = None
    restarts: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _InFlight:
    label: str
    ends_at: float | None
    ends_run: str | None = None  # the run's error if this work outlives its deadline (no restart)


def supervise(start: Callable[[dict[str, Any]], IsolatedProcess], request: dict[str, Any],
              deadline_s: float | None, log: Callable[[str], None], *,
              max_restarts: int = MAX_RESTARTS) -> Supervised:
    """Run ``start(request)``'s engine to its ``done`` message; ``deadline_s`` bounds the whole
    run, every replacement included. ``start`` raises ``OSError`` when no engine can start."""
    outcome = Supervised()
    ends = None if deadline_s is None else time.monotonic() + deadline_s
    request = dict(request)
    while True:
        try:
            engine = start(request)
        except OSError as exc:
            outcome.error = f"the engine process could not be started: {exc}"
            return outcome
        try:
            downed = _watch(engine, ends, deadline_s, log, outcome)
        finally:
            engine.close()
        if downed is None:
            return outcome
        if len(outcome.restarts) >= max_restarts:
            outcome.error = (f"the engine went down {len(outcome.restarts) + 1} times, the last in "
                             f"{downed['label']} ({downed['reason']}); not started again")
            return outcome
        outcome.restarts.append(downed)
        quarantine = dict(request.get("quarantine") or {})
        quarantine[downed["key"]] = downed["reason"]
        request = {**request, "quarantine": quarantine, "restarts": list(outcome.restarts)}
        log(f"warning: the engine went down in {downed['label']} ({downed['reason']}); starting a new one, "
            "which skips that work")


def _downed(key: str, work: _InFlight, reason: str, outcome: Supervised, *,
            run_error: str | None = None) -> dict[str, Any] | None:
    """The work that brought the engine down, for a new engine to skip; ``None`` (the run's
    error set in ``outcome``: ``run_error``, else the reason and the work) where the run cannot
    go on without it (the target's start: a model that crashes its compile would crash every
    engine)."""
    if work.ends_run is not None:
        outcome.error = run_error or f"{reason} while {work.label}"
        return None
    return {"key": key, "label": work.label, "reason": reason}


def _watch(engine: IsolatedProcess, ends: float | None, deadline_s: float | None, log: Callable[[str], None],
           outcome: Supervised) -> dict[str, Any] | None:
    """Read one engine's messages until it is done (``None``: ``outcome`` holds the result or the
    run's error) or a piece of watched work brought it down (that work, and why)."""
    in_flight: dict[str, _InFlight] = {}
    while True:
        now = time.monotonic()
        if ends is not None and now >= ends:
            engine.kill()
            outcome.error = f"the engine process outlived its deadline of {deadline_s:.0f} s (killed)"
            return None
        for key, work in in_flight.items():
            if work.ends_at is not None and now >= work.ends_at:
                engine.kill()
                return _downed(key, work, "it ran past its deadline (the engine was killed)", outcome,
                               run_error=work.ends_run)
        wait = POLL_S if ends is None else max(0.0, min(POLL_S, ends - now))
        if not engine.conn.poll(wait):
            continue
        try:
            kind, payload = engine.conn.recv()
        except EOFError:
            code = engine.wait(10)
            reason = f"the engine process crashed ({describe_exit(code)})"
            if in_flight:
                key, work = next(reversed(in_flight.items()))
                return _downed(key, work, reason, outcome)
            outcome.error = reason
            return None
        except OSError as exc:
            outcome.error = f"the engine process sent an unreadable message ({exc})"
            return None
        if kind == "log":
            log(str(payload))
        elif kind == "begin":
            limit = payload.get("deadline_s")
            ends_run = payload.get("ends_run")
            in_flight[str(payload["key"])] = _InFlight(str(payload.get("label") or "work"),
                                                       None if limit is None else time.monotonic() + float(limit),
                                                       None if ends_run is None else str(ends_run))
        elif kind == "end":
            in_flight.pop(str(payload), None)
        elif kind == "poisoned":
            engine.kill()
            key = str(payload["key"])
            work = in_flight.get(key) or _InFlight(str(payload.get("label") or "work"), None)
            return _downed(key, work, str(payload.get("reason") or "the device is unusable"), outcome)
        elif kind == "done":
            outcome.result_json = str(payload)
            return None
