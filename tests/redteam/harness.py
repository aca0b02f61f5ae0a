"""What the red-team files share: one shape of case, candidates made from the captured kernel, one
cascade per example and dtype (its baseline arms compiled once for all its cases), and the two
assertions every case ends in."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.sandbox import SandboxLimits
from kernelopt_bot.verify.verdict import GATE_ORDER, Verdict
from tests.helpers import DEVICE as FORCED_DEVICE
from tests.helpers import captured

ON_GPU = FORCED_DEVICE == "cuda" or torch.cuda.is_available()
# The examples' own size rule (examples/*.py): full size on a GPU unless KERNELOPT_EXAMPLE_SIZE says otherwise.
FULL_SIZE = (os.environ.get("KERNELOPT_EXAMPLE_SIZE") or ("full" if torch.cuda.is_available() else "tiny")) == "full"

MakeCandidate = Callable[[TritonKernel, "dict | None"], Candidate]


@dataclass(frozen=True)
class Case:
    id: str
    example: str
    make: MakeCandidate
    gate: str | None  # the gate that must reject it; None: honest, must pass gates 1-3
    row: str  # the pitfall it stands for (VERIFY.md, issue 11), or "honest"
    dtype: str = "fp32"
    gpu_only: bool = False
    rule: str | None = None  # for a static rejection: the gate-1 rule that must fire


def src(fn: Callable[[str], str]) -> MakeCandidate:
    """A candidate whose source is ``fn`` applied to the original kernel's source."""
    return lambda k, _cfg: Candidate("source", source=fn(k.source))


def cheaters(cases: list[Case]) -> list[Case]:
    return [c for c in cases if c.gate is not None]


def honest(cases: list[Case]) -> list[Case]:
    return [c for c in cases if c.gate is None]


class Cascades:
    """One :class:`Cascade` per (example, dtype); the case's kernel is the example's last one
    (gelu's only pointwise kernel is its first)."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], Cascade] = {}

    def verify(self, case: Case, sandbox: SandboxLimits | None = None) -> tuple[Verdict, float]:
        """The case's verdict and the seconds ``Cascade.verify`` took."""
        cap = captured(case.example, case.dtype)
        key = (case.example, case.dtype)
        if key not in self._by_key:
            self._by_key[key] = Cascade(cap, VerifyOptions(rounds=6 if ON_GPU else 1, reps=20))
        kernel = cap.artifact.kernels[-1] if case.example != "gelu.py" else cap.artifact.kernels[0]
        candidate = case.make(kernel, cap.recording(kernel.graph, kernel.name).chosen_config)
        start = time.perf_counter()
        verdict = self._by_key[key].verify(kernel, candidate, sandbox=sandbox)
        return verdict, time.perf_counter() - start

    def close(self) -> None:
        for cascade in self._by_key.values():
            cascade.close()
        self._by_key.clear()


def report(case: Case, verdict: Verdict) -> None:
    """One line per case in the log (the GPU script greps REDTEAM/HONEST)."""
    failed = next((g.reason for g in verdict.gates if g.passed is False), verdict.infrastructure or "")
    tag = "HONEST " if case.gate is None else "REDTEAM"
    print(f"{tag} {case.id:32} {case.row:40} -> {verdict.status}: {failed[:200]}")


def assert_rejected_by_responsible_gate(case: Case, verdict: Verdict) -> None:
    """Rejected (not an infrastructure failure) by ``case.gate``, with every earlier gate passed."""
    assert case.gate is not None
    assert verdict.infrastructure is None, verdict.infrastructure
    assert not verdict.accepted
    assert verdict.rejected_by == case.gate, [g.to_json() for g in verdict.gates]
    for gate in verdict.gates[: GATE_ORDER.index(case.gate)]:  # type: ignore[arg-type]
        assert gate.passed is True, f"{gate.name} should have passed before {case.gate}: {gate.reason}"


def assert_passes_gates_1_to_3(verdict: Verdict) -> None:
    for name in ("static", "correctness", "model"):
        gate = verdict.gate(name)  # type: ignore[arg-type]
        assert gate is not None and gate.passed is True, f"{name}: {gate.reason if gate else 'missing'}"
    perf = verdict.gate("performance")
    assert perf is not None
    if not ON_GPU:
        assert perf.passed is None and "not measured" in perf.reason
