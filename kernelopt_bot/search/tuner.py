"""The timed tuner: the default search, with no LLM (it ranks variants by timing each alone on the GPU).

Per kernel: the configs the compiler's own max-autotune would try (:mod:`.seeds`: the search
starts where the compiler's ends), a seeded sample of the launch space and the neighbours of the
compiler's chosen config, the strategy rewrites the compiler can generate for it
(:mod:`.rewrites`: a looped reduction as one pass, each with a sample of its own launch space),
then coordinate descent from the best, then our source transformations on top of the best config,
and those of them that each won, stacked; then the transformations on the fastest rewrite.
Everything is timed alone with the per-kernel harness, one variant at a time on the GPU. Every
candidate is ours (launch configs, our own transformations of the compiler's source), marked
``origin="tuner"``: timing and gate 2 run inside the engine, no process is started for them. Only proposals faster than the compiler's kernel by a margin go on to the gates.

Without a GPU nothing can be ranked; the tuner then proposes a small deterministic set (one other
config, one transformation) so gates 1-3 still run for real.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from kernelopt_bot.candidate import Candidate, Proposal
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.search.base import SearchContext, SearchStrategy
from kernelopt_bot.search.budget import BudgetExceeded
from kernelopt_bot.search.rewrites import Rewrite
from kernelopt_bot.search.seeds import max_autotune_configs
from kernelopt_bot.search.space import block_choices, configs, sample
from kernelopt_bot.search.transforms import OWN_LAUNCH_SPACE, STACKED, applicable, stack

# (original_ms, [ms or error per variant]) for a kernel's candidates, timed alone
# (the gates' ``time_variants``: :class:`kernelopt_bot.search.orchestrator.Gates`).
Timer = Callable[[TritonKernel, list[Candidate]], tuple[float | None, list[float | str | None]]]

ORIGIN = "tuner"  # our own code: trusted like the target (Candidate.trusted)
MIN_KERNEL_GAIN = 1.02  # below this a kernel-level win does not survive the end-to-end gate
# A kernel's win, weighted by its share of model time, must promise at least this end to end
# (half of gamma's 3%: kernel-level timing in isolation is only a forecast of the model's).
MIN_PREDICTED_GAIN = 1.015
REWRITE_SAMPLE = 16  # launch configs timed for each strategy rewrite
# The source transformations are timed on each of the beam's configs within this share of the
# fastest, not on the fastest alone: configs that tie for the compiler's kernel need not tie for a
# transformation. Attention pooling bf16 on an H100 (12-07d), two runs: the plain kernel's best
# configs were 0.1731 and 0.1739 ms, and the reciprocal hoisted out of the loop took the second to
# 0.156 ms (1.178x verified end to end) while on the first it gained nothing; whichever config
# the timing noise put first decided between 1.178x and 1.054x.
TIED_CONFIGS_SHARE = 0.05
UNTIMED_SAMPLE = 8  # configs drawn, without a GPU, to propose the one with the largest blocks
# A transformation applied to a strategy rewrite is reported as its own kind of candidate
# ("drop_eviction_hints_on_rewrite"), not credited to the transformation on the compiler's kernel.
ON_REWRITE = "_on_rewrite"


def rewrite_candidates(rewrite: Rewrite, n: int, seed: int = 0) -> list[Candidate]:
    """A strategy rewrite on a sample of its own launch space (the donor kernel's: a persistent
    reduction tiles rows, not chunks of them), every config carrying the rewrite's fixed values."""
    if rewrite.donor is None:
        return []
    return [_on(rewrite, config) for config in sample(rewrite.donor, n, seed=seed)]


def rewrite_neighbours(rewrite: Rewrite, pinned: LaunchConfig) -> list[Candidate]:
    """The rewrite one step away from ``pinned`` in its own launch space (a block size or the
    warp count doubled or halved; the fixed values stay): coordinate descent for a rewrite."""
    if rewrite.donor is None:
        return []
    free = LaunchConfig({k: v for k, v in pinned.kwargs.items() if k not in rewrite.fixed},
                        pinned.num_warps, pinned.num_stages)
    valid = {_key(c) for c in configs(rewrite.donor)}
    return [_on(rewrite, n) for n in neighbours(free, valid)]


def _on(rewrite: Rewrite, config: LaunchConfig) -> Candidate:
    """The rewrite on ``config`` (a config of its own launch space), its fixed values added."""
    pinned = LaunchConfig({**config.kwargs, **rewrite.fixed}, config.num_warps, config.num_stages)
    return Candidate(f"{rewrite.name} + {config.describe()}", source=rewrite.source, config=pinned, origin=ORIGIN)


