"""Run and time one kernel alone, with the argument tensors it really got inside the model.

This is what the search and the gates call: the compiler's kernel as it ran in the model, the
same kernel pinned to another launch config, or another source for it, all on copies of the
arguments recorded at its call site (:func:`kernelopt_bot.capture.recorder.record_kernel_arguments`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.capture.recorder import KernelRecording, snapshot
from kernelopt_bot.harness.timing import Timing, time_on
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.pack.runtime import pin_config_source, rename_kernel

_UNIQUE = itertools.count()


@dataclass
class KernelRun:
    """Arguments after a launch: outputs and in-place results live in them."""

    args: tuple[Any, ...]


class KernelHarness:
    """One kernel, its recorded arguments, and ways to run or time variants of it."""

    def __init__(self, kernel: TritonKernel, recording: KernelRecording, device: str) -> None:
        self.kernel = kernel
        self.recording = recording
        self.device = device

    def fresh_args(self) -> tuple[Any, ...]:
        """Copies of the recorded arguments (same storage layout)."""
        return tuple(snapshot(a) for a in self.recording.args)

    def timing_args(self) -> tuple[Any, ...]:
        """Arguments to time on, copying as little as possible (on a model that fills the GPU a
        copy of every argument is the memory the run does not have): what the kernel only reads
        and what it only writes (``out_ptr``: its prior contents are never read) are the recorded
        tensors themselves; what it reads and writes (``in_out_ptr``) is a copy, restored from
        the recording before every call."""
        copied = {i for i in self._mutated_positions() if not self.kernel.params[i].startswith("out_ptr")}
        return tuple(snapshot(a) if i in copied else a for i, a in enumerate(self.recording.args))

    def load(self, source: str | None = None, config: LaunchConfig | None = None) -> Any:
        """The compiler's own kernel object, or a freshly loaded variant.

        Without ``source`` and ``config`` this is the kernel that ran in the model, with the
        launch config Inductor's autotuning chose for it.
        """
        if source is None and config is None and self.recording.kernel is not None:
            return self.recording.kernel
        from torch._inductor.codecache import PyCodeCache

        # A unique trailer gives each variant its own module, never a cached twin.
        module = PyCodeCache.load(f"{self.variant_text(source, config)}\n# kernelopt variant {next(_UNIQUE)}\n")
        return getattr(module, self.kernel.name)

    def variant_text(self, source: str | None, config: LaunchConfig | None) -> str:
        """The module text of a variant: ``source`` (default the compiler's) under the kernel's
        name, pinned to ``config`` when given. A compile process builds the same kernel from it
        (:mod:`kernelopt_bot.harness.compile_pool`)."""
        text = rename_kernel(source, self.kernel.name) if source is not None else self.kernel.source
        if config is not None:
            text = pin_config_source(text, self.kernel.name, config)
        return text

    def _stream(self) -> Any:
        if self.device == "cuda":
            return torch.cuda.current_stream().cuda_stream
        return 0

    def _check_placed(self, args: tuple[Any, ...]) -> None:
        """Arguments on another device than the harness's fail at launch with "CUDA driver error:
        invalid argument", which says nothing; the capture keeps recordings in host memory (what
        only reads their sizes, as the profile does, needs them nowhere else)."""
        where = torch.device(self.device).type
        elsewhere = [a.device for a in args if isinstance(a, torch.Tensor) and a.device.type != where]
        if elsewhere:
            raise ValueError(f"{self.kernel.name}: its recorded arguments are on {elsewhere[0]}, the harness "
                             f"runs on {self.device}: pass recording.on({self.device!r})")

    def launch(self, kernel_obj: Any, args: tuple[Any, ...]) -> None:
        kernel_obj.run(*args, **self.recording.kwargs, stream=self._stream())

    def run(self, source: str | None = None, config: LaunchConfig | None = None,
            args: tuple[Any, ...] | None = None) -> KernelRun:
        """Launch once on ``args`` (default: fresh copies of the recorded ones)."""
        kernel_obj = self.load(source, config)
        run_args = self.fresh_args() if args is None else args
        self._check_placed(run_args)
        self.launch(kernel_obj, run_args)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return KernelRun(run_args)

    def time(self, source: str | None = None, config: LaunchConfig | None = None,
             *, reps: int = 100, warmup: int = 5) -> Timing:
        """Median time of one launch, L2 flushed before each (not measured without a GPU).

        Arguments the kernel mutates are restored from the recording before every call, outside
        the timed region, so every timed call sees the data the model gave it.
        """
        return self.time_kernel(self.load(source, config), reps=reps, warmup=warmup)

    def time_kernel(self, kernel_obj: Any, *, reps: int = 100, warmup: int = 5) -> Timing:
        """:meth:`time` for a kernel object already loaded (and perhaps compiled) by :meth:`load`."""
        args = self.timing_args()
        self._check_placed(args)
        recorded = self.recording.args
        restored = [i for i in self._mutated_positions() if args[i] is not recorded[i]]

        def restore() -> None:
            for i in restored:
                args[i].copy_(recorded[i])

        return time_on(self.device, lambda: self.launch(kernel_obj, args),
                       reps=reps, warmup=warmup, before_each=restore if restored else None)

    def _mutated_positions(self) -> list[int]:
        names = set(self.kernel.mutated_args)
        return [i for i, p in enumerate(self.kernel.params[: len(self.recording.args)])
                if p in names and isinstance(self.recording.args[i], torch.Tensor)]

    def bytes_moved(self) -> int:
        """Bytes the kernel must move at least: each tensor argument read or written once,
        arguments it both reads and writes (``in_out_ptr``) counted twice."""
        total = 0
        mutated = set(self._mutated_positions())
        for i, arg in enumerate(self.recording.args):
            if isinstance(arg, torch.Tensor):
                size = arg.numel() * arg.element_size()
                total += 2 * size if i in mutated else size
        return total
