"""RunResult: what one pipeline run on one target produced, as plain data (``result.json``).

Every front door renders this same object: the terminal table, ``report.md``, the PR body, the
sticky comment, the job summary and the sweep report. Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULT_SCHEMA = "kernelopt-result/1"


@dataclass
class KernelOutcome:
    """One kernel of the target: how much it weighed and what the search made of it."""

    name: str
    kind: str
    share: float | None = None
    time_ms: float | None = None
    candidates: int = 0
    status: str = "not searched"  # "accepted", "rejected by <gate>", "not searched", "cached", ...
    speedup: float | None = None  # end to end, with only this kernel replaced
    replacement: str | None = None  # "config", "source", "config+source" or None
    detail: str = ""


@dataclass
class Recommendation:
    """A whole-model compiler option, measured end to end against the default compile."""

    option: str  # e.g. "mode=max-autotune-no-cudagraphs", "coordinate_descent_tuning=True"
    speedup: float | None
    verified: bool
    detail: str = ""


@dataclass
class RunResult:
    target: str
    name: str
    device: str
    dtype: str
    status: str = "ok"  # "ok" or "failed"
    error: str | None = None
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    baseline_ms: float | None = None
    optimized_ms: float | None = None
    speedup: float | None = None
    noise_floor: float | None = None
    kernels: list[KernelOutcome] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    pack_entries: int = 0
    pack_path: str | None = None
    reproduce: str = ""
    seconds: float | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)  # candidates tried, tokens, cost, GPU seconds
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent in each pipeline step
    isolation: str = ""  # how untrusted code was isolated: "bwrap", "unshare" or "none"

    @property
    def measured(self) -> bool:
        return self.speedup is not None

    @property
    def accepted_kernels(self) -> list[str]:
        """Names of the kernels whose replacement passed every gate."""
        return [k.name for k in self.kernels if k.status == "accepted"]

    @property
    def verified_kernels(self) -> int:
        return len(self.accepted_kernels)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = RESULT_SCHEMA
        data["measured"] = self.measured
        data["verified_kernels"] = self.verified_kernels
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        if data.get("schema") != RESULT_SCHEMA:
            raise ValueError(f"not a {RESULT_SCHEMA} document")
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["kernels"] = [KernelOutcome(**k) for k in data.get("kernels", [])]
        fields["recommendations"] = [Recommendation(**r) for r in data.get("recommendations", [])]
        return cls(**fields)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        return cls.from_json(json.loads(Path(path).read_text()))
