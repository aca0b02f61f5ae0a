"""Helion kernels as targets (issue 14, second part): a file whose kernel is a ``@helion.kernel``
function, with ``get_inputs()`` and optionally ``reference(*inputs)`` in PyTorch.

Helion compiles one kernel source into Triton for a *config* (block sizes, warps, stages, loop
orders, indexing, ...). Its users autotune once (minutes to hours) and pin the result in the
decorator (``@helion.kernel(config=helion.Config(...))``); the pin goes stale when shapes or GPUs
change. A Helion target's original is that pin, or Helion's default config where none is pinned;
candidates are what Helion's own autotuner finds within the budget (on a GPU) and the pin's
neighbours; a run with a candidate compiles that config (``BoundKernel.compile_config``) and calls
it. Gates 2-4 are the launchers' (:mod:`kernelopt_bot.launcher_run`); gate 1 is Helion's own
check of a config against the kernel's config space plus generating its Triton code.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelopt_bot.device import prepare_device, resolve_device
from kernelopt_bot.errors import TargetError, one_line
from kernelopt_bot.target_kinds import helion_kernels_in
from kernelopt_bot.targets import _import_file, file_inputs, file_reference, resolve_dtype

# Neighbours of a config: these keys are stepped (sizes doubled and halved, stages by one).
_DOUBLED = ("block_sizes", "num_warps")
_STEPPED = ("num_stages",)
MAX_WARPS = 32


@dataclass
class HelionTarget:
    """One Helion kernel of a file, how to make its inputs, its optional reference, where it runs."""

    spec: str
    name: str
    kernel_name: str
    kernel: Any = field(repr=False)  # helion.runtime.kernel.Kernel
    device: str
    dtype: torch.dtype
    input_factory: Callable[[int], tuple[Any, ...]] = field(repr=False)
    reference: Callable[..., Any] | None = None
    file: str = ""
    pinned: dict[str, Any] | None = None  # the decorator's config=..., as written
    _compiled: dict[str, Any] = field(default_factory=dict, repr=False)
    _bound: Any = field(default=None, repr=False)

    def make_inputs(self, seed: int = 0) -> tuple[Any, ...]:
        return self.input_factory(seed)

    def bound(self, inputs: tuple[Any, ...] | None = None) -> Any:
        """The kernel bound to inputs of this target's shapes (every seed's have the same)."""
        if inputs is not None:
            return self.kernel.bind(inputs)  # Helion keeps one per signature
        if self._bound is None:
            self._bound = self.kernel.bind(self.make_inputs(0))
        return self._bound

    def original_config(self) -> dict[str, Any]:
        """The pinned config (normalized), or Helion's default where none is pinned."""
        bound = self.bound()
        if self.pinned is not None:
            return normalized(bound, self.pinned)
        return dict(bound.config_spec.default_config())

    def default_config(self) -> dict[str, Any]:
        return dict(self.bound().config_spec.default_config())

    def run(self, seed: int = 0, forced: dict[str, dict[str, Any]] | None = None,
            inputs: tuple[Any, ...] | None = None, sync: bool = True) -> Any:
        """The kernel on inputs of ``seed`` (or ``inputs``) with the config ``forced`` names for
        it, else its original config."""
        inputs = self.make_inputs(seed) if inputs is None else inputs
        config = (forced or {}).get(self.kernel_name) or self.original_config()
        compiled = self.compiled(config, inputs)
        try:
            return compiled(*inputs)
        except TargetError:
            raise
        except Exception as exc:
            raise TargetError(f"{self.spec}: {self.kernel_name} failed with {describe(config)}: {one_line(exc)}") from exc

    def compiled(self, config: dict[str, Any], inputs: tuple[Any, ...]) -> Any:
        import helion

        # Helion specializes a compiled kernel to the inputs' signature as well as the config
        signature = [(tuple(x.shape), str(x.dtype), tuple(x.stride())) if isinstance(x, torch.Tensor) else repr(x)
                     for x in inputs]
        key = json.dumps([config, signature], sort_keys=True, default=str)
        if key not in self._compiled:
            self._compiled[key] = self.bound(inputs).compile_config(helion.Config(**config), allow_print=False)
        return self._compiled[key]


