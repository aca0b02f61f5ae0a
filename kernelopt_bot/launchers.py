"""Standalone Triton kernels as targets: a launcher file, and the kernels it launches (issue 14).

Teams keep hand-written ``@triton.jit`` kernels (often behind ``@triton.autotune``) wrapped in a
Python function that allocates outputs, computes the grid and launches them. Such a *launcher
file* defines ``launch(*inputs)`` (that function), ``get_inputs()`` (as a module target does) and
optionally ``reference(*inputs)`` in PyTorch. :func:`capture_launches` runs the launcher once and
records every kernel launch: the kernel (name, source, file and line), its arguments as they were
before it ran, the grid, the constexprs and launch options, and for an autotuned kernel its
configs and the one it ran with; for a plain ``@triton.jit`` kernel the launch options it ran with
(Triton's defaults where the call gives none) and where in the source the launch is. That record
is what a search over the kernel's configs and its gates start from; ``kernelopt inspect`` shows it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from kernelopt_bot.device import prepare_device, resolve_device
from kernelopt_bot.errors import TargetError, one_line
from kernelopt_bot.source_patch import DEFAULT_OPTIONS, LAUNCH_OPTIONS
from kernelopt_bot.target_kinds import LAUNCHER
from kernelopt_bot.targets import _import_file, file_inputs, file_reference, resolve_dtype


class KernelTarget(Protocol):
    """What the search, the gates and the arms need of a kernel target (a launcher file, a Helion
    kernel): inputs per seed, the optional PyTorch reference, and a run with named kernels
    forced to given configs."""

    spec: str
    device: str
    dtype: torch.dtype
    reference: Callable[..., Any] | None

    def make_inputs(self, seed: int = 0) -> tuple[Any, ...]: ...

    def run(self, seed: int = 0, forced: dict[str, dict[str, Any]] | None = None,
            inputs: tuple[Any, ...] | None = None, sync: bool = True) -> Any:
        """``sync=False``: return with the GPU work queued (a timed call is synchronized by the timer)."""


@dataclass
class LauncherTarget:
    """A launcher, how to make its inputs, its optional PyTorch reference, where it runs."""

    spec: str
    name: str
    launch: Callable[..., Any]
    device: str
    dtype: torch.dtype
    input_factory: Callable[[int], tuple[Any, ...]] = field(repr=False)
    reference: Callable[..., Any] | None = None

    def make_inputs(self, seed: int = 0) -> tuple[Any, ...]:
        return self.input_factory(seed)

    def run(self, seed: int = 0, forced: dict[str, dict[str, Any]] | None = None,
            inputs: tuple[Any, ...] | None = None, sync: bool = True) -> Any:
        return run_launcher(self, seed, forced, inputs=inputs, sync=sync)


def load_launcher(spec: str, device: str | None = None, dtype: str | torch.dtype = "fp32") -> LauncherTarget:
    """Load a launcher file; every failure is a one-line :class:`TargetError`."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype)
    prepare_device(dev)  # before the file imports triton: the interpreter must be on for the CPU
    path = Path(spec)
    module = _import_file(path)
    launch = getattr(module, LAUNCHER, None)
    if not callable(launch):
        raise TargetError(f"{path}: no launch(*inputs) function (a launcher file defines launch() and get_inputs())")
    if not callable(getattr(module, "get_inputs", None)):
        raise TargetError(f"{path}: no get_inputs() function (a launcher file defines launch() and get_inputs())")
    return LauncherTarget(str(path), path.stem, launch, dev, dt, file_inputs(module, path, dev, dt),
                          file_reference(module, path))


@dataclass
class KernelLaunch:
    """One launch of a ``@triton.jit`` kernel by the launcher, as it was about to run."""

    name: str
    file: str | None
    line: int | None
    source: str
    arg_names: list[str]
    args: tuple[Any, ...] = field(repr=False)  # copies taken before the launch (layout kept)
    grid: tuple[int, ...] = ()
    constexprs: dict[str, Any] = field(default_factory=dict)  # keyword arguments, launch options apart
    options: dict[str, Any] = field(default_factory=dict)  # num_warps, num_stages, ... where given
    autotune_configs: list[dict[str, Any]] | None = None  # the @triton.autotune list, if any
    chosen: dict[str, Any] | None = None  # the config it ran with (a plain kernel: its launch options)
    call_file: str | None = None  # where the launch is written (the ``kernel[grid](...)`` call)
    call_line: int | None = None
    grid_function: bool = False  # the launch's grid was a function of the constexprs, not a tuple

    @property
    def autotuned(self) -> bool:
        return self.autotune_configs is not None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "file": self.file, "line": self.line, "grid": list(self.grid),
                "arg_names": self.arg_names, "constexprs": self.constexprs, "options": self.options,
                "args": [_describe(a) for a in self.args], "autotune_configs": self.autotune_configs,
                "chosen": self.chosen, "call_file": self.call_file, "call_line": self.call_line}


