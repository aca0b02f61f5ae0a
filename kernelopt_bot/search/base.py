"""The search's one base class: a strategy proposes candidates for one kernel; the gates decide.

Strategies know nothing about each other, the store or GitHub. The orchestrator asks each
strategy for candidates within the budget, sends the best to the cascade, and records what happened.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.candidate import Proposal
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.profiling import KernelProfile
from kernelopt_bot.search.rewrites import Rewrite


@dataclass
class SearchContext:
    """What a strategy may use: the kernel, its profile row, its recorded launch config, memory,
    the strategy rewrites the compiler could generate for it (:mod:`.rewrites`), and the whole
    model's profile."""

    kernel: TritonKernel
    profile: KernelProfile | None
    chosen_config: dict[str, Any] | None
    device: str
    memory: list[dict[str, Any]] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    model_profile: list[KernelProfile] = field(default_factory=list)  # every kernel's row, for where the time goes


class SearchStrategy(ABC):
    """Proposes candidates for one kernel. Subclasses live one per file in this package."""

    name: str = "strategy"

    @abstractmethod
    def propose(self, ctx: SearchContext, limit: int) -> list[Proposal]:
        """At most ``limit`` proposals, best first."""
