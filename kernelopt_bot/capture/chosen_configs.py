"""Which launch config each Triton kernel of a compiled model settled on, in any process.

The engine's capture knows the default compile's choices (``KernelRecording.chosen_config``); a
compiler option's arm compiles its own kernels and autotunes them itself. When max-autotune or
coordinate descent beats the tuner end to end, the configs that option's compile chose are the
evidence of where the tuner fell short, so an arm reports them (``info["configs"]``) and the run
keeps them with the option's recommendation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kernelopt_bot.capture.recorder import launch_config
from kernelopt_bot.pack.format import LaunchConfig


class KernelsSeen:
    """The kernels ``AsyncCompile.triton`` handed out while :func:`seeing_kernels` was active."""

    def __init__(self) -> None:
        self.kernels: dict[str, Any] = {}

    def configs(self) -> dict[str, str]:
        """Each kernel's settled config, described (``XBLOCK=64, R0_BLOCK=8, num_warps=4, ...``);
        kernels that have not run yet (several configs, none chosen) are left out."""
        out: dict[str, str] = {}
        for name, kernel in sorted(self.kernels.items()):
            data = launch_config(kernel)
            if data is not None:
                out[name] = LaunchConfig(data["kwargs"], data["num_warps"], data["num_stages"]).describe()
        return out


@contextmanager
def seeing_kernels() -> Iterator[KernelsSeen]:
    """Note every kernel compiled from here on (wrapping whatever ``AsyncCompile.triton`` is now:
    the compiler's own, or the pack runtime's hook, which stays in force)."""
    from torch._inductor.async_compile import AsyncCompile

    seen = KernelsSeen()
    inner = AsyncCompile.triton

    def triton(self: Any, kernel_name: str, source_code: str, *args: Any, **kwargs: Any) -> Any:
        kernel = inner(self, kernel_name, source_code, *args, **kwargs)
        resolve = getattr(kernel, "result_fn", None)
        if hasattr(kernel, "run") or not callable(resolve):
            seen.kernels[kernel_name] = kernel
            return kernel

        # A future (parallel compile): the kernel is noted when Inductor resolves it. Asking the
        # future again later would run its loading (and autotuning set-up) a second time on the
        # kernel the model uses.
        def resolved() -> Any:
            done = resolve()
            seen.kernels[kernel_name] = done
            return done

        kernel.result_fn = resolved
        return kernel

    AsyncCompile.triton = triton  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        AsyncCompile.triton = inner  # type: ignore[method-assign]