def capture_launches(target: LauncherTarget, seed: int = 0,
                     forced: dict[str, dict[str, Any]] | None = None) -> list[KernelLaunch]:
    """Run the launcher once on inputs of ``seed`` and return every kernel launch it made, in
    order; a launcher that fails, or launches no Triton kernel, is a :class:`TargetError`.
    ``forced``: kernel name -> the one config its autotuner runs (see :func:`run_launcher`)."""
    launches: list[KernelLaunch] = []
    run_launcher(target, seed, forced, sink=launches)
    if not launches:
        raise TargetError(f"{target.spec}: launch(*get_inputs()) launched no @triton.jit kernel")
    return launches


def run_launcher(target: LauncherTarget, seed: int = 0, forced: dict[str, dict[str, Any]] | None = None,
                 sink: list[KernelLaunch] | None = None, inputs: tuple[Any, ...] | None = None,
                 sync: bool = True) -> Any:
    """The launcher's result on inputs of ``seed`` (or ``inputs``), each autotuned kernel named
    in ``forced`` running exactly that config (its ``@triton.autotune`` list replaced for the
    call; a plain ``@triton.jit`` kernel named there launched with those options: what a candidate
    config is, and what the original's chosen config is to compare it
    with). Launches are recorded into ``sink`` when given."""
    inputs = target.make_inputs(seed) if inputs is None else inputs
    with _recording(sink if sink is not None else [], forced or {}, record=sink is not None):
        try:
            out = target.launch(*inputs)
        except TargetError:
            raise
        except Exception as exc:
            raise TargetError(f"{target.spec}: launch(*get_inputs()) failed: {one_line(exc)}") from exc
    if sync and torch.cuda.is_available() and target.device == "cuda":
        torch.cuda.synchronize()
    return out


def _forced_config(values: dict[str, Any], configs: list[Any]) -> Any:
    """The ``triton.Config`` to force: the autotune list's own entry with these values (its
    ``pre_hook`` included: zeroing an output before an atomic accumulation, say), else a new one
    carrying the hook every entry shares."""
    import triton

    for config in configs:
        if _config_dict(config) == values:
            return config
    kwargs = {k: v for k, v in values.items() if k not in LAUNCH_OPTIONS}
    options = {k: v for k, v in values.items() if k in LAUNCH_OPTIONS and v is not None}
    made = triton.Config(kwargs, **options)
    hooks = {id(getattr(c, "pre_hook", None)): getattr(c, "pre_hook", None) for c in configs}
    if len(hooks) == 1:
        made.pre_hook = next(iter(hooks.values()))
    return made


