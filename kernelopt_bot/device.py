"""The device a run uses: which one, how this process is made ready for it, and its limits.

One place for what used to be known in five: ``resolve_device`` turns the user's ``cpu``/``cuda``/
nothing into the device a run uses; ``prepare_device`` makes this process ready for it (on the CPU,
the Triton interpreter and its shims, :mod:`kernelopt_bot.cpu_interpreter`, before anything imports
triton); ``device_limits`` is what a launch config must respect there. torch and triton are imported
only inside the functions, so the CLI can import this module before it decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelopt_bot.errors import TargetError

DEVICES = ("cpu", "cuda")


def resolve_device(device: str | None) -> str:
    """``None``/``auto`` picks CUDA when there is one; asking for CUDA without one is an error."""
    import torch

    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in DEVICES:
        raise TargetError(f"unknown device {device!r} (use cpu or cuda)")
    if device == "cuda" and not torch.cuda.is_available():
        raise TargetError("--device cuda was asked for but no CUDA device is available")
    return device


def prepare_device(device: str) -> None:
    """Make this process ready to run kernels on ``device`` (a resolved one): on the CPU, switch
    to interpreter mode before anything compiles. Idempotent; nothing to do for CUDA."""
    if device == "cpu":
        from kernelopt_bot.cpu_interpreter import enable_interpreter_mode

        enable_interpreter_mode()


@dataclass(frozen=True)
class DeviceLimits:
    """The hardware limits a launch config must respect (defaults: an NVIDIA H100/H200)."""

    max_threads_per_block: int = 1024
    warp_size: int = 32
    max_shared_memory: int = 232448

    @classmethod
    def from_current_device(cls) -> DeviceLimits:
        """Limits of CUDA device 0, or the defaults when there is no CUDA device.

        torch does not expose every field on every version, so each falls back to its default.
        """
        import torch

        if not torch.cuda.is_available():
            return cls()
        props = torch.cuda.get_device_properties(0)
        default = cls()
        return cls(
            max_threads_per_block=int(getattr(props, "max_threads_per_block", default.max_threads_per_block)),
            warp_size=int(getattr(props, "warp_size", default.warp_size) or default.warp_size),
            max_shared_memory=int(
                getattr(props, "shared_memory_per_block_optin", 0)
                or getattr(props, "shared_memory_per_block", 0)
                or default.max_shared_memory
            ),
        )


def device_limits(device: str) -> DeviceLimits:
    """The limits of ``device``: CUDA device 0's on ``cuda``; the defaults on the CPU, where a
    config is checked against the GPU it is meant for, not the interpreter."""
    return DeviceLimits.from_current_device() if device == "cuda" else DeviceLimits()
