"""The GPUs of one machine as a pool: which ones a run may use, how a job addresses one, its share
of the CPU, and what a failing GPU looks like.

A self-hosted runner usually holds several GPUs, and a suite or sweep shard is a list of
independent jobs; :mod:`kernelopt_bot.fleet` runs them. This module only answers the questions
about the machine: ``--gpus`` as indices (:func:`select_gpus`), the environment that gives a job
one GPU as ``cuda:0`` and a fair share of the cores for compilation (:func:`gpu_environment`,
:func:`cpu_slices`), so jobs compiling at the same time neither oversubscribe the machine nor
disturb each other's timing, and whether an error is the device's fault rather than the job's
(:func:`looks_like_gpu_failure`), which is worth a retry on another GPU.
"""

from __future__ import annotations

import os
import re

from kernelopt_bot.errors import BadInputError

COMPILE_THREADS_ENV = "KERNELOPT_COMPILE_THREADS"
INDUCTOR_THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"

# What a failing device (not a failing job) says: sticky CUDA errors, out of memory, a lost device.
_GPU_ERROR = re.compile(
    r"CUDA error|CUDA out of memory|OutOfMemoryError|out of memory|CUBLAS_STATUS|CUDNN_STATUS|cuDNN error|"
    r"illegal memory access|device-side assert|unspecified launch failure|uncorrectable ECC|"
    r"AcceleratorError|CUDA driver|no CUDA-capable device|busy or unavailable|NCCL error")


def looks_like_gpu_failure(error: BaseException | str | None) -> bool:
    """Whether an exception or error text is the device's fault (worth a retry on another GPU)."""
    if error is None:
        return False
    if isinstance(error, BaseException):
        if type(error).__name__ in ("OutOfMemoryError", "AcceleratorError", "CudaError"):
            return True
        error = f"{type(error).__name__}: {error}"
    return bool(_GPU_ERROR.search(error))


# --- choosing GPUs ---------------------------------------------------------------------------------


def select_gpus(spec: str, available: int) -> list[int]:
    """``all`` | ``N`` (the first N) | ``0,1,3`` (these; ``3,`` is GPU 3 alone) as GPU indices.

    Indices count the GPUs this process can see (``CUDA_VISIBLE_DEVICES`` applies first).
    """
    text = spec.strip().lower()
    if available < 1:
        raise BadInputError(f"--gpus {spec}: no CUDA device")
    if text == "all":
        return list(range(available))
    if "," not in text:
        try:
            count = int(text)
        except ValueError:
            raise BadInputError(f"--gpus {spec!r}: expected all, a count N, or indices like 0,1") from None
        if count < 1:
            raise BadInputError(f"--gpus {spec}: a plain number counts GPUs (at least 1); "
                                "for GPU 0 alone write --gpus 0,")
        if count > available:
            raise BadInputError(f"--gpus {spec}: only {available} CUDA device(s) visible")
        return list(range(count))
    parts = [p.strip() for p in text.split(",")]
    if parts[-1] == "":
        parts.pop()  # "3," names GPU 3 alone
    indices: list[int] = []
    for part in parts:
        if not part.isdigit():
            raise BadInputError(f"--gpus {spec!r}: {part!r} is not a GPU index")
        index = int(part)
        if index >= available:
            raise BadInputError(f"--gpus {spec}: no GPU {index} (visible: 0..{available - 1})")
        if index in indices:
            raise BadInputError(f"--gpus {spec}: GPU {index} given twice")
        indices.append(index)
    return indices


def cuda_device_count() -> int:
    """The CUDA devices this process can see (0 without CUDA). Imports torch, so only when asked."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def gpu_environment(gpu: int, threads: int) -> dict[str, str]:
    """What a job on GPU ``gpu`` gets on top of its environment: that GPU alone (as ``cuda:0``,
    every timing it does is on that GPU) and ``threads`` compile threads.

    ``gpu`` indexes the GPUs this process sees, so 0 under ``CUDA_VISIBLE_DEVICES=2,3`` is 2.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        devices = [v.strip() for v in visible.split(",")]
        if gpu >= len(devices):
            raise ValueError(f"GPU {gpu} is not visible (CUDA_VISIBLE_DEVICES={visible})")
        device = devices[gpu]
    else:
        device = str(gpu)
    return {"CUDA_VISIBLE_DEVICES": device, COMPILE_THREADS_ENV: str(threads), INDUCTOR_THREADS_ENV: str(threads)}


# --- sharing the CPU -------------------------------------------------------------------------------


def available_cores() -> int:
    """The cores this process may run on: a CI container's CPU set, not the host's core count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def compile_threads(cores: int, workers: int) -> int:
    """A job's fair share of the cores for compilation: ``cores // workers``, at least one."""
    return max(1, cores // max(1, workers))


def cpu_slices(workers: int, cores: int | None = None) -> list[list[int] | None]:
    """Disjoint CPU sets, one per GPU, of ``compile_threads`` cores each (None: not pinned, where
    there are fewer cores than GPUs or no affinity API)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return [None] * workers
    cpus = cpus[:cores] if cores else cpus
    share = len(cpus) // max(1, workers)
    if share < 1:
        return [None] * workers
    return [cpus[k * share:(k + 1) * share] for k in range(workers)]