def _with_values(jit: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 values: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A plain kernel's launch with ``values`` in place of its own: a parameter passed by
    position is replaced there, anything else (launch options, keyword constexprs) as a keyword."""
    names = list(getattr(jit, "arg_names", []) or [])
    positional = list(args)
    extra = dict(kwargs)
    for key, value in values.items():
        index = names.index(key) if key in names else -1
        if 0 <= index < len(positional):
            positional[index] = value
        else:
            extra[key] = value
    return tuple(positional), extra


def _config_dict(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as its constexprs and the launch options we search: other options a
    Triton version adds with their defaults (``num_consumer_groups``, ...) are left out, so
    they are not taken for parameters the kernel lacks."""
    if not hasattr(config, "all_kwargs"):
        return dict(vars(config))
    own = getattr(config, "kwargs", {}) or {}
    return {k: v for k, v in config.all_kwargs().items() if k in own or k in LAUNCH_OPTIONS}


@contextlib.contextmanager
def _recording(sink: list[KernelLaunch], forced: dict[str, dict[str, Any]] | None = None, *,
               record: bool = True) -> Iterator[None]:
    """Hook the launch entry of Triton's jit functions (compiled and interpreted alike) and of
    its autotuner, for the block: record each launch (``record``), and run the autotuned kernels
    named in ``forced`` with that one config."""
    forced = forced or {}
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    classes: list[type] = [JITFunction]
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    # The autotuners whose launch is under way, innermost last, each with its whole config list
    # (the one it runs may be cut to a single forced or interpreted config meanwhile).
    tuners: list[tuple[Any, list[Any]]] = []
    benchmarking: list[Any] = []  # an autotuner timing its configs (its launches are trials)
    saved: list[tuple[type, str, Any]] = []

    def hook_run(cls: type) -> None:
        original = cls.__dict__["run"]

        def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            if not warmup and record and not benchmarking:  # the autotuner's trial runs are not launches
                sink.append(_launch_record(self, args, grid, kwargs, *(tuners[-1] if tuners else (None, None))))
            name = getattr(getattr(self, "fn", self), "__name__", None)
            if not warmup and not tuners and name in forced:  # a plain kernel: the candidate's options
                args, kwargs = _with_values(self, args, kwargs, forced[name])
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        saved.append((cls, "run", original))
        cls.run = run  # type: ignore[attr-defined]

    def tuner_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        configs = self.configs
        tuners.append((self, configs))
        name = getattr(getattr(self, "base_fn", None), "__name__", None)
        if name in forced:
            self.configs = [_forced_config(forced[name], configs)]
        elif interpreted and len(configs) > 1:
            # The interpreter cannot benchmark (no GPU): it runs the first config, as it does for
            # Inductor's kernels; the record still lists them all.
            self.configs = configs[:1]
        try:
            return original_tuner(self, *args, **kwargs)
        finally:
            self.configs = configs
            tuners.pop()

    def tuner_bench(self: Any, *args: Any, **kwargs: Any) -> Any:
        benchmarking.append(self)
        try:
            return original_bench(self, *args, **kwargs)
        finally:
            benchmarking.pop()

    original_tuner = Autotuner.__dict__["run"]
    original_bench = Autotuner.__dict__.get("_bench")
    if original_bench is not None:
        saved.append((Autotuner, "_bench", original_bench))
        Autotuner._bench = tuner_bench  # type: ignore[attr-defined]
    for cls in classes:
        if "run" in cls.__dict__:
            hook_run(cls)
    saved.append((Autotuner, "run", original_tuner))
    Autotuner.run = tuner_run  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)


def _launch_record(jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any], tuner: Any,
                   tuner_configs: list[Any] | None) -> KernelLaunch:
    from kernelopt_bot.capture.recorder import snapshot

    fn = getattr(jit, "fn", jit)
    arg_names = list(getattr(jit, "arg_names", []) or inspect.signature(fn).parameters)
    meta = {**dict(zip(arg_names, args)), **kwargs}
    shape = grid(meta) if callable(grid) else grid
    shape = tuple(int(g) for g in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    try:
        source = inspect.getsource(fn)
        file = inspect.getsourcefile(fn)
        line = fn.__code__.co_firstlineno
    except (OSError, TypeError):
        source, file, line = "", None, None
    options = {k: v for k, v in kwargs.items() if k in LAUNCH_OPTIONS}
    constexprs = {k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
    configs = chosen = None
    if tuner is not None:
        configs = [_config_dict(c) for c in (tuner_configs if tuner_configs is not None else tuner.configs)]
        best = getattr(tuner, "best_config", None)
        chosen = _config_dict(best) if best is not None else None
    else:
        chosen = {**DEFAULT_OPTIONS, **{k: v for k, v in options.items() if k in DEFAULT_OPTIONS and v is not None}}
    call_file, call_line = _call_site()
    return KernelLaunch(getattr(fn, "__name__", str(fn)), file, line, source, arg_names,
                        tuple(snapshot(a) for a in args), shape, constexprs, options, configs, chosen,
                        call_file, call_line, callable(grid))


def _call_site() -> tuple[str | None, int | None]:
    """The file and line of the innermost frame outside Triton and this module: where the
    launcher (or the library it calls) wrote ``kernel[grid](...)``."""
    import triton

    skip = (os.path.dirname(triton.__file__) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep)
    frame = sys._getframe(1)
    while frame is not None:
        where = os.path.abspath(frame.f_code.co_filename)
        if not where.startswith(skip):
            return where, frame.f_lineno
        frame = frame.f_back
    return None, None


def _describe(value: Any) -> Any:
    """An argument as JSON can show it: a tensor by its shape, dtype and strides."""
    if isinstance(value, torch.Tensor):
        return {"tensor": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                "stride": list(value.stride())}
    return value if isinstance(value, (int, float, bool, str)) or value is None else repr(value)
