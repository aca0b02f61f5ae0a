"""The offline tuner: the default search, no LLM.

Per kernel: a seeded sample of the launch space plus the neighbours of the compiler's own config,
then coordinate descent from the best, then our source transformations on top of the best config.
Everything is timed alone with the per-kernel harness, in the sandbox, one variant at a time on
the GPU. Only proposals faster than the compiler's kernel by a margin go on to the gates.

Without a GPU nothing can be ranked; the tuner then proposes a small deterministic set (one other
config, one transformation) so gates 1-3 still run for real.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelopt_bot.compile.artifact import TritonKernel
from kernelopt_bot.search.base import Proposal, SearchContext, SearchStrategy
from kernelopt_bot.search.space import configs, sample
from kernelopt_bot.search.transforms import applicable
from kernelopt_bot.stitch.pack import LaunchConfig
from kernelopt_bot.verify.cascade import Candidate

# (original_ms, [ms or error per variant]) for a kernel's candidates, timed alone in the sandbox
# (:meth:`kernelopt_bot.verify.cascade.Cascade.time_variants`).
Timer = Callable[[TritonKernel, list[Candidate]], tuple[float | None, list[float | str | None]]]

MIN_KERNEL_GAIN = 1.02  # below this a kernel-level win does not survive the end-to-end gate
# A kernel's win, weighted by its share of model time, must promise at least this end to end
# (half of gamma's 3%: kernel-level timing in isolation is only a forecast of the model's).
MIN_PREDICTED_GAIN = 1.015


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


def _key(c: LaunchConfig) -> tuple:
    return (tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages)


class OfflineTuner(SearchStrategy):
    name = "tuner"

    def __init__(self, timer: Timer | None, *, sample_size: int = 24, descent_rounds: int = 2,
                 seed: int = 0) -> None:
        self.timer = timer
        self.sample_size = sample_size
        self.descent_rounds = descent_rounds
        self.seed = seed

    def propose(self, ctx: SearchContext, limit: int) -> list[Proposal]:
        kernel = ctx.kernel
        space = {_key(c): c for c in configs(kernel)}
        chosen = LaunchConfig.from_json(ctx.chosen_config) if ctx.chosen_config else None
        if self.timer is None:
            return self._untimed(ctx, space, chosen, limit)

        timed: dict[tuple, float] = {}
        original_ms: float | None = None

        def time_configs(batch: list[LaunchConfig]) -> None:
            nonlocal original_ms
            batch = [c for c in batch if _key(c) not in timed]
            if not batch:
                return
            orig, results = self.timer(kernel, [Candidate("config", config=c) for c in batch])
            original_ms = original_ms or orig
            for c, ms in zip(batch, results):
                if isinstance(ms, float):
                    timed[_key(c)] = ms

        first = sample(kernel, self.sample_size, seed=self.seed)
        if chosen is not None and _key(chosen) in space:
            first += neighbours(chosen, set(space))
        time_configs(first)
        for _ in range(self.descent_rounds):
            if not timed:
                break
            best_key = min(timed, key=timed.__getitem__)
            before = timed[best_key]
            time_configs(neighbours(space[best_key], set(space)))
            if min(timed.values()) >= before * 0.99:
                break
        if not timed or original_ms is None:
            return []
        ranked = sorted(timed, key=timed.__getitem__)
        proposals = [Proposal(Candidate(f"config {space[k].describe()}", config=space[k]), self.name,
                              timed[k], "launch-config search") for k in ranked[:limit]]
        best = space[ranked[0]]
        transformed = applicable(kernel.source)
        if transformed:
            cands = [Candidate(f"{name} + {best.describe()}", source=src, config=best) for name, src in transformed]
            _, results = self.timer(kernel, cands)
            for cand, ms in zip(cands, results):
                if isinstance(ms, float):
                    proposals.append(Proposal(cand, self.name, ms, "source transformation"))
        proposals.sort(key=lambda p: p.kernel_ms if p.kernel_ms is not None else float("inf"))
        share = ctx.profile.share if ctx.profile is not None else None
        return [p for p in proposals if promising(share, original_ms, p.kernel_ms)][:limit]

    def _untimed(self, ctx: SearchContext, space: dict[tuple, LaunchConfig], chosen: LaunchConfig | None,
                 limit: int) -> list[Proposal]:
        """No GPU: one other valid config and one transformation, unranked."""
        proposals: list[Proposal] = []
        pick = neighbours(chosen, set(space)) if chosen and _key(chosen) in space else []
        pick = pick or sample(ctx.kernel, 1, seed=self.seed)
        if pick:
            proposals.append(Proposal(Candidate(f"config {pick[0].describe()}", config=pick[0]), self.name,
                                      None, "launch-config search (not timed: no GPU)"))
        for name, src in applicable(ctx.kernel.source)[:1]:
            proposals.append(Proposal(Candidate(name, source=src), self.name, None,
                                      "source transformation (not timed: no GPU)"))
        return proposals[:limit]
