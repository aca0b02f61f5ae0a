"""The orchestrator: which kernels to search, which proposals reach the gates, what is kept.

For each kernel the profile ranks worth it (most headroom, then largest share first): reuse the
verified-kernel cache when this kernel, GPU and compiler versions were searched before; otherwise
ask every strategy for proposals, send the best to the cascade while the budget lasts, record
every verdict in the store and in the experience memory, and keep the fastest accepted candidate.
A kernel where nothing passes keeps the compiler's code.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kernelopt_bot.candidate import Candidate, Proposal, candidate_pack
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.capture.recorder import Capture
from kernelopt_bot.pack.export import lookup_key_or_none
from kernelopt_bot.pack.format import Guard, KernelPack, LaunchConfig, PackEntry
from kernelopt_bot.pack.runtime import running_environment
from kernelopt_bot.profiling import KernelProfile, Profile
from kernelopt_bot.result import KernelOutcome
from kernelopt_bot.search.base import SearchContext, SearchStrategy
from kernelopt_bot.search.budget import Budget, BudgetExceeded
from kernelopt_bot.search.rewrites import Rewrite
from kernelopt_bot.search.tuner import ORIGIN
from kernelopt_bot.store import Store
from kernelopt_bot.verify.verdict import UNTIMED, Verdict

# A kernel whose every candidate our side failed to verify (the wall deadline, out of memory, a
# crash of ours): nothing was judged, so neither "no candidate accepted" nor a rejection.
NOT_VERIFIED = "not verified (infrastructure: no candidate was judged)"

# The kind of candidate a compiler option's own launch config is (Orchestrator.try_option_configs).
OPTION_CONFIG = "option_config"


class Gates(Protocol):
    """What the search asks of the gates (the verify package's ``Cascade`` is one), so the search
    imports no gate: a verdict on a candidate, kernel-level times of variants for the tuner, and the seconds per
    step of each timing job since the log last read them (the orchestrator clears the list)."""

    timing_seconds: list[dict[str, float]]

    def verify(self, kernel: TritonKernel, candidate: Candidate, *, ends_at: float | None = None) -> Verdict: ...

    def time_variants(self, kernel: TritonKernel, candidates: list[Candidate]
                      ) -> tuple[float | None, list[float | str | None]]: ...


class FeedbackSearch(Protocol):
    """A search that needs the gates' answers as it goes (the LLM agents' plan-code-repair loop)."""

    name: str

    def search(self, ctx: SearchContext, verify: Callable[[Proposal], Verdict], budget: Budget
               ) -> list[tuple[Proposal, Verdict]]: ...


@dataclass
class SearchLimits:
    max_kernels: int = 3
    candidates_per_kernel: int = 3
    min_share: float = 0.02  # kernels below this share of model time are not worth a search
    # What one candidate's gates cost before any of its kind was timed in this run (sandbox + a
    # compiled arm + benchmark rounds; 20-24 s measured on an H200 for single-kernel problems). The
    # wall budget is a deadline: a candidate that cannot finish before it is not started.
    first_candidate_s: float = 25.0
    # The same for a trusted (the tuner's) candidate on a GPU: gates 2-4 run in the engine, no
    # process starts and nothing compiles again (kernel compile, gate 2, two model runs, gate 4's
    # rounds). On the CPU the interpreter's gate 2 dominates either way: first_candidate_s applies.
    first_trusted_candidate_s: float = 10.0


class Orchestrator:
    def __init__(self, capture: Capture, profile: Profile, cascade: Gates, budget: Budget, *,
                 strategies: list[SearchStrategy], feedback: list[FeedbackSearch] | None = None,
                 store: Store | None = None, run_id: int | None = None,
                 limits: SearchLimits | None = None, log: Callable[[str], None] = lambda _m: None,
                 rewrites: dict[tuple[int, str], list[Rewrite]] | None = None) -> None:
        self.capture, self.profile, self.cascade, self.budget = capture, profile, cascade, budget
        self.rewrites = dict(rewrites or {})  # per kernel: the strategy rewrites derived for it
        self.strategies, self.feedback = strategies, list(feedback or [])
        self.store, self.run_id = store, run_id
        self.limits = limits or SearchLimits()
        self.log = log
        self.env: Guard = running_environment(capture.target.device)
        # How long each candidate's gates took in this run, trusted (True) and others apart: a
        # trusted candidate's gates run in the engine, the others' start processes.
        self._candidate_seconds: dict[bool, list[float]] = {True: [], False: []}

    @property
    def device(self) -> str:
        return self.capture.target.device

    def kernel_of(self, row: KernelProfile) -> TritonKernel:
        """The captured kernel a profile row times."""
        return self.capture.artifact.kernel(f"g{row.graph}:{row.name}")

    def worth_searching(self) -> list[KernelProfile]:
        ranked = [k for k in self.profile.ranked() if self.kernel_of(k).writes]
        if self.profile.measured:
            ranked = [k for k in ranked if (k.share or 0.0) >= self.limits.min_share]
        return ranked[: self.limits.max_kernels]

    def run(self) -> tuple[list[KernelOutcome], KernelPack]:
        pack = KernelPack(target=self.capture.target.spec, created_by="kernelopt optimize")
        chosen = {(k.graph, k.name) for k in self.worth_searching()}
        outcomes: list[KernelOutcome] = []
        for row in self.profile.ranked():
            outcome = KernelOutcome(row.name, row.kind, row.share, row.time_ms,
                                    phase=self.capture.artifact.graphs[row.graph].phase,
                                    roofline_fraction=row.roofline_fraction)
            kernel = self.kernel_of(row)
            if self.store is not None and self.run_id is not None:  # the run's profile, kernel by kernel
                self.store.runs.record_kernel(self.run_id, kernel.key, kernel.name, row.kind, row.share,
                                              row.time_ms)
            if (row.graph, row.name) in chosen:
                self._search_kernel(kernel, row, outcome, pack)
            else:
                outcome.status = self._not_chosen(row)
            outcomes.append(outcome)
        return outcomes, pack

    def _not_chosen(self, row: KernelProfile) -> str:
        """Why a kernel was not searched, in the words of the rule that left it out."""
        if not self.kernel_of(row).writes:
            return ("not searched (it writes no argument known to us, as a device-side assert does: no replacement "
                    "of it could be verified)")
        if self.profile.measured and (row.share or 0.0) < self.limits.min_share:
            return (f"not searched (below the share threshold: {100 * (row.share or 0.0):.1f}% of the model's "
                    f"time, under {100 * self.limits.min_share:.0f}%)")
        if self.profile.measured:
            return f"not searched (the kernel limit: only the {self.limits.max_kernels} largest are searched)"
        return (f"not searched (the kernel limit: only the first {self.limits.max_kernels} are searched; "
                "without a GPU no time ranks them)")

    def _cache_key(self, kernel_key: str) -> tuple[str, str, str | None, str, str]:
        """A kernel's cache key on this GPU and software stack (by its key: the final benchmark
        withdraws a pack's entries by theirs)."""
        env = self.env
        return (kernel_key, env.gpu or self.device, env.compute_capability, env.torch or "", env.triton or "")

    def _search_kernel(self, kernel: TritonKernel, row: KernelProfile, outcome: KernelOutcome,
                       pack: KernelPack) -> None:
        if self.store is not None:
            hit = self.store.cache.lookup(*self._cache_key(kernel.key))
            if hit is not None and hit.verified and hit.entry is not None:
                entry = PackEntry.from_json({**hit.entry, "kernel_name": kernel.name,
                                             "lookup_key": lookup_key_or_none(kernel.source)})
                pack.add(entry)
                outcome.status, outcome.speedup = "cached (verified)", hit.speedup
                outcome.replacement = _replacement_kind(entry)
                outcome.detail = f"verified in run {hit.run_id}; not searched again"
                return
            if hit is not None:
                outcome.status = "cached (nothing passed)"
                outcome.detail = hit.reason
                return
        reason = self.budget.exhausted() or self._no_time_for_a_candidate(trusted=True)
        if reason:
            outcome.status, outcome.detail = "not searched (budget)", reason
            return
        recording = self.capture.recording(kernel.graph, kernel.name)
        memory = self.store.memory.recall(kernel.kind, self.env.gpu) if self.store is not None else []
        ctx = SearchContext(kernel, row, recording.chosen_config, self.device, memory,
                            self.rewrites.get((kernel.graph, kernel.name), []), list(self.profile.kernels))
        self.log(f"searching {kernel.qualified_name} ({kernel.kind})")
        tried: list[tuple[Proposal, Verdict]] = []
        proposals: list[Proposal] = []
        for strategy in self.strategies:
            start = time.monotonic()
            found = strategy.propose(ctx, self.limits.candidates_per_kernel)
            proposals += found
            elapsed = time.monotonic() - start
            if self.device == "cuda":
                self.budget.charge_gpu(elapsed)
            self.log(f"  {strategy.name}: {len(found)} proposal(s) worth the gates ({elapsed:.0f} s)")
            for job in self.cascade.timing_seconds:
                self.log(f"    timing: {_steps(job)}")
            self.cascade.timing_seconds.clear()
        for proposal in proposals[: self.limits.candidates_per_kernel]:
            try:
                self._fits_in_wall_budget(proposal)
                self.budget.acquire_candidate(what=proposal.candidate.label)
            except BudgetExceeded as exc:
                outcome.detail = exc.reason
                break
            tried.append((proposal, self._verify(kernel, proposal)))
        for search in self.feedback:
            tried += search.search(ctx, lambda p, k=kernel: self._verify(k, p), self.budget)
        self._conclude(kernel, tried, outcome, pack)

    def try_option_configs(self, found: list[tuple[str, str, LaunchConfig]], outcomes: list[KernelOutcome],
                           pack: KernelPack, limit: int = 4) -> int:
        """Gate, as candidates of their own, the launch configs a verified compiler option's compile
        settled on (``(option, kernel name, config)``: :func:`~kernelopt_bot.compile_options.option_configs`),
        for searched kernels the pack does not replace yet, at most ``limit`` of them; the accepted
        ones join ``pack``. How many did. Where an option beat the default compile and the tuner did not (on the H200,
        coordinate descent made an amax 1.335x faster end to end, and none of the tuner's 96
        variants was faster alone), the option's own configs are the first thing to try."""
        searched = {(k.graph, k.name) for k in self.worth_searching()}
        by_name: dict[str, list[TritonKernel]] = {}
        for kernel in self.capture.artifact.kernels:
            by_name.setdefault(kernel.name, []).append(kernel)
        replaced = {e.kernel_name for e in pack.entries.values()}
        rows = {o.name: o for o in outcomes}
        added = tried = 0
        for option, name, config in found:
            if tried >= limit:
                break
            kernels = by_name.get(name, [])
            if len(kernels) != 1 or (kernels[0].graph, name) not in searched or name in replaced or name not in rows:
                continue  # another graph's kernel of that name, one not searched, or one replaced already
            kernel, outcome = kernels[0], rows[name]
            chosen = self.capture.recording(kernel.graph, name).chosen_config
            if not set(config.kwargs) <= set(kernel.constexprs) or (
                    chosen is not None and LaunchConfig.from_json(chosen) == config):
                continue
            proposal = Proposal(Candidate(f"config {config.describe()} (as {option} compiles it)", config=config,
                                          origin=ORIGIN), OPTION_CONFIG)
            try:
                self._fits_in_wall_budget(proposal)
                self.budget.acquire_candidate(what=proposal.candidate.label)
            except BudgetExceeded as exc:
                self.log(f"  {proposal.candidate.label}: not tried ({exc.reason})")
                break
            verdict = self._verify(kernel, proposal)
            tried += 1
            outcome.candidates += 1
            counts = outcome.strategies.setdefault(OPTION_CONFIG, {"gated": 0, "accepted": 0, "chosen": 0})
            counts["gated"] += 1
            if not verdict.accepted:
                said = "; ".join(p for p in (outcome.detail, f"{option}'s config: {_shown_status(verdict)}") if p)
                outcome.detail = said[:900]  # a published result's detail has a limit
                continue
            counts["accepted"] += 1
            counts["chosen"] += 1
            self._keep(kernel, proposal, verdict, outcome, pack, accepted=1)
            replaced.add(name)
            added += 1
        return added

    def _keep(self, kernel: TritonKernel, proposal: Proposal, verdict: Verdict, outcome: KernelOutcome,
              pack: KernelPack, *, accepted: int) -> None:
        """An accepted candidate into the pack, the kernel's row and the verified-kernel cache
        (``accepted``: how many of the kernel's candidates passed, this one the fastest)."""
        measured: dict[str, Any] = {"speedup": verdict.speedup, "kernel_ms": proposal.kernel_ms,
                                    "gates": [g.to_json() for g in verdict.gates], "accepted_candidates": accepted}
        entry = next(iter(candidate_pack(self.capture, kernel, proposal.candidate, measured).entries.values()))
        pack.add(entry)
        outcome.status, outcome.speedup = "accepted", verdict.speedup
        outcome.replacement, outcome.detail = _replacement_kind(entry), proposal.candidate.label
        if self.store is not None:
            self.store.cache.record_verified(*self._cache_key(kernel.key), entry, verdict.speedup, self.run_id)

    def withdraw(self, kernel_keys: list[str]) -> None:
        """Kernels (by pack key) whose accepted replacement the final benchmark dropped (fresh
        processes found it short of gamma): the verified-kernel cache forgets it, so a later run
        does not load it as verified, and remembers the kernel as searched with nothing to show
        for it."""
        if self.store is None:
            return
        for key in kernel_keys:
            self.store.cache.withdraw(*self._cache_key(key), self.run_id)

    def candidate_estimate_s(self, trusted: bool = False) -> float:
        """Expected seconds for one more candidate, trusted (the tuner's: gates in the engine) or
        not (gates in processes): the slowest of its kind so far in this run, else the default.
        The first of a kind also paid for warming what the later ones reuse (the engine's model
        arms' first timed steps, an arm's compile cache): once others are seen it is left out
        (on the H200 a training step's first tuner candidate took 23 s, the next 14 s)."""
        seen = self._candidate_seconds[trusted]
        if seen:
            return max(seen[1:] or seen)
        if trusted and self.device == "cuda":
            return self.limits.first_trusted_candidate_s
        return self.limits.first_candidate_s

    def _no_time_for_a_candidate(self, trusted: bool) -> str | None:
        """Why no candidate of that kind could finish before the wall budget's deadline, or
        ``None``. Proposing (which times variants on a GPU) is not started for a kernel whose
        candidates could not run: that check asks for the tuner's (trusted) kind, the cheapest."""
        left = self.budget.wall_s_left()
        need = self.candidate_estimate_s(trusted)
        if left is None or left >= need:
            return None
        return f"{left:.0f} s of wall time left, a candidate takes about {need:.0f} s"

    def _fits_in_wall_budget(self, proposal: Proposal) -> None:
        """Refuse a candidate the wall budget cannot see through (on any device: on the CPU the
        interpreter makes gates 1-3 take seconds to tens of seconds)."""
        reason = self._no_time_for_a_candidate(proposal.candidate.trusted)
        if reason:
            raise BudgetExceeded(f"{proposal.candidate.label} refused: {reason}", "wall_s")

    def _verify(self, kernel: TritonKernel, proposal: Proposal) -> Verdict:
        start = time.monotonic()
        left = self.budget.wall_s_left()  # the gates stop at the deadline: on the CPU one ran 2.3x past it
        verdict = self.cascade.verify(kernel, proposal.candidate, ends_at=None if left is None else time.time() + left)
        elapsed = time.monotonic() - start
        self._candidate_seconds[proposal.candidate.trusted].append(elapsed)
        if self.device == "cuda":
            self.budget.charge_gpu(elapsed)
        self.log(f"  {proposal.candidate.label}: {verdict.status} ({elapsed:.0f} s)")
        failed = next((g for g in verdict.gates if g.passed is False), None)
        if failed is not None:  # the gate's own words, in run.log: a rejection can be read after the run
            self.log(f"    why: {' '.join(failed.reason.split())[:400]}")
        if verdict.seconds:
            self.log(f"    {_steps(verdict.seconds)}")
        if self.store is not None and self.run_id is not None:
            cand = proposal.candidate
            self.store.runs.record_candidate(self.run_id, kernel.key, proposal.strategy, cand.label,
                                             cand.source, cand.config.to_json() if cand.config else None,
                                             verdict, verdict.speedup,
                                             tokens=int(proposal.extra.get("tokens", 0)))
            if verdict.infrastructure is not None:
                return verdict  # our failure teaches nothing about the candidate
            self.store.memory.remember(kernel.kind, self.env.gpu or self.device,
                                       proposal.note or proposal.strategy, verdict.status, verdict.speedup,
                                       cand.label[:300], kernel_key=kernel.key)
        return verdict

    def _conclude(self, kernel: TritonKernel, tried: list[tuple[Proposal, Verdict]],
                  outcome: KernelOutcome, pack: KernelPack) -> None:
        outcome.candidates = len(tried)
        accepted = [(p, v) for p, v in tried if v.accepted]
        for proposal, verdict in tried:
            counts = outcome.strategies.setdefault(strategy_of(proposal),
                                                   {"gated": 0, "accepted": 0, "chosen": 0})
            counts["gated"] += 1
            counts["accepted"] += int(verdict.accepted)
        if accepted:
            proposal, verdict = max(accepted, key=lambda pv: pv[1].speedup or 0.0)
            outcome.strategies[strategy_of(proposal)]["chosen"] += 1
            self._keep(kernel, proposal, verdict, outcome, pack, accepted=len(accepted))
            return
        if not tried:
            if outcome.detail:  # the budget ran out before the first candidate
                outcome.status = "not searched (budget)"
                return
            outcome.status = "no proposal"
            outcome.detail = "no strategy found a candidate faster than the compiler's kernel"
            if self.store is not None and self.device == "cuda":
                self.store.cache.record_negative(*self._cache_key(kernel.key), outcome.detail, self.run_id)
            return
        statuses = Counter(_shown_status(v) for _, v in tried)
        # Without a GPU, a kernel with a candidate that passed gates 1-3 is not settled: gate 4
        # never ran (the detail counts the others' verdicts).
        untimed = self.device != "cuda" and any(v.passed_first_three for _, v in tried)
        outcome.status = UNTIMED if untimed else "no candidate accepted"
        if all(v.infrastructure is not None for _, v in tried):  # none was judged: no verdict to name
            outcome.status = NOT_VERIFIED
        outcome.detail = "; ".join(f"{n} {s}" for s, n in statuses.most_common())
        # Only a GPU verdict is final: without one, performance was never measured. A candidate
        # our side failed to verify was not judged, so the kernel is not settled either.
        unjudged = any(v.infrastructure is not None for _, v in tried)
        if self.store is not None and self.device == "cuda" and not unjudged:
            self.store.cache.record_negative(*self._cache_key(kernel.key), outcome.detail, self.run_id)


def strategy_of(proposal: Proposal) -> str:
    """What kind of candidate a proposal is, in our own words: the proposing strategy's name
    (``"llm"``), or for the tuner's ``"config"`` (a launch config alone) or the name of the
    transformation or rewrite before its `` + <config>``. Never a model's text: it is published."""
    label = proposal.candidate.label
    if proposal.strategy != "tuner":
        return proposal.strategy
    if label.startswith("config"):
        return "config"
    name = label.split(" + ", 1)[0]
    return name if re.fullmatch(r"[a-z0-9_]{1,40}", name) else "other"


def _shown_status(verdict: Verdict) -> str:
    """A verdict's phrase for the report: ours failing reads as not verified, never a rejection."""
    if verdict.infrastructure is not None:
        return f"not verified (infrastructure: {verdict.infrastructure})"
    return verdict.status


def _steps(seconds: dict[str, float]) -> str:
    """``start 3.1 s, compile 2.0 s, ...`` for the log."""
    return ", ".join(f"{k} {v:g}" + ("" if k == "variants" else " s") for k, v in seconds.items())


def _replacement_kind(entry: PackEntry) -> str:
    if entry.source is not None and entry.config is not None:
        return "config+source"
    return "source" if entry.source is not None else "config"
