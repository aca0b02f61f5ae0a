"""One run's plan: its budget, gamma and timing rounds, parsed and checked once.

A run is asked for with overrides of :data:`DEFAULT_BUDGET` (``--budget KEY=VALUE``, a config
file's ``budget:``, a PR command's ``--budget N``) and a gamma. :meth:`RunPlan.parse` merges and
checks them where the run starts, so a bad value is one clear error before any work, and the
pipeline passes the one typed :class:`RunPlan` down instead of a dict every step would re-read
and re-convert. ``result.json``'s ``"budget"`` is :meth:`RunPlan.to_json`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.errors import BadInputError, KerneloptError

if TYPE_CHECKING:
    from kernelopt_bot.search.budget import Budget
    from kernelopt_bot.verify.cascade import VerifyOptions

DEFAULT_BUDGET: dict[str, Any] = {
    "candidates": 8,  # verified candidates in the whole run
    "kernels": 3,  # kernels searched, most headroom first, then largest share
    "candidates_per_kernel": 3,
    "wall_seconds": 110,  # `kernelopt optimize` on one problem within two minutes by default
    "gpu_seconds": None,
    "tokens": 200_000,
    "cost": None,
    "compile_options": True,  # measure the compiler's own options as whole-model candidates
    "rounds": 10,  # interleaved rounds of a comparison, at most: a slow model takes fewer (RunPlan.for_model)
    # The run's GPU memory beyond its processes' CUDA contexts, at most this many times what the
    # compiled model alone holds, never less than 1 GiB (null: as much as the device has free). Model arms compile one
    # after another, not side by side, where the factor leaves no room for more.
    "gpu_memory_factor": 3.0,
}

# What each budget key takes: a whole number, a number, or true/false; whether null ("no limit")
# is allowed; the least value allowed.
_COUNT, _AMOUNT, _SWITCH = "a whole number", "a number", "true or false"
_KINDS: dict[str, tuple[str, bool, float]] = {
    "candidates": (_COUNT, True, 0),
    "kernels": (_COUNT, False, 0),
    "candidates_per_kernel": (_COUNT, False, 0),
    "wall_seconds": (_AMOUNT, True, 0),
    "gpu_seconds": (_AMOUNT, True, 0),
    "tokens": (_COUNT, True, 0),
    "cost": (_AMOUNT, True, 0),
    "compile_options": (_SWITCH, False, 0),
    "rounds": (_COUNT, False, 1),
    "gpu_memory_factor": (_AMOUNT, True, 1),
}


@dataclass(frozen=True)
class RunPlan:
    """What one run may spend and what it must reach. ``None`` is no limit, where allowed."""

    candidates: int | None = DEFAULT_BUDGET["candidates"]  # candidates through the gates, whole run
    kernels: int = DEFAULT_BUDGET["kernels"]  # kernels searched, most headroom first, then largest share
    candidates_per_kernel: int = DEFAULT_BUDGET["candidates_per_kernel"]
    wall_seconds: float | None = DEFAULT_BUDGET["wall_seconds"]  # a deadline for the whole run
    gpu_seconds: float | None = DEFAULT_BUDGET["gpu_seconds"]
    tokens: int | None = DEFAULT_BUDGET["tokens"]  # LLM tokens, prompt and completion together
    cost: float | None = DEFAULT_BUDGET["cost"]  # LLM spending, in the endpoint's price unit
    compile_options: bool = DEFAULT_BUDGET["compile_options"]  # measure the compiler's own options
    rounds: int = DEFAULT_BUDGET["rounds"]  # interleaved rounds of each end-to-end comparison, at most
    gpu_memory_factor: float | None = DEFAULT_BUDGET["gpu_memory_factor"]  # the run's GPU memory, in models
    gamma: float = DEFAULT_GAMMA  # the end-to-end speedup a replacement must reach

    @classmethod
    def parse(cls, overrides: dict[str, Any] | None, gamma: float = DEFAULT_GAMMA) -> RunPlan:
        """:data:`DEFAULT_BUDGET` with ``overrides`` applied, checked: an unknown key is a
        :class:`KerneloptError`, a value of the wrong kind or out of range a :class:`BadInputError`."""
        values: dict[str, Any] = {}
        for key, value in (overrides or {}).items():
            if key not in DEFAULT_BUDGET:
                raise KerneloptError(f"unknown budget key {key!r} (known: {', '.join(DEFAULT_BUDGET)})")
            values[key] = _checked(key, value)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not math.isfinite(gamma) or gamma < 1.0:
            raise BadInputError(f"gamma {gamma!r}: must be a number of at least 1.0 (the speedup to reach)")
        return cls(**values, gamma=gamma)

    def to_json(self) -> dict[str, Any]:
        """The budget as ``result.json`` and the store hold it: every key of :data:`DEFAULT_BUDGET`,
        in that order, as before the plan existed (gamma is not a budget key: the result's
        reproduce command carries it)."""
        return {key: getattr(self, key) for key in DEFAULT_BUDGET}

    def budget(self, elapsed_before: float = 0.0, reserve_s: float = 0.0) -> Budget:
        """The search's budget: the wall limit less ``reserve_s`` (kept for the final benchmark),
        counting the ``elapsed_before`` seconds the run spent before the budget existed."""
        from kernelopt_bot.search.budget import Budget

        wall = None if self.wall_seconds is None else max(0.0, float(self.wall_seconds) - reserve_s)
        return Budget(max_candidates=self.candidates, max_tokens=self.tokens, max_gpu_s=self.gpu_seconds,
                      max_wall_s=wall, max_cost=self.cost, elapsed_before=elapsed_before)

    def for_model(self, model_ms: float | None, train: bool = False) -> RunPlan:
        """This plan with its rounds fitted to a model of ``model_ms`` a call (the profile's;
        :func:`~kernelopt_bot.harness.bench.rounds_within`): ``rounds`` is the most a comparison
        takes, and a slow model's take fewer, so its compiler options and candidates still fit
        in the wall budget. ``train``: a training step's, whose comparisons also time its halves."""
        from kernelopt_bot.harness.bench import rounds_within

        fitted = rounds_within(model_ms, self.rounds, split_step=train)
        return self if fitted == self.rounds else replace(self, rounds=fitted)

    def verify_options(self) -> VerifyOptions:
        """The gates' options this plan sets (gamma, rounds); the rest keep their defaults."""
        from kernelopt_bot.verify.cascade import VerifyOptions

        return VerifyOptions(gamma=self.gamma, rounds=self.rounds)


def _checked(key: str, value: Any) -> Any:
    """``value`` for budget key ``key`` if it is of the kind the key takes, else a BadInputError
    that says what the key takes. A whole number written as ``2.0`` is taken as 2."""
    kind, nullable, least = _KINDS[key]
    if value is None:
        if nullable:
            return None
        raise BadInputError(f"budget {key}: null is not allowed (it takes {kind})")
    if kind == _SWITCH:
        if isinstance(value, bool):
            return value
        raise BadInputError(f"budget {key}={value!r}: must be true or false")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadInputError(f"budget {key}={value!r}: must be {kind}" + (" or null" if nullable else ""))
    if kind == _COUNT:
        if not float(value).is_integer():
            raise BadInputError(f"budget {key}={value!r}: must be {kind}")
        value = int(value)
    if value < least:
        raise BadInputError(f"budget {key}={value!r}: must be at least {least:g}")
    return value

