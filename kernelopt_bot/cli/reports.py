"""The data that commands print, each with the ``to_json`` its ``--json`` prints.

A command computes one of these; :mod:`kernelopt_bot.cli.render` shows it as tables and lines,
``to_json`` as one JSON document. The JSON shapes are the CLI's own, kept exactly as they have
been printed (scripts read them), which is why some differ from the engine objects' own
``to_json`` (:meth:`VerifyReport.to_json` against the store's :meth:`Verdict.to_json`). Types
from the engine are named for checkers only: importing this module imports neither torch nor
triton.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelopt_bot.capture.artifact import Artifact
    from kernelopt_bot.launchers import KernelLaunch
    from kernelopt_bot.profiling import Profile
    from kernelopt_bot.result import RunResult
    from kernelopt_bot.verify.verdict import Verdict


@dataclass
class InspectReport:
    """``inspect`` of a model: its compiled Triton kernels with their profile, and the vendor
    calls the compiler kept."""

    target: str  # as the user gave it
    label: str  # the target's name in a table's title
    device: str
    artifact: Artifact
    profile: Profile

    def to_json(self) -> dict[str, Any]:
        art, prof = self.artifact, self.profile
        kernels = []
        for k in art.kernels:
            kp = prof.kernel(k.graph, k.name)
            kernels.append({
                "name": k.name, "graph": k.graph, "qualified_name": k.qualified_name,
                "kind": k.kind, "phase": art.graphs[k.graph].phase, "sha256": k.sha256, "key": k.key,
                "source": k.source,
                "time_ms": kp.time_ms if kp else None, "share": kp.share if kp else None,
                "calls": kp.calls if kp else 0, "bytes_moved": kp.bytes_moved if kp else None,
                "achieved_gbps": kp.achieved_gbps if kp else None,
                "roofline_fraction": kp.roofline_fraction if kp else None,
                "bound": kp.bound if kp else None,
                "signature": k.signature, "size_hints": k.size_hints,
                "launches": [{"args": s.args, "kwargs": s.kwargs} for s in k.launches],
            })
        return {
            "target": self.target, "device": self.device, "dtype": art.dtype, "versions": art.versions,
            "graphs": len(art.graphs), "model_ms": prof.model_ms, "vendor_ms": prof.vendor_ms,
            "copy_gbps": prof.roofline.copy_gbps if prof.roofline else None,
            "kernels": kernels,
            "extern_calls": [{"op": c.op, "kind": c.kind, "graph": c.graph, "preserved": c.preserved}
                             for c in art.extern_calls],
        }


@dataclass
class LaunchesReport:
    """``inspect`` of a standalone-kernel target: the launches its launcher made in one run."""

    target: str
    name: str  # the launcher's
    device: str
    dtype: str
    reference: bool  # whether the file has a PyTorch reference to check against
    launches: list[KernelLaunch]

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "kind": "triton", "device": self.device, "dtype": self.dtype,
                "reference": self.reference, "launches": [launch.to_json() for launch in self.launches]}


@dataclass
class HelionReport:
    """``inspect`` of a Helion target: its kernel, the config it runs (pinned or Helion's default)
    and how many neighbours a search starts from."""

    target: str
    name: str  # the target's
    device: str
    dtype: str
    kernel: str
    reference: bool
    pinned: dict[str, Any] | None  # the decorator's config=..., as written
    config: dict[str, Any]  # the config it runs
    neighbours: int

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "kind": "helion", "device": self.device, "dtype": self.dtype,
                "kernel": self.kernel, "reference": self.reference, "pinned": self.pinned,
                "config": self.config, "neighbours": self.neighbours}


@dataclass
class VerifyReport:
    """``verify``: one candidate's verdict through the four gates."""

    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        """Narrower than :meth:`Verdict.to_json` (no ``rejected_by``/``infrastructure``) and with a
        gate's numbers as measured, where the store's form spells inf and NaN as text."""
        v = self.verdict
        return {
            "kernel": v.kernel, "candidate": v.candidate, "accepted": v.accepted,
            "status": v.status,
            "gates": [{"name": g.name, "passed": g.passed, "reason": g.reason, "numbers": g.numbers}
                      for g in v.gates],
        }


@dataclass
class RunList:
    """``store runs``: the store's run rows, newest first."""

    runs: list[dict[str, Any]]

    def to_json(self) -> list[dict[str, Any]]:
        """Each row without its whole result (``store show --latest`` prints that)."""
        return [{k: v for k, v in r.items() if k != "result"} for r in self.runs]


@dataclass
class RunDetail:
    """``store show RUN_ID``: a run's kernels and every candidate with its verdict."""

    run_id: int
    kernels: list[dict[str, Any]]
    candidates: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id, "kernels": self.kernels, "candidates": self.candidates}


@dataclass
class LatestRun:
    """``store show --latest TARGET``: the newest finished result of a target."""

    result: RunResult

    def to_json(self) -> dict[str, Any]:
        return {"latest": self.result.to_json()}
