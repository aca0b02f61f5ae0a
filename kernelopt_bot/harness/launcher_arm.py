"""A kernel target as an arm of the end-to-end comparison: the same launcher (or Helion kernel),
its kernel forced to one config (the candidate's, or the original's for the baseline and its repeat).

Answers ``("outputs", seed)`` and ``("time", seed, reps)`` as a model arm does, so gate 4 for a
standalone kernel is :func:`~kernelopt_bot.harness.bench.compare_arms` and
:func:`~kernelopt_bot.verify.perf.judge`, the machinery modules use: interleaved rounds, fresh
inputs per round, L2 flushed, the median of the passes' paired ratios, the noise floor from the
original against itself. It runs in the process that holds the launcher (the engine): the
launcher is the target's own code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.arm_process import ArmRaised, flatten_outputs
from kernelopt_bot.harness.timing import time_model
from kernelopt_bot.launchers import KernelTarget


class LauncherArm:
    """The target with each kernel of ``forced`` running that config."""

    where = "engine"

    def __init__(self, target: KernelTarget, forced: dict[str, dict[str, Any]], label: str) -> None:
        self.target, self.forced, self.label = target, {k: dict(v) for k, v in forced.items()}, label
        self.info: dict[str, Any] = {"applied": sorted(forced), "skipped": []}
        self.ready = True

    def wait_ready(self) -> dict[str, Any]:
        return self.info

    def _forced(self) -> dict[str, dict[str, Any]]:
        return self.forced

    def request(self, *message: Any, timeout_s: float = 600.0) -> Any:
        op, *args = message
        if op == "outputs":
            return self._answer(lambda: [t.clone() for t in flatten_outputs(
                self.target.run(args[0], self._forced()), self.target.device)])
        if op == "time":
            seed, reps = args
            inputs = self.target.make_inputs(seed)
            return self._answer(lambda: time_model(
                self.target.device, lambda: self.target.run(seed, self._forced(), inputs, sync=False),
                reps=reps, hide_host=True).reply())
        raise ArmRaised(self.label, f"unknown request {op!r}")

    def _answer(self, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except Exception as exc:  # the launcher with this config raised: the arm's own failure
            raise ArmRaised(self.label, one_line(exc)) from exc

    def close(self) -> None:
        """Nothing to stop: the forced config never outlives a request."""
