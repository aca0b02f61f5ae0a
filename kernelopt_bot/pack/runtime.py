"""Apply a KernelPack inside ``torch.compile``: the production runtime.

Inductor hands every generated Triton kernel to ``AsyncCompile.triton(kernel_name, source, ...)``,
on a fresh compile and when an output module is loaded from the FX-graph cache alike. We wrap
that one method: if the normalized key of the source is in the installed pack and the entry's
guard matches this machine, the source is swapped (new kernel body, a pinned launch config, or
both) before Inductor sees it. Anything the pack does not know passes through untouched, so a
stale pack can never break a model: it simply stops applying.

Needs torch and triton only. Usage::

    from kernelopt_bot.pack.runtime import install
    install("kernelopt/pack.json")
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelopt_bot.pack.format import Guard, KernelPack, LaunchConfig, PackEntry, integer_arguments
from kernelopt_bot.pack.keys import KernelSourceError, kernel_function_name, kernel_key

log = logging.getLogger("kernelopt.runtime")

PIN_MARKER = "# kernelopt: pinned launch config"
REPLACED_MARKER = "# kernelopt: replaced kernel"


@dataclass(frozen=True)
class AppliedReplacement:
    """One kernel the hook swapped, for tests, logs and reports."""

    kernel_name: str
    key: str
    replaced_source: bool
    pinned_config: LaunchConfig | None


@dataclass(frozen=True)
class SkippedReplacement:
    """A kernel the pack knows but whose guard does not match this machine."""

    kernel_name: str
    key: str
    reason: str


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pack: KernelPack | None = None
        self.original: Callable[..., Any] | None = None
        self.applied: list[AppliedReplacement] = []
        self.skipped: list[SkippedReplacement] = []


_STATE = _State()


def running_environment(device_str: str = "cuda") -> Guard:
    """The guard values of this process for a device type."""
    import torch
    import triton

    gpu: str | None
    cc: str | None
    if device_str.startswith("cuda") and torch.cuda.is_available():
        gpu, cc = _cuda_identity(torch.cuda.current_device())
    else:
        gpu, cc = device_str.split(":", 1)[0], None
    return Guard(torch=torch.__version__, triton=triton.__version__, gpu=gpu, compute_capability=cc)


@functools.lru_cache(maxsize=16)
def _cuda_identity(index: int) -> tuple[str, str]:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return torch.cuda.get_device_name(index), f"{major}.{minor}"


def pin_config_source(source: str, kernel_name: str, config: LaunchConfig) -> str:
    """Append to a kernel module the lines that pin its autotuner to one launch config.

    The module-level name is the ``CachingAutotuner`` built by the heuristics decorator; its
    configs are only compiled on first use (in a compile worker or in-process), so replacing the
    list right after the module body runs pins every path. Coordinate-descent tuning and
    Inductor's R0_BLOCK halving (``dynamic_scale_rblock``: extra configs, autotuned at first
    launch) are turned off for this kernel, so the verified config is the one that runs (halving a
    persistent body's fixed R0_BLOCK would skip part of each row).
    """
    cfg = config.to_json()
    return (
        f"{source.rstrip()}\n\n{PIN_MARKER}\n"
        f"{kernel_name}.configs = [triton.Config({cfg['kwargs']!r}, "
        f"num_warps={cfg['num_warps']}, num_stages={cfg['num_stages']})]\n"
        f"{kernel_name}.inductor_meta = dict({kernel_name}.inductor_meta or {{}}, "
        f"coordinate_descent_tuning=False, dynamic_scale_rblock=False)\n"
    )


def rename_kernel(source: str, new_name: str) -> str:
    """Give a replacement module's jit function the name Inductor will look up."""
    old = kernel_function_name(source)
    if old == new_name:
        return source
    return re.sub(rf"\b{re.escape(old)}\b", new_name, source)


def replacement_source(original: str, kernel_name: str, entry: PackEntry) -> str:
    """The source Inductor gets instead of ``original`` for this entry."""
    source = original if entry.source is None else rename_kernel(entry.source, kernel_name)
    if entry.source is not None:
        source = f"{REPLACED_MARKER} {entry.key[:16]}\n{source}"
    if entry.config is not None:
        source = pin_config_source(source, kernel_name, entry.config)
    return source


def _applicable_entry(kernel_name: str, source: str, device_str: str) -> PackEntry | None:
    """The installed pack's entry for this kernel if its guard matches this machine."""
    pack = _STATE.pack
    if pack is None or not pack.entries:
        return None
    try:
        key = kernel_key(source)
    except KernelSourceError:
        return None
    entry = pack.entries.get(key)
    if entry is None:
        return None
    env = running_environment(device_str)
    reason = entry.guard.mismatch(env)
    if reason is not None:
        log.info("kernelopt: not applying %s (%s)", kernel_name, reason)
        _STATE.skipped.append(SkippedReplacement(kernel_name, key, reason))
        return None
    return entry


def _replace(kernel_name: str, source: str, entry: PackEntry) -> str:
    new = replacement_source(source, kernel_name, entry)
    _STATE.applied.append(AppliedReplacement(kernel_name, entry.key, entry.source is not None, entry.config))
    log.info("kernelopt: applied replacement for %s", kernel_name)
    return new


def rewrite(kernel_name: str, source: str, device_str: str = "cuda") -> str:
    """Apply the installed pack to one kernel; unknown or guarded-out kernels pass unchanged."""
    entry = _applicable_entry(kernel_name, source, device_str)
    return source if entry is None else _replace(kernel_name, source, entry)


_DEF = re.compile(r"^def \w+\((?P<params>[^)]*)\):", re.M)


def sizes_baked_in(source: str) -> bool:
    """Does the kernel fix every integer parameter itself (Inductor's static-shape kernels start
    with ``xnumel = 512``)? Then it runs at one shape only and a shape guard has nothing to add."""
    match = _DEF.search(source)
    if match is None:
        return False
    names = [p.split(":")[0].strip() for p in match["params"].split(",") if p.strip()]
    sizes = [n for n in names if "ptr" not in n and not re.search(rf"\b{re.escape(n)}\s*:\s*tl\.constexpr", match["params"])]
    return all(re.search(rf"^\s+{re.escape(n)} = \d+\s*$", source, re.M) for n in sizes)


class ShapeGuardedKernel:
    """The replacement where it was verified, the compiler's kernel everywhere else.

    A dynamic-shape kernel has one key for every size; its replacement was verified only at the
    integer launch arguments recorded in the pack entry (``shapes``), so each launch checks its
    own and runs the compiler's kernel for any other. Everything but ``run`` is the replacement's.
    """

    def __init__(self, replacement: Any, original: Any, shapes: tuple[tuple[int, ...], ...], name: str) -> None:
        self.replacement = replacement
        self.original = original
        self.shapes = frozenset(shapes)
        self.name = name

    def run(self, *args: Any, **kwargs: Any) -> Any:
        chosen = self.replacement if integer_arguments(args) in self.shapes else self.original
        return chosen.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.replacement, name)