def carried_values(kernel: TritonKernel, chosen: LaunchConfig | None) -> Callable[[LaunchConfig], LaunchConfig]:
    """A config with the compiler's values of the constexprs the search does not vary added
    (``RSPLIT_SIZE`` of a mix-order reduction, say): without them the kernel has no value for
    the name and does not compile (on the H200, 30 variants of a layer-norm backward did not)."""
    varied = set(block_choices(kernel))
    fixed = {k: v for k, v in (chosen.kwargs if chosen else {}).items() if k not in varied and k in kernel.constexprs}

    def carry(config: LaunchConfig) -> LaunchConfig:
        if not fixed:
            return config
        return LaunchConfig({**fixed, **config.kwargs}, config.num_warps, config.num_stages)

    return carry


def predicted_gain(share: float | None, original_ms: float, kernel_ms: float) -> float | None:
    """End-to-end speedup if only this kernel got faster (Amdahl): 1 / (1 - s + s * new/old)."""
    if share is None or not 0.0 < share <= 1.0 or kernel_ms <= 0.0:
        return None
    return 1.0 / (1.0 - share + share * kernel_ms / original_ms)


def promising(share: float | None, original_ms: float, kernel_ms: float | None) -> bool:
    """Worth the gates' time: faster at kernel level by the margin, and, where the profile gives
    the kernel's share, by enough to move the whole model. The gates still decide."""
    if kernel_ms is None or original_ms / kernel_ms < MIN_KERNEL_GAIN:
        return False
    gain = predicted_gain(share, original_ms, kernel_ms)
    return gain is None or gain >= MIN_PREDICTED_GAIN


