"""The LLM agents' search: profile, plan, write, verify, repair, summarize, per kernel.

One client and one set of the five agents serve the whole run (:meth:`LLMSearch.close` ends them).
The profiler summarizes where the model's time goes once, on the first kernel; for each attempt
the planner picks a strategy from that summary, the kernel's profile and the experience memory; a
launch-config plan goes straight to the gates, any other plan goes to the coder, and a candidate a
gate rejected (other than for speed) goes back to the repairer with the gate's reason and numbers,
a bounded number of times. Every verdict is summarized into the memory. The beam is the set of
verified candidates; the orchestrator keeps the fastest.

The endpoint is never trusted to be up: an unreachable or misbehaving one stops this search with a
warning, and the timed tuner's results stand. The LLM decides nothing that matters: the gates do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from kernelopt_bot.candidate import Candidate, Proposal
from kernelopt_bot.search.base import SearchContext
from kernelopt_bot.search.budget import Budget, BudgetExceeded
from kernelopt_bot.search.llm.agents import Agents, make_agents
from kernelopt_bot.search.llm.client import LLMUnavailable
from kernelopt_bot.search.llm.config import LLMSettings
from kernelopt_bot.verify.verdict import Verdict


class LLMSearch:
    name = "llm"

    def __init__(self, settings: LLMSettings, *, attempts: int = 2, repairs: int = 2,
                 log: Callable[[str], None] = lambda _m: None) -> None:
        self.settings = settings
        self.attempts = attempts
        self.repairs = repairs
        self.log = log
        self.disabled: str | None = None
        self._agents: Agents | None = None
        self._summary: str | None = None  # the profiler's, once per run

    def close(self) -> None:
        """End the run's client (its connections)."""
        if self._agents is not None:
            self._agents.client.close()
            self._agents = None

    def search(self, ctx: SearchContext, verify: Callable[[Proposal], Verdict], budget: Budget
               ) -> list[tuple[Proposal, Verdict]]:
        if self.disabled:
            return []
        if self._agents is None:  # the run's budget: the same object on every kernel
            self._agents = make_agents(self.settings, budget)
        agents = self._agents
        kernel = ctx.kernel
        row = asdict(ctx.profile) if ctx.profile is not None else {}
        memory = list(ctx.memory)
        tried: list[tuple[Proposal, Verdict]] = []

        def judge(candidate: Candidate, plan: Any) -> Verdict:
            budget.acquire_candidate(what=candidate.label)
            proposal = Proposal(candidate, self.name, note=f"llm:{plan.strategy}",
                                extra={"rationale": plan.rationale})
            verdict = verify(proposal)
            tried.append((proposal, verdict))
            perf = verdict.gate("performance")
            speedup = perf.numbers.get("speedup") if perf else None
            memory.append(agents.summarizer.summarize(kernel.kind, plan, verdict.to_json(), speedup))
            self.log(f"  llm summarizer: noted {verdict.status} in the memory")
            return verdict

        try:
            if self._summary is None:
                self._summary = agents.profiler.summarize([asdict(k) for k in ctx.model_profile] or [row])
                self.log(f"  llm profiler: {self._summary[:160]}")
            for attempt in range(self.attempts):
                plan = agents.planner.plan(kernel, row, memory, self._summary)
                self.log(f"  llm planner: {plan.strategy}" + (" (reply unusable: launch configs)" if plan.fallback else ""))
                if not plan.needs_source:
                    config = plan.launch_config(kernel)
                    if config is not None:
                        judge(Candidate(f"llm plan #{attempt}: {config.describe()}", config=config), plan)
                    continue
                source = agents.coder.write(kernel, plan, memory)
                self.log(f"  llm coder: {'no usable source' if source is None else 'a candidate kernel'}")
                for repair in range(self.repairs + 1):
                    if source is None:
                        break
                    verdict = judge(Candidate(f"llm {plan.strategy} #{attempt}.{repair}", source=source), plan)
                    failing = next((g for g in verdict.gates if g.passed is False), None)
                    if failing is None or failing.name == "performance" or repair == self.repairs:
                        break
                    source = agents.repairer.repair(kernel, source, failing, repair + 1, self.repairs)
                    self.log(f"  llm repairer: {'gave up' if source is None else 'a repaired kernel'} "
                             f"after the {failing.name} gate")
        except LLMUnavailable as exc:
            self.disabled = str(exc)
            self.log(f"warning: LLM endpoint unavailable ({exc}); continuing with the timed tuner only")
        except BudgetExceeded as exc:
            self.log(f"  LLM search stopped: {exc.reason}")
        return tried