def load_helion(spec: str, device: str | None = None, dtype: str | torch.dtype = "fp32") -> HelionTarget:
    """Load a Helion kernel file; every failure is a one-line :class:`TargetError`."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype)
    prepare_device(dev)
    path = Path(spec)
    try:
        tree = ast.parse(path.read_text())
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        raise TargetError(f"{path}: cannot be read as Python: {one_line(exc)}") from exc
    kernels = helion_kernels_in(tree)
    if len(kernels) != 1:
        names = ", ".join(k.name for k in kernels) or "none"
        raise TargetError(f"{path}: a Helion target has exactly one @helion.kernel function (found: {names}); "
                          f"call several from a launch(*inputs) function to make it a launcher target")
    module = _import_file(path)
    kernel = getattr(module, kernels[0].name, None)
    if kernel is None or not hasattr(kernel, "bind"):
        raise TargetError(f"{path}: {kernels[0].name} is not a Helion kernel once imported")
    if not callable(getattr(module, "get_inputs", None)):
        raise TargetError(f"{path}: no get_inputs() function (a Helion target defines its kernel and get_inputs())")
    configs = list(getattr(kernel, "configs", []) or [])
    pinned = dict(configs[0]) if len(configs) == 1 else None
    target = HelionTarget(str(path), path.stem, kernels[0].name, kernel, dev, dt, file_inputs(module, path, dev, dt),
                          file_reference(module, path), str(path.resolve()), pinned)
    try:
        target.original_config()
    except Exception as exc:  # Helion could not take the kernel for these inputs
        raise TargetError(f"{path}: Helion cannot compile {kernels[0].name} for get_inputs(): {one_line(exc)}") from exc
    return target


def normalized(bound: Any, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with Helion's defaults filled in (what a run with it compiles); raises
    Helion's ``InvalidConfig`` for a config outside the kernel's space."""
    import helion

    made = helion.Config(**config)
    bound.config_spec.normalize(made)
    return dict(made)


def neighbour_configs(target: HelionTarget, original: dict[str, Any]) -> list[dict[str, Any]]:
    """The original's neighbours that Helion accepts: one block size, the warps doubled or
    halved, one stage more or less; nearest (one change) first, each once."""
    bound = target.bound()
    out: list[dict[str, Any]] = []

    def add(config: dict[str, Any]) -> None:
        try:
            made = normalized(bound, config)
        except Exception:  # noqa: BLE001 - outside the kernel's space: no candidate
            return
        if made != original and made not in out:
            out.append(made)

    for key in _DOUBLED:
        value = original.get(key)
        if isinstance(value, list):
            for i, size in enumerate(value):
                if isinstance(size, int):
                    for new in (size * 2, size // 2):
                        if new >= 1:
                            add({**original, key: [*value[:i], new, *value[i + 1:]]})
        elif isinstance(value, int):
            for new in (value * 2, value // 2):
                if 1 <= new <= MAX_WARPS:
                    add({**original, key: new})
    for key in _STEPPED:
        value = original.get(key)
        if isinstance(value, int):
            for new in (value + 1, value - 1):
                if new >= 1:
                    add({**original, key: new})
    return out


def autotuned_config(target: HelionTarget, budget_s: float, log: Callable[[str], None]) -> dict[str, Any] | None:
    """What Helion's own autotuner picks within ``budget_s`` seconds (a GPU only), or None."""
    import importlib.util
    import os

    bound = target.bound()
    settings = bound.settings
    saved = {k: getattr(settings, k) for k in ("autotune_effort", "autotune_budget_seconds", "autotune_progress_bar")}
    searcher = os.environ.get("HELION_AUTOTUNER")
    if searcher is None and importlib.util.find_spec("sklearn") is None:
        # Helion's default search (LFBO) needs scikit-learn; its pattern search does not.
        os.environ["HELION_AUTOTUNER"] = "PatternSearch"
    try:
        settings.autotune_effort = "quick"
        settings.autotune_budget_seconds = max(1, int(budget_s))
        settings.autotune_progress_bar = False
        best = bound.autotune(target.make_inputs(0), force=True)
        return normalized(bound, dict(best))
    except Exception as exc:  # noqa: BLE001 - the autotuner failing leaves our own neighbours
        log(f"  Helion's autotuner failed: {one_line(exc)}")
        return None
    finally:
        for key, value in saved.items():
            setattr(settings, key, value)
        if searcher is None:
            os.environ.pop("HELION_AUTOTUNER", None)


def written_config(target: HelionTarget, config: dict[str, Any]) -> dict[str, Any]:
    """The smallest config that Helion fills out to ``config``: its block sizes and whatever
    differs from the default config (what a user would write in the decorator)."""
    default = target.default_config()
    short = {k: v for k, v in config.items() if k == "block_sizes" or default.get(k) != v}
    try:
        if normalized(target.bound(), short) == config:
            return short
    except Exception:  # noqa: BLE001 - write it whole
        pass
    return dict(config)


def describe(config: dict[str, Any]) -> str:
    return "config " + ", ".join(f"{k}={v!r}" for k, v in config.items())


def changes(original: dict[str, Any], config: dict[str, Any]) -> str:
    """A config as what it changes in the original: ``config num_warps=8 (was 4)``."""
    changed = [f"{k}={v!r} (was {original.get(k)!r})" for k, v in config.items() if original.get(k) != v]
    return "config " + (", ".join(changed) or "unchanged")