def neighbours(config: LaunchConfig, valid: set[tuple]) -> list[LaunchConfig]:
    """Configs one step away: one block size or the warp count doubled or halved."""
    out: list[LaunchConfig] = []
    for name, value in config.kwargs.items():
        for new in (value * 2, value // 2):
            if new >= 1:
                out.append(LaunchConfig({**config.kwargs, name: new}, config.num_warps, config.num_stages))
    for warps in (config.num_warps * 2, config.num_warps // 2):
        if warps >= 1:
            out.append(LaunchConfig(dict(config.kwargs), warps, config.num_stages))
    return [c for c in out if _key(c) in valid]


def block_elements(config: LaunchConfig) -> int:
    """Elements one program of ``config`` covers (the product of its block sizes): the grid shrinks
    as it grows."""
    return math.prod(v for k, v in config.kwargs.items() if k.upper().endswith("BLOCK"))


def _key(c: LaunchConfig) -> tuple:
    return (tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages)


class TimedTuner(SearchStrategy):
    """Timing batches per kernel: (1) max-autotune's configs, a seeded sample of the launch space
    and the compiler's config's neighbours; (2) the neighbours of the best ``beam`` configs
    together with every source transformation on each of those within
    :data:`TIED_CONFIGS_SHARE` of the best; each further descent round (up to
    ``descent_rounds``) one more batch, taken only while the previous one improved the best time
    by 1%. Variants are timed in the engine (on the H200, about 50 compiled and timed in 5 s), so
    the sample is wide: a narrow one is what leaves speed on the table."""

    name = "tuner"

    def __init__(self, timer: Timer | None, *, sample_size: int = 48, descent_rounds: int = 3,
                 beam: int = 3, seed: int = 0,
                 seeds: Callable[[TritonKernel], list[LaunchConfig]] = max_autotune_configs) -> None:
        self.timer = timer
        self.seeds = seeds
        self.sample_size = sample_size
        self.descent_rounds = descent_rounds
        self.beam = beam
        self.seed = seed

    def propose(self, ctx: SearchContext, limit: int) -> list[Proposal]:
        kernel = ctx.kernel
        chosen = LaunchConfig.from_json(ctx.chosen_config) if ctx.chosen_config else None
        carry = carried_values(kernel, chosen)
        space = {_key(c): c for c in map(carry, configs(kernel))}
        if self.timer is None:
            return self._untimed(ctx, space, chosen, carry, limit)

        timed: dict[tuple, float] = {}  # launch configs alone
        transformed: list[Proposal] = []  # source transformations (on a config)
        original_ms: float | None = None
        found = applicable(kernel.source)
        transforms = [(name, src) for name, src in found if name not in OWN_LAUNCH_SPACE]
        compiler_rewrites = {rw.source for rw in ctx.rewrites}
        # Our transformations whose best launch config is not the kernel's: searched as a strategy
        # rewrite is, on a sample of the kernel's launch space and by descent from the fastest.
        fixed = carry(LaunchConfig({}, 4, 1)).kwargs
        rewrites = [*ctx.rewrites, *(Rewrite(name, src, dict(fixed), kernel)
                                     for name, src in found if name in OWN_LAUNCH_SPACE)]
        stopped = False  # the timer refused a batch (the wall deadline): rank what was timed

        def run_job(batch: list[LaunchConfig], on: list[LaunchConfig], extra: list[Candidate] | None = None,
                    lead: int = 0) -> None:
            """Time ``batch`` (untimed configs only), ``extra`` candidates (strategy rewrites)
            and, on each config of ``on``, every transformation; nothing once the timer has refused. In
            the order a timer short of time takes them: the first ``lead`` configs of the batch
            (the compiler's own), the rewrites and transformations, then the other configs."""
            nonlocal original_ms, stopped
            if stopped:
                return
            leading = {_key(c) for c in batch[:lead]}
            unique = {_key(c): c for c in batch}
            untimed = [(k in leading, Candidate("config", config=c, origin=ORIGIN)) for k, c in unique.items()
                       if k not in timed]
            cands = [cand for lead_config, cand in untimed if lead_config]
            cands += extra or []
            cands += [Candidate(f"{name} + {config.describe()}", source=src, config=config, origin=ORIGIN)
                      for config in on for name, src in transforms]
            cands += [cand for lead_config, cand in untimed if not lead_config]
            if not cands:
                return
            try:
                orig, results = self.timer(kernel, cands)
            except BudgetExceeded:
                stopped = True
                return
            original_ms = original_ms or orig
            for cand, ms in zip(cands, results):
                if not isinstance(ms, float):
                    continue
                if cand.source is None and cand.config is not None:
                    timed[_key(cand.config)] = ms
                else:
                    kind = ("source transformations, stacked" if cand.label.startswith(STACKED) else
                            "strategy rewrite" if cand.source in compiler_rewrites else
                            "source transformation on a strategy rewrite" if ON_REWRITE in cand.label else
                            "source transformation")
                    transformed.append(Proposal(cand, self.name, ms, kind))

        seeds = [carry(c) for c in self.seeds(kernel)]
        space.update({_key(c): c for c in seeds})  # the compiler's configs are valid by construction
        first = seeds + [carry(c) for c in sample(kernel, self.sample_size, seed=self.seed)]
        if chosen is not None and _key(chosen) in space:
            first += neighbours(chosen, set(space))
        rewritten = [c for rw in rewrites for c in rewrite_candidates(rw, REWRITE_SAMPLE, seed=self.seed)]
        tried = {c.label for c in rewritten}
        run_job(first, [], rewritten, lead=len(seeds))
        by_source = {rw.source: rw for rw in rewrites}

        def next_rewrites() -> list[Candidate]:
            """Neighbours of the fastest rewrite so far, not yet tried."""
            timed_rewrites = [p for p in transformed if p.candidate.source in by_source and p.kernel_ms is not None]
            if not timed_rewrites:
                return []
            best_rw = min(timed_rewrites, key=lambda p: p.kernel_ms or float("inf")).candidate
            assert best_rw.source is not None and best_rw.config is not None
            fresh = [c for c in rewrite_neighbours(by_source[best_rw.source], best_rw.config) if c.label not in tried]
            tried.update(c.label for c in fresh)
            return fresh

        def best_ms() -> float:
            rewrites_ms = [p.kernel_ms for p in transformed if p.candidate.source in by_source and p.kernel_ms]
            return min([*timed.values(), *rewrites_ms], default=float("inf"))

        transformed_on: set[tuple] = set()
        for _ in range(max(1, self.descent_rounds)):
            if not timed or stopped:
                break
            ranked = sorted(timed, key=timed.__getitem__)
            before = best_ms()
            batch = [n for k in ranked[: self.beam] for n in neighbours(space[k], set(space))]
            tied = [k for k in ranked[: self.beam]
                    if timed[k] <= timed[ranked[0]] * (1 + TIED_CONFIGS_SHARE) and k not in transformed_on]
            run_job(batch, [space[k] for k in tied], next_rewrites())
            transformed_on.update(tied)
            if best_ms() >= before * 0.99:  # a round that gained under 1% (configs or rewrites) ends it
                break
        # One last job: the transformations that each won, stacked, and every transformation on
        # the fastest strategy rewrite (its own config), which the rounds above never combined.
        if original_ms is None or not (timed or transformed):  # rewrites timed before any config count too
            return []
        stacked = self._stacked(kernel.source, transformed, timed, set(by_source))
        last = ([stacked] if stacked is not None else []) + self._on_best_rewrite(transformed, set(by_source))
        if last:
            run_job([], [], last)
        ranked = sorted(timed, key=timed.__getitem__)
        proposals = [Proposal(Candidate(f"config {space[k].describe()}", config=space[k], origin=ORIGIN), self.name,
                              timed[k], "launch-config search") for k in ranked[:limit]]
        proposals += transformed
        proposals.sort(key=lambda p: p.kernel_ms if p.kernel_ms is not None else float("inf"))
        share = ctx.profile.share if ctx.profile is not None else None
        return [p for p in proposals if promising(share, original_ms, p.kernel_ms)][:limit]

    @staticmethod
    def _stacked(source: str, transformed: list[Proposal], timed: dict[tuple, float],
                 rewrites: set[str]) -> Candidate | None:
        """The source transformations that each beat their config alone by 1%, applied together on
        it (fastest first): each was timed on its own, and wins of different kinds (a pipelined
        loop, shifted sums, eviction hints) may add up. None unless two or more apply together."""
        winners: dict[tuple, tuple[LaunchConfig, list[tuple[float, str]]]] = {}
        for p in transformed:
            cand = p.candidate
            if cand.source in rewrites or cand.config is None or p.kernel_ms is None:
                continue
            alone = timed.get(_key(cand.config))
            if alone is not None and p.kernel_ms < alone * 0.99:
                won = winners.setdefault(_key(cand.config), (cand.config, []))[1]
                won.append((p.kernel_ms, cand.label.split(" + ", 1)[0]))
        if not winners:
            return None
        config, found = min(winners.values(), key=lambda item: min(item[1])[0])
        new, applied = stack(source, [name for _, name in sorted(found)])
        if len(applied) < 2 or any(p.candidate.source == new for p in transformed):
            return None  # fewer than two together, or what one of them alone already is
        return Candidate(f"{STACKED} + {config.describe()}", source=new, config=config, origin=ORIGIN)

    @staticmethod
    def _on_best_rewrite(transformed: list[Proposal], rewrites: set[str]) -> list[Candidate]:
        """Our source transformations applied to the fastest strategy rewrite timed, on its config:
        a one-pass rewrite keeps the compiler's eviction hints, which are as often wrong for it."""
        timed_rewrites = [p for p in transformed if p.candidate.source in rewrites and p.kernel_ms is not None]
        if not timed_rewrites:
            return []
        best = min(timed_rewrites, key=lambda p: p.kernel_ms or float("inf")).candidate
        assert best.source is not None
        return [Candidate(f"{name}{ON_REWRITE} + {best.label}", source=src, config=best.config, origin=ORIGIN)
                for name, src in applicable(best.source)]

    def _untimed(self, ctx: SearchContext, space: dict[tuple, LaunchConfig], chosen: LaunchConfig | None,
                 carry: Callable[[LaunchConfig], LaunchConfig], limit: int) -> list[Proposal]:
        """No GPU: one other valid config and one transformation, unranked. Of the configs at hand
        (the compiler's neighbours, else a sample) the one with the largest blocks: the interpreter
        runs each program of the grid in Python, so a one-element block makes gate 2 take a minute
        on a kernel that a GPU runs in microseconds."""
        proposals: list[Proposal] = []
        pick = neighbours(chosen, set(space)) if chosen and _key(chosen) in space else []
        pick = pick or [carry(c) for c in sample(ctx.kernel, UNTIMED_SAMPLE, seed=self.seed)]
        pick = [c for c in pick if chosen is None or _key(c) != _key(chosen)]  # not the compiler's own again
        pick.sort(key=block_elements, reverse=True)
        if pick:
            proposals.append(Proposal(Candidate(f"config {pick[0].describe()}", config=pick[0], origin=ORIGIN), self.name,
                                      None, "launch-config search (not timed: no GPU)"))
        for rewrite in ctx.rewrites[:1]:  # first: it changes the most, so gates 1-3 should see it
            for cand in rewrite_candidates(rewrite, 1, seed=self.seed):
                proposals.insert(0, Proposal(cand, self.name, None, "strategy rewrite (not timed: no GPU)"))
        for name, src in applicable(ctx.kernel.source)[:1]:
            proposals.append(Proposal(Candidate(name, source=src, origin=ORIGIN), self.name, None,
                                      "source transformation (not timed: no GPU)"))
        return proposals[:limit]