def _resolved(kernel: Any) -> Any:
    """A compiled kernel, waiting for it if Inductor handed back a future."""
    if not hasattr(kernel, "run") and callable(getattr(kernel, "result", None)):
        return kernel.result()
    return kernel


def _hooked_triton(self: Any, kernel_name: str, source_code: str, *args: Any, **kwargs: Any) -> Any:
    device_str = kwargs.get("device_str", args[0] if args else "cuda")
    original = _STATE.original
    assert original is not None
    entry = _applicable_entry(kernel_name, source_code, str(device_str))
    if entry is None:
        return original(self, kernel_name, source_code, *args, **kwargs)
    replacement = original(self, kernel_name, _replace(kernel_name, source_code, entry), *args, **kwargs)
    if not entry.shapes or sizes_baked_in(source_code):
        return replacement
    fallback = original(self, kernel_name, source_code, *args, **kwargs)
    return ShapeGuardedKernel(_resolved(replacement), _resolved(fallback), entry.shapes, kernel_name)


def clear_loaded_modules(*, dynamo: bool) -> None:
    """Forget loaded output modules so the next compile or cache hit re-runs ``async_compile``.

    Functions already compiled keep the modules they hold. ``dynamo`` also drops Dynamo's frame
    caches, which makes already-compiled functions recompile on their next call.
    """
    import torch
    from torch._inductor.codecache import PyCodeCache

    if hasattr(PyCodeCache, "cache_clear"):
        PyCodeCache.cache_clear()
    if dynamo:
        torch._dynamo.reset()


def install(pack: KernelPack | str | Path, *, reset: bool = True) -> KernelPack:
    """Make ``torch.compile`` use the pack's replacements from now on.

    Inductor's in-memory module cache is always cleared, so graphs loaded from the FX-graph cache
    go through the hook. ``reset`` also resets Dynamo, so a model already compiled in this process
    recompiles (and picks the pack up) on its next call; pass ``reset=False`` to keep functions
    compiled before exactly as they are.
    """
    from torch._inductor.async_compile import AsyncCompile

    loaded = pack if isinstance(pack, KernelPack) else KernelPack.load(pack)
    with _STATE.lock:
        if _STATE.original is None:
            _STATE.original = AsyncCompile.triton
            AsyncCompile.triton = _hooked_triton  # type: ignore[method-assign]
        _STATE.pack = loaded
    clear_loaded_modules(dynamo=reset)
    return loaded


def uninstall(*, reset: bool = True) -> None:
    """Restore the compiler's own ``AsyncCompile.triton`` (``reset`` as in :func:`install`)."""
    from torch._inductor.async_compile import AsyncCompile

    with _STATE.lock:
        if _STATE.original is not None:
            AsyncCompile.triton = _STATE.original  # type: ignore[method-assign]
        _STATE.original = None
        _STATE.pack = None
    clear_loaded_modules(dynamo=reset)


def is_installed() -> bool:
    return _STATE.original is not None


def applied() -> list[AppliedReplacement]:
    """Replacements made since the last :func:`clear_log`."""
    return list(_STATE.applied)


def skipped() -> list[SkippedReplacement]:
    """Known kernels left alone because their guard did not match."""
    return list(_STATE.skipped)


def clear_log() -> None:
    _STATE.applied.clear()
    _STATE.skipped.clear()


@contextmanager
def installed(pack: KernelPack | str | Path, *, reset: bool = True) -> Iterator[KernelPack]:
    """``with installed(pack): model = torch.compile(model); model(x)``."""
    loaded = install(pack, reset=reset)
    try:
        yield loaded
    finally:
        uninstall(reset=reset)
