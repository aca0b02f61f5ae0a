"""An Arena: the long-lived baseline arms of one target, and short-lived candidate arms.

Starting a process and compiling the model costs seconds to tens of seconds. The baseline (and,
on a GPU, the second baseline that measures the noise floor) do not change while candidates for
the same target are verified, so they are started once and asked again and again; each candidate
gets its own fresh process, with its pack, compile mode and Inductor settings.
"""

from __future__ import annotations

from typing import Any

from kernelopt_bot.harness.model_worker import ModelWorker, WorkerSpec
from kernelopt_bot.stitch.pack import KernelPack


class Arena:
    """Baseline arms for ``target`` on ``device``, started on first use and closed with the arena."""

    def __init__(self, target: str, device: str, dtype: str, *, timeout_s: float = 600.0,
                 mode: str | None = None, config: dict[str, Any] | None = None) -> None:
        self.target, self.device, self.dtype = target, device, dtype
        self.timeout_s = timeout_s
        self.mode, self.config = mode, dict(config or {})
        self._workers: dict[str, ModelWorker] = {}

    def _spec(self, label: str, **overrides: Any) -> WorkerSpec:
        fields: dict[str, Any] = {"mode": self.mode, "config": dict(self.config)}
        fields.update(overrides)
        return WorkerSpec(label, self.target, self.device, self.dtype, **fields)

    def _baseline_labels(self) -> list[str]:
        return ["baseline"] + (["baseline-repeat"] if self.device == "cuda" else [])

    def prestart(self) -> None:
        """Start the baseline arms compiling now and return at once: the search runs while they
        compile, and :meth:`baselines` later only waits for what is left of their start."""
        for label in self._baseline_labels():
            worker = self._workers.get(label)
            if worker is None or not worker.alive:
                self._workers[label] = ModelWorker(self._spec(label), start_timeout_s=self.timeout_s)

    def baselines(self) -> tuple[ModelWorker, ModelWorker | None]:
        """The baseline and, on a GPU, the repeat baseline (started together, compiled in parallel)."""
        self.prestart()
        for label in self._baseline_labels():
            worker = self._workers[label]
            if not worker.ready:
                try:
                    worker.wait_ready()
                except BaseException:
                    self._workers.pop(label).close()  # a later call starts it afresh
                    raise
        return self._workers["baseline"], self._workers.get("baseline-repeat")

    def candidate(self, pack: KernelPack | None, *, label: str = "candidate", mode: str | None = None,
                  config: dict[str, Any] | None = None, wait: bool = True) -> ModelWorker:
        """A fresh arm with ``pack`` installed (and optionally its own mode/settings); the caller
        closes it (it is a context manager). ``wait=False`` returns it while it still compiles:
        the caller calls ``wait_ready`` when it needs it (and closes it either way)."""
        overrides: dict[str, Any] = {"pack": pack.to_json() if pack is not None else None}
        if mode is not None:
            overrides["mode"] = mode
        if config is not None:
            overrides["config"] = {**self.config, **config}
        worker = ModelWorker(self._spec(label, **overrides), start_timeout_s=self.timeout_s)
        if not wait:
            return worker
        try:
            worker.wait_ready()
        except BaseException:
            worker.close()
            raise
        return worker

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()
        self._workers.clear()

    def __enter__(self) -> Arena:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
