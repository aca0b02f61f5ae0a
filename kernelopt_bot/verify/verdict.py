"""Gate results and verdicts: what each gate decided, why, and with which numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

GateName = Literal["static", "correctness", "model", "performance"]
GATE_ORDER: tuple[GateName, ...] = ("static", "correctness", "model", "performance")
# A kernel's status where its candidates passed gates 1-3 and gate 4 could not run (no GPU).
UNTIMED = "passed gates 1-3 (not timed: no GPU)"


def _plain(value: Any) -> Any:
    """Numbers as strict JSON can hold them: an infinite or NaN error (a candidate that produced
    NaN, say) is kept as the text ``"inf"``/``"nan"`` rather than breaking the store or result.json."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass
class GateResult:
    """One gate's decision. ``passed`` is ``None`` when the gate did not run or could not measure."""

    name: GateName
    passed: bool | None
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def ok(cls, name: GateName, reason: str = "ok", **numbers: Any) -> GateResult:
        return cls(name, True, reason, numbers)

    @classmethod
    def fail(cls, name: GateName, reason: str, **numbers: Any) -> GateResult:
        return cls(name, False, reason, numbers)

    @classmethod
    def not_run(cls, name: GateName, reason: str, **numbers: Any) -> GateResult:
        return cls(name, None, reason, numbers)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "reason": self.reason,
                "numbers": _plain(self.numbers)}


@dataclass
class Verdict:
    """A candidate's results through the cascade; accepted only if every gate passed."""

    kernel: str
    candidate: str
    gates: list[GateResult] = field(default_factory=list)
    # Where this candidate's verification time went (seconds per step), for the run's log.
    seconds: dict[str, float] = field(default_factory=dict)
    # Set when our side failed before the gates could decide (why, in one line): the candidate is
    # then neither accepted nor rejected, and nothing may be cached about it.
    infrastructure: str | None = None

    @property
    def accepted(self) -> bool:
        return (self.infrastructure is None and len(self.gates) == len(GATE_ORDER)
                and all(g.passed is True for g in self.gates))

    @property
    def rejected_by(self) -> GateName | None:
        if self.infrastructure is not None:
            return None
        return next((g.name for g in self.gates if g.passed is False), None)

    @property
    def passed_first_three(self) -> bool:
        """Gates 1-3 passed (gate 2 ran; gate 3 may have had no reference) and nothing was
        rejected: without a GPU, where gate 4 cannot run, the candidate is good but untimed."""
        correctness = self.gate("correctness")
        return (self.infrastructure is None and self.rejected_by is None
                and correctness is not None and correctness.passed is True)

    @property
    def status(self) -> str:
        """One phrase for tables: accepted, rejected by a gate, not verified because our side
        failed, or unmeasured after gates 1-3."""
        if self.infrastructure is not None:
            return f"not verified: infrastructure failure ({self.infrastructure})"
        if self.accepted:
            return "accepted"
        if self.rejected_by:
            return f"rejected by {self.rejected_by}"
        return "passed gates 1-3; performance not measured"

    def gate(self, name: GateName) -> GateResult | None:
        return next((g for g in self.gates if g.name == name), None)

    @property
    def speedup(self) -> float | None:
        """Gate 4's end-to-end speedup, where it measured one."""
        perf = self.gate("performance")
        value = perf.numbers.get("speedup") if perf else None
        return float(value) if isinstance(value, (int, float)) else None

    def finished(self) -> Verdict:
        """This verdict with every gate after the last one that ran recorded as not run."""
        ran = {g.name for g in self.gates}
        failed = self.rejected_by
        for name in GATE_ORDER:
            if name not in ran:
                reason = f"not run: rejected by the {failed} gate" if failed else "not run"
                self.gates.append(GateResult.not_run(name, reason))
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "candidate": self.candidate,
            "accepted": self.accepted,
            "rejected_by": self.rejected_by,
            "infrastructure": self.infrastructure,
            "status": self.status,
            "gates": [g.to_json() for g in self.gates],
        }
