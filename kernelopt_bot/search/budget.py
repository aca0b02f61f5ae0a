"""The search budget: candidates, tokens, GPU-seconds, wall time and money.

A search is stopped by whichever limit runs out first. Limits are enforced *before* work starts:
an LLM call, a candidate or a GPU run that would begin after its budget is exhausted is refused
with :class:`BudgetExceeded` and never sent. Work already running is allowed to finish, so a limit
can be overshot by at most one call's tokens (usage is only known from the reply).

One ``Budget`` is shared by every agent and by the orchestrator's gate runs, possibly from
several threads; every method takes the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

RESOURCES = ("candidates", "tokens", "gpu_s", "wall_s", "cost")
# What an LLM call needs left: its own consumption plus the clock.
LLM_RESOURCES = ("tokens", "cost", "wall_s")
# What a call that produces a candidate needs left: a candidate it could become and the GPU time
# to judge it, on top of the LLM's own resources.
CANDIDATE_RESOURCES = ("candidates", "gpu_s", "tokens", "cost", "wall_s")


class BudgetExceeded(Exception):
    """Work refused because a budget limit is reached. ``resource`` names which one."""

    def __init__(self, reason: str, resource: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.resource = resource


@dataclass
class _Usage:
    candidates: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    gpu_s: float = 0.0
    cost: float = 0.0
    llm_calls: int = 0


class Budget:
    """Limits (``None`` = unlimited) and what has been used of each.

    ``clock`` is :func:`time.monotonic` unless a test injects another; wall time counts from
    construction (or the last :meth:`restart_clock`) plus ``elapsed_before``: the seconds the run
    spent before this budget existed (starting the engine process, say), so the wall limit is a
    deadline for the whole run, not for the part after the budget was made.
    """

    def __init__(
        self,
        *,
        max_candidates: int | None = None,
        max_tokens: int | None = None,
        max_gpu_s: float | None = None,
        max_wall_s: float | None = None,
        max_cost: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        elapsed_before: float = 0.0,
    ) -> None:
        for name, value in (("max_candidates", max_candidates), ("max_tokens", max_tokens),
                            ("max_gpu_s", max_gpu_s), ("max_wall_s", max_wall_s), ("max_cost", max_cost)):
            if value is not None and value < 0:
                raise ValueError(f"budget {name} must be >= 0, got {value}")
        self.max_candidates = max_candidates
        self.max_tokens = max_tokens
        self.max_gpu_s = max_gpu_s
        self.max_wall_s = max_wall_s
        self.max_cost = max_cost
        self._clock = clock
        self._start = clock() - max(0.0, float(elapsed_before))
        self._lock = threading.Lock()
        self._used = _Usage()
        self._by_purpose: dict[str, dict[str, int]] = {}

    # -- reading ---------------------------------------------------------------------------

    @property
    def tokens_used(self) -> int:
        with self._lock:
            return self._used.prompt_tokens + self._used.completion_tokens

    @property
    def llm_calls(self) -> int:
        with self._lock:
            return self._used.llm_calls

    def elapsed_s(self) -> float:
        return self._clock() - self._start

    def wall_s_left(self) -> float | None:
        """Seconds of wall time left, or ``None`` without a wall limit."""
        if self.max_wall_s is None:
            return None
        return max(0.0, self.max_wall_s - self.elapsed_s())

    def exhausted(self, resources: Iterable[str] = RESOURCES) -> str | None:
        """The first limit among ``resources`` that is used up, as a one-line reason, or ``None``."""
        with self._lock:
            return self._exhausted_locked(tuple(resources))

    def _exhausted_locked(self, resources: tuple[str, ...]) -> str | None:
        hit = self._first_hit(resources)
        return hit[1] if hit else None

    def _first_hit(self, resources: tuple[str, ...]) -> tuple[str, str] | None:
        unknown = set(resources) - set(RESOURCES)
        if unknown:
            raise ValueError(f"unknown budget resources {sorted(unknown)}; known: {', '.join(RESOURCES)}")
        u = self._used
        tokens = u.prompt_tokens + u.completion_tokens
        checks = {
            "candidates": (self.max_candidates, u.candidates, "candidate budget exhausted ({used} of {limit} candidates)"),
            "tokens": (self.max_tokens, tokens, "token budget exhausted ({used} of {limit} tokens)"),
            "gpu_s": (self.max_gpu_s, u.gpu_s, "GPU budget exhausted ({used:.1f} of {limit:g} GPU-seconds)"),
            "wall_s": (self.max_wall_s, self.elapsed_s(), "wall-time budget exhausted ({used:.1f} of {limit:g} s)"),
            "cost": (self.max_cost, u.cost, "cost budget exhausted ({used:.4f} of {limit:g})"),
        }
        for name in RESOURCES:
            if name not in resources:
                continue
            limit, used, text = checks[name]
            if limit is not None and used >= limit:
                return name, text.format(used=used, limit=limit)
        return None

    def require(self, resources: Iterable[str] = RESOURCES, *, what: str = "work") -> None:
        """Raise :class:`BudgetExceeded` if any of ``resources`` is used up (call before starting)."""
        with self._lock:
            hit = self._first_hit(tuple(resources))
        if hit:
            raise BudgetExceeded(f"{what} refused: {hit[1]}", hit[0])

    # -- charging --------------------------------------------------------------------------

    def acquire_candidate(self, *, what: str = "candidate") -> int:
        """Count one candidate if the limits allow it (checked and counted atomically).

        Returns the candidate's 1-based number; raises :class:`BudgetExceeded` when the candidate,
        GPU or wall-time budget is used up. Call it before a candidate goes to the gates.
        """
        with self._lock:
            hit = self._first_hit(("candidates", "gpu_s", "wall_s"))
            if hit:
                raise BudgetExceeded(f"{what} refused: {hit[1]}", hit[0])
            self._used.candidates += 1
            return self._used.candidates

    def charge_tokens(self, prompt_tokens: int, completion_tokens: int, *, purpose: str = "") -> None:
        with self._lock:
            self._used.prompt_tokens += max(0, int(prompt_tokens))
            self._used.completion_tokens += max(0, int(completion_tokens))
            self._used.llm_calls += 1
            if purpose:
                row = self._by_purpose.setdefault(purpose, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
                row["calls"] += 1
                row["prompt_tokens"] += max(0, int(prompt_tokens))
                row["completion_tokens"] += max(0, int(completion_tokens))

    def charge_gpu(self, seconds: float) -> None:
        with self._lock:
            self._used.gpu_s += max(0.0, float(seconds))

    def charge_cost(self, amount: float) -> None:
        with self._lock:
            self._used.cost += max(0.0, float(amount))

    def restart_clock(self) -> None:
        with self._lock:
            self._start = self._clock()

    def snapshot(self) -> dict[str, Any]:
        """Limits and usage as plain data, for reports and the store."""
        with self._lock:
            u = self._used
            return {
                "limits": {
                    "candidates": self.max_candidates,
                    "tokens": self.max_tokens,
                    "gpu_s": self.max_gpu_s,
                    "wall_s": self.max_wall_s,
                    "cost": self.max_cost,
                },
                "used": {
                    "candidates": u.candidates,
                    "prompt_tokens": u.prompt_tokens,
                    "completion_tokens": u.completion_tokens,
                    "tokens": u.prompt_tokens + u.completion_tokens,
                    "gpu_s": round(u.gpu_s, 3),
                    "wall_s": round(self.elapsed_s(), 3),
                    "cost": round(u.cost, 6),
                    "llm_calls": u.llm_calls,
                },
                "by_purpose": {k: dict(v) for k, v in self._by_purpose.items()},
                "exhausted": self._exhausted_locked(RESOURCES),
            }

    def __repr__(self) -> str:
        s = self.snapshot()
        return f"Budget(limits={s['limits']}, used={s['used']})"


FIRST_CHUNK = 24  # a kernel's first variants, timed before the seconds a variant takes are known


class TimerWithinDeadline:
    """A search strategy's timer (``(kernel, candidates) -> (original_ms, times)``) that times no
    more than the wall deadline can see through, keeping ``reserve()`` seconds (the gates of what
    the search will propose) before it. A kernel's first batch is timed ``first_chunk`` variants
    first; from then on the seconds a variant took size what is timed: as many variants of a
    batch as fit (in the order given, the rest not timed: ``None``), and a batch of which none
    fits is refused (:class:`BudgetExceeded`). The search itself stays pure: it stops where it is
    and ranks what it timed. On the H200 a 7 ms RMS-norm kernel's tuner ran on for 30 s past the
    time it was given (rms_norm_large fp32, 12-03); a scan's 68 variants took 28 of the search's
    34 s to compile and time, and the 1.7x config among them found no time left for its gates
    (log_cumsum_exp fp32, 12-04)."""

    def __init__(self, timer: Callable[[Any, list[Any]], Any], left: Callable[[], float | None],
                 clock: Callable[[], float] = time.monotonic, log: Callable[[str], None] | None = None,
                 reserve: Callable[[], float] | None = None, first_chunk: int = FIRST_CHUNK) -> None:
        self.timer, self.left, self.clock, self.log = timer, left, clock, log
        self.reserve, self.first_chunk = reserve, max(1, first_chunk)
        self._per_variant_s: dict[str, float] = {}

    def __call__(self, kernel: Any, candidates: list[Any]) -> Any:
        key = str(getattr(kernel, "qualified_name", None) or getattr(kernel, "name", ""))
        left = self.left()
        if left is None or not candidates:
            return self._time(key, kernel, candidates)
        per = self._per_variant_s.get(key)
        if left <= 0.0:
            self._refuse(len(candidates), left, 0.0)
        if per is None:  # a kernel's first batch: only a deadline already passed refuses it
            head = candidates[:self.first_chunk]
            original_ms, times = self._time(key, kernel, head)
            if len(head) == len(candidates):
                return original_ms, times
            try:
                more_ms, more = self(kernel, candidates[len(head):])
            except BudgetExceeded:
                return original_ms, [*times, *([None] * (len(candidates) - len(head)))]
            return original_ms if original_ms is not None else more_ms, [*times, *more]
        room = left - (self.reserve() if self.reserve is not None else 0.0)
        fit = len(candidates) if per <= 0.0 else min(len(candidates), int(room // per))
        if fit <= 0:
            self._refuse(len(candidates), left, per * len(candidates))
        original_ms, times = self._time(key, kernel, candidates[:fit])
        if fit < len(candidates):
            if self.log is not None:
                self.log(f"    the search's wall time left room for {fit} of a batch of {len(candidates)} variant(s) "
                         f"({left:.0f} s left, {left - room:.0f} s of it kept for the gates)")
            times = [*times, *([None] * (len(candidates) - fit))]
        return original_ms, times

    def _time(self, key: str, kernel: Any, candidates: list[Any]) -> Any:
        start = self.clock()
        try:
            return self.timer(kernel, candidates)
        finally:
            if candidates:
                self._per_variant_s[key] = (self.clock() - start) / len(candidates)

    def _refuse(self, count: int, left: float, need: float) -> NoReturn:
        why = (f"the search's wall time ran out before a batch of {count} variant(s) "
               f"({left:.0f} s left, about {need:.0f} s needed)")
        if self.log is not None:
            self.log(f"    {why}: ranking what was timed")
        raise BudgetExceeded(why, "wall_s")
