"""Model arms inside the engine: the captured model, with one trusted kernel swapped in per request.

Gates 3 and 4 compare a packed model against the compiler's baseline. For untrusted source each
arm is a fresh process (:mod:`kernelopt_bot.harness.arm_process`); for a trusted candidate (the
tuner's own configs and transformations) starting and compiling that process was most of a
candidate's gates (20-69 s on an H200). The engine already holds the compiled model
(:class:`~kernelopt_bot.capture.recorder.Capture`), whose output modules call each kernel through a
module-level name at every call, so swapping that name for the candidate's compiled kernel object
runs the candidate inside the compiled model, as ``install(pack)`` would have compiled it.

An :class:`EngineArm` answers the same requests as a model arm process (``info``,
``request("outputs", seed)``, ``request("time", seed, reps)``, ``ready``/``wait_ready``,
``close``), computed as :func:`kernelopt_bot.harness.arm_process._serve` computes them. The swap
lasts one request and is undone in a ``finally``, so the baseline arms (nothing swapped) and the
candidate arm share one compiled model and take turns. Its numbers judge a candidate; the number
a run reports is measured again in fresh processes (``install(pack)`` then a fresh compile).
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.capture.recorder import Capture
from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.arm_process import ArmRaised
from kernelopt_bot.harness.failures import is_out_of_memory
from kernelopt_bot.harness.memory import free_memory
from kernelopt_bot.harness.timing import time_model, time_request
from kernelopt_bot.pack.format import integer_arguments
from kernelopt_bot.pack.runtime import ShapeGuardedKernel, sizes_baked_in


class _Counted:
    """The candidate's kernel object, counting the launches that really ran it (a shape guard
    may send a launch to the compiler's kernel instead)."""

    def __init__(self, kernel_obj: Any) -> None:
        self._kernel_obj = kernel_obj
        self.launches = 0

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.launches += 1
        return self._kernel_obj.run(*args, **kwargs)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._kernel_obj, item)


@dataclass
class KernelSwap:
    """Where one candidate goes in the compiled model: every output-module global whose kernel
    has the candidate's key (the pack's entry applies by key, so it replaces them all), each
    with the object that stands in for it there."""

    kernel: TritonKernel
    sites: list[tuple[types.ModuleType, str, Any]]  # (module, global name, stand-in)
    counted: _Counted

    @classmethod
    def build(cls, capture: Capture, kernel: TritonKernel, replacement: Any) -> KernelSwap:
        """The swap of ``replacement`` (a compiled kernel object) for ``kernel``, guarded as the
        pack guards it: to the recorded launch's integer arguments unless the kernel bakes its
        sizes in (:func:`~kernelopt_bot.pack.runtime.sizes_baked_in`)."""
        counted = _Counted(replacement)
        shapes = (integer_arguments(capture.recording(kernel.graph, kernel.name).args),)
        guarded = not sizes_baked_in(kernel.source)
        sites: list[tuple[types.ModuleType, str, Any]] = []
        for graph, loaded in zip(capture.artifact.graphs, capture.graphs):
            for other in graph.kernels:
                original = getattr(loaded.module, other.name, None)
                if other.key != kernel.key or original is None:
                    continue
                stand_in = ShapeGuardedKernel(counted, original, shapes, other.name) if guarded else counted
                sites.append((loaded.module, other.name, stand_in))
        return cls(kernel, sites, counted)

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The candidate in place for the block; every original global back afterwards, whatever
        happened inside."""
        saved = [(module, name, getattr(module, name)) for module, name, _ in self.sites]
        try:
            for module, name, stand_in in self.sites:
                setattr(module, name, stand_in)
            yield
        finally:
            for module, name, original in saved:
                setattr(module, name, original)


class EngineArm:
    """One arm on the engine's compiled model: the baseline (``swap`` None) or the model with a
    trusted candidate swapped in for each request. Drop-in for a
    :class:`~kernelopt_bot.harness.arm_process.ArmProcess` where gates 3 and 4 use one."""

    where = "engine"  # gate 4 records where its arms ran; only processes' numbers are reported

    def __init__(self, capture: Capture, label: str, swap: KernelSwap | None = None) -> None:
        self.capture, self.label, self.swap = capture, label, swap
        self.info: dict[str, Any] = {"applied": [], "skipped": []}
        self.ready = True
        if swap is None:
            return
        # As a model arm's start does: run once, and say whether the candidate really ran.
        self._answer(lambda: self._call(0))
        if swap.counted.launches:
            self.info["applied"] = [swap.kernel.name]
        else:
            self.info["skipped"] = [f"{swap.kernel.name}: the compiled model never launched the candidate "
                                    f"({len(swap.sites)} call site(s) swapped)"]

    def wait_ready(self) -> dict[str, Any]:
        return self.info

    def _call(self, seed: int) -> Any:
        target = self.capture.target
        return target.run(self.capture.compiled, target.make_inputs(seed))

    def _outputs(self, seed: int) -> list[torch.Tensor]:
        # Copies: a later call of the same compiled model must not change what was handed out.
        target = self.capture.target
        return [t.clone() for t in target.compared_outputs(self.capture.compiled, target.make_inputs(seed),
                                                            device=target.device)]

    def _time(self, *args: Any) -> tuple[float, float | None] | None:
        seed, reps, part, hide_host = time_request(args)
        target = self.capture.target
        inputs = target.make_inputs(seed)
        return time_model(target.device, functools.partial(target.run, self.capture.compiled, inputs, part=part),
                          reps=reps, hide_host=hide_host).reply()

    def request(self, *message: Any, timeout_s: float = 600.0) -> Any:
        """``("outputs", seed)`` or ``("time", seed, reps[, part[, hide_host]])``, answered as a model arm answers.
        ``timeout_s`` is accepted for the interface; trusted code in the engine is not killed."""
        op, *args = message
        if op == "outputs":
            return self._answer(lambda: self._outputs(*args))
        if op == "time":
            return self._answer(lambda: self._time(*args))
        raise ArmRaised(self.label, f"unknown request {op!r}")

    def _answer(self, work: Callable[[], Any]) -> Any:
        """``work()`` with the candidate swapped in (if any). What it raises comes back as the arm's
        own failure (:class:`ArmRaised`, as from a process); out of memory is retried once after
        freeing, and then says so (gates 3 and 4 treat that text as ours, not the candidate's)."""
        try:
            try:
                return self._swapped(work)
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
            free_memory(self.capture.target.device)
            return self._swapped(work)
        except Exception as exc:  # the model with the candidate raised: reported like an arm's failure
            raise ArmRaised(self.label, one_line(exc)) from exc

    def _swapped(self, work: Callable[[], Any]) -> Any:
        if self.swap is None:
            return work()
        with self.swap.applied():
            return work()

    def close(self) -> None:
        """Nothing to stop: the swap never outlives a request."""

    def __enter__(self) -> EngineArm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
