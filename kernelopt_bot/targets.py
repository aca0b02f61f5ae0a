"""Targets: what to optimize, loaded from a benchmark-format file or a ``pkg.mod:factory``.

Benchmark-format file (the format public kernel benchmarks use): defines ``Model``,
``get_inputs()`` and ``get_init_inputs()``. The model is built with
``Model(*get_init_inputs())``; on a GPU target the file's tensors are made on the GPU (its
``torch.randn(...)`` draws there), and inputs it puts on the CPU are moved to the target device.

Factory: ``package.module:factory`` returns ``(model, inputs)``. If the factory accepts
``device`` and/or ``dtype`` keyword arguments they are passed; the model and inputs it returns
must already be on the target device.

Targets run for inference (``model.eval()`` under ``torch.no_grad()``) unless loaded with
``train=True``: then each call is one training step (``model.train()``, forward, loss, backward;
:mod:`kernelopt_bot.training`), with the file's or factory module's ``get_loss(model, outputs)``
as the loss where it defines one.

Either kind may say how the model is compiled where it runs, with a module-level
``TORCH_COMPILE = {"mode": "max-autotune-no-cudagraphs", "options": {"coordinate_descent_tuning":
True}}`` (the arguments the user gives ``torch.compile``; both keys optional): the run then
optimizes and measures that compile, unless ``--mode``/``--inductor-config`` (or the config's
``compile_mode``/``inductor_config``) say otherwise. It is kept as written here and checked where
the model compiles (:func:`kernelopt_bot.capture.settings.target_settings`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelopt_bot.device import prepare_device, resolve_device
from kernelopt_bot.errors import TargetError, one_line
from kernelopt_bot.harness.failures import is_out_of_memory
from kernelopt_bot.training import TrainingStep, buffers_of, restore_buffers

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise TargetError(f"unknown dtype {dtype!r} (use one of {', '.join(DTYPES)})")
    return DTYPES[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    return next((k for k, v in DTYPES.items() if v == dtype), str(dtype))


@dataclass
class Target:
    """A model, how to make its inputs, and where and in which precision it runs."""

    spec: str
    name: str
    model: torch.nn.Module
    device: str
    dtype: torch.dtype
    input_factory: Callable[[int], tuple[Any, ...]] = field(repr=False)
    # The module's TORCH_COMPILE as written (checked where the model compiles:
    # compile.settings.target_settings), None where it has none.
    torch_compile: Any = None
    # None: inference. A training target's calls are whole training steps.
    training: TrainingStep | None = None
    # The model's buffers as loaded (reset_state), taken when the target is made, in host memory:
    # a copy on the GPU would hold a large buffer (a static cache, a mask) twice in every process.
    initial_buffers: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    # Gate 3's references per seed (verify.references.ModelReferences), made on first use: every
    # check of the run in this process compares against the same ones, computed once.
    references: Any = field(default=None, init=False, repr=False, compare=False)
    # What the last compared call in this process gave: its output count, then its buffers' names.
    _output_count: int | None = field(default=None, init=False, repr=False)
    _buffer_names: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.initial_buffers:
            self.initial_buffers = buffers_of(self.model, "cpu")

    def reset_state(self, model: torch.nn.Module | None = None) -> None:
        """Put the model's buffers (``model``'s: a float64 copy, say) back as they were loaded. A
        model that updates a buffer on every call (a call counter, running statistics, a cache)
        gives outputs that depend on how often it ran before; every call whose outputs are compared
        (the gates, ``kernelopt bench``'s checks) starts from this state, so two processes or two
        copies of the model that ran different numbers of calls are compared on the same footing,
        not blamed for it (a counter model's candidates were rejected by the model gate, 12-06)."""
        restore_buffers(self.model if model is None else model, self.initial_buffers)

    @property
    def train(self) -> bool:
        return self.training is not None

    def make_inputs(self, seed: int = 0) -> tuple[Any, ...]:
        """Fresh inputs, reproducible per seed."""
        return self.input_factory(seed)

    def run(self, call: Callable[..., Any], inputs: Sequence[Any], model: torch.nn.Module | None = None, *,
            part: str = "step") -> Any:
        """One call of the model as this target is used: ``call`` (the model itself, a compile of
        it, a float64 copy with ``model`` naming the copy) on ``inputs``, for inference or as one
        training step. Every arm calls the model through here. ``part="forward"``: a training
        step's forward half alone (the split of a step's time); an inference call is all forward."""
        if self.training is None:
            with torch.no_grad():
                return call(*inputs)
        return self.training(self.model if model is None else model, call, inputs, backward=part != "forward")

    def eager(self, *inputs: Any) -> Any:
        return self.run(self.model, inputs)

    def compared_outputs(self, call: Callable[..., Any], inputs: Sequence[Any], model: torch.nn.Module | None = None,
                         *, device: str | None = None) -> list[torch.Tensor]:
        """What a compared call gives (the gates, ``kernelopt bench``'s checks), on ``device`` (None:
        where they are, the buffers not copied: the caller copies them before the model runs again,
        as a model arm's answer does straight into its message, with no second copy on the GPU
        beside the outputs): the call of :meth:`run` from the buffers as loaded (:meth:`reset_state`),
        its output tensors, then the buffers it leaves. The buffers count as results: the reset
        would otherwise hide a kernel that updates a buffer wrongly (a counter, running statistics,
        a cache), which only later calls would show. A training step's results hold them already."""
        from kernelopt_bot.training import tensors

        self.reset_state(model)
        results = [t.detach() if device is None else t.detach().to(device) for t in tensors(self.run(call, inputs, model))]
        if self.training is None:
            # copies (unless the caller copies them): the next call changes them
            left = buffers_of(self.model if model is None else model, device, copy=device is not None)
            self._output_count, self._buffer_names = len(results), list(left)
            results += left.values()
        return results

    def output_label(self, index: int) -> str:
        """What the ``index``-th result of a compared call is: ``output 3``, ``buffer calls``, or for
        a training step ``gradient of fc.weight`` / ``loss`` (as of the last call this process ran)."""
        if self.training is not None:
            labels = self.training.labels
            return labels[index] if index < len(labels) else f"output {index}"
        count, names = self._output_count, self._buffer_names
        if count is not None and count <= index < count + len(names):
            return f"buffer {names[index - count]}"
        return f"output {index}"

    @property
    def label(self) -> str:
        return f"{self.name} [{self.device}, {dtype_name(self.dtype)}]"


def load_target(spec: str, device: str | None = None, dtype: str | torch.dtype = "fp32", *,
                check: bool = True, train: bool = False) -> Target:
    """Load a target and (``check``) check it runs eagerly; every failure is a one-line
    :class:`TargetError`. ``train``: each call is a training step (module targets only)."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype)
    # Before user code runs: it may import parts of Inductor that must see interpreter mode.
    prepare_device(dev)
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        target, module = _load_benchmark_file(path, dev, dt)
    elif ":" in spec:
        target, module = _load_factory(spec, dev, dt)
    else:
        raise TargetError(f"target {spec!r} is neither a .py file nor package.module:factory")
    if train:
        target.model.train()
        target.training = TrainingStep(_loss_function(module, spec), buffers_of(target.model))
    if check:
        _check_eager(target)
    return target


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise TargetError(f"{path}: no such file")
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]
    mod_name = f"kernelopt_target_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    folder = str(path.resolve().parent)
    if folder not in sys.path:  # as `python file.py` would: the file imports its neighbours
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(mod_name, None)
        raise TargetError(f"{path}: does not import: syntax error at line {exc.lineno}: {exc.msg}") from exc
    except BaseException as exc:
        sys.modules.pop(mod_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TargetError(f"{path}: does not import: {one_line(exc)}") from exc
    return module


def _loss_function(module: Any, spec: str) -> Any:
    """The target module's ``get_loss(model, outputs)``, if it defines one."""
    loss = getattr(module, "get_loss", None)
    if loss is not None and not callable(loss):
        raise TargetError(f"{spec}: get_loss is not a function")
    return loss


def _load_benchmark_file(path: Path, device: str, dtype: torch.dtype) -> tuple[Target, Any]:
    from kernelopt_bot.target_kinds import target_kind

    kind = target_kind(str(path))
    if kind != "module":
        what = "a launcher of Triton kernels (launch(), no Model)" if kind == "triton" else "a Helion kernel file"
        raise TargetError(f"{path}: {what}: `kernelopt optimize`, `kernelopt inspect` and `kernelopt bench --patch` "
                          f"take it; this command takes PyTorch modules")
    module = _import_file(path)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise TargetError(f"{path}: missing {', '.join(missing)} (a target file defines Model, get_inputs(), get_init_inputs())")
    for fn_name in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn_name)):
            raise TargetError(f"{path}: {fn_name} is not a function")

    def build() -> Any:
        init = _call_user(module.get_init_inputs, f"{path}: get_init_inputs()")
        if not isinstance(init, (list, tuple)):
            init = [init]
        try:
            return module.Model(*init)
        except Exception as exc:
            raise TargetError(f"{path}: Model(*get_init_inputs()) failed: {one_line(exc)}") from exc

    model = _drawn(build, device, 0)
    if not isinstance(model, torch.nn.Module):
        raise TargetError(f"{path}: Model(...) did not build a torch.nn.Module")
    model = _place_model(model, device, dtype, str(path))

    return Target(str(path), path.stem, model, device, dtype, file_inputs(module, path, device, dtype),
                  getattr(module, "TORCH_COMPILE", None)), module


def file_inputs(module: Any, path: Path, device: str, dtype: torch.dtype) -> Callable[[int], tuple[Any, ...]]:
    """A target file's ``get_inputs()`` as an input factory (a module, a launcher, a Helion
    kernel file alike): drawn per seed on the device, moved there and cast to ``dtype``."""

    def make_inputs(seed: int) -> tuple[Any, ...]:
        raw = _drawn(lambda: _call_user(module.get_inputs, f"{path}: get_inputs()"), device, seed)
        if isinstance(raw, dict):  # read as one positional argument, the model failed on the dict itself
            raise TargetError(f"{path}: get_inputs() returned a dict ({', '.join(map(str, list(raw)[:5]))}): "
                              "return a list of the model's positional arguments, in order (keyword "
                              "arguments are not passed)")
        if not isinstance(raw, (list, tuple)):
            raw = [raw]
        return tuple(_move_input(x, i, device, dtype, str(path)) for i, x in enumerate(raw))

    return make_inputs


def file_reference(module: Any, path: Path) -> Callable[..., Any] | None:
    """A kernel target file's optional ``reference(*inputs)`` in PyTorch."""
    reference = getattr(module, "reference", None)
    if reference is not None and not callable(reference):
        raise TargetError(f"{path}: reference is not a function")
    return reference


def _load_factory(spec: str, device: str, dtype: torch.dtype) -> tuple[Target, Any]:
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise TargetError(f"target {spec!r}: expected package.module:factory")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(mod_name)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise TargetError(f"{spec}: module {mod_name} does not import: {one_line(exc)}") from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise TargetError(f"{spec}: {mod_name} has no callable {attr}")

    params = _accepted_kwargs(factory)
    kwargs = {k: v for k, v in (("device", device), ("dtype", dtype)) if k in params}
    torch.manual_seed(0)
    result = _call_user(lambda: factory(**kwargs), f"{spec}()")
    if not (isinstance(result, (list, tuple)) and len(result) == 2):
        raise TargetError(f"{spec}: factory must return (model, inputs)")
    model, example = result
    if not isinstance(model, torch.nn.Module):
        raise TargetError(f"{spec}: factory's model is not a torch.nn.Module")
    example = tuple(example) if isinstance(example, (list, tuple)) else (example,)
    _check_devices(model, example, device, spec)
    model = model.to(dtype=dtype).eval() if "dtype" not in kwargs else model.eval()
    example = tuple(x.to(dtype) if _is_float(x) else x for x in example)

    def make_inputs(seed: int) -> tuple[Any, ...]:
        if seed == 0:
            return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in example)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        return tuple(_redraw(x, gen) for x in example)

    return Target(spec, attr, model, device, dtype, make_inputs, getattr(module, "TORCH_COMPILE", None)), module


def _accepted_kwargs(fn: Callable[..., Any]) -> set[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return set()
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return {"device", "dtype"}
    return set(sig.parameters)


def _redraw(x: Any, gen: torch.Generator) -> Any:
    """Fresh values with the shape, dtype, strides and device of an example input (floats only;
    integer inputs are indices or labels whose valid range only the factory knows, so they stay)."""
    if not _is_float(x):
        return x.clone() if isinstance(x, torch.Tensor) else x
    fresh = torch.empty_like(x)  # keeps strides for dense layouts
    fresh.copy_(torch.randn(x.shape, generator=gen, dtype=torch.float32))
    return fresh


def _is_float(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _drawn(make: Callable[[], Any], device: str, seed: int) -> Any:
    """Run a target file's ``make`` (its inputs, or its model) seeded, on the GPU for CUDA.

    The harness draws fresh inputs for every timed round of every arm and every gate-3 seed; a
    half-GiB input drawn on the CPU costs about a second and a copy each time, on the GPU a
    millisecond. Every process draws on the same device with the same seed, so all arms (and the
    float64 referee) see identical values. A file that cannot run with CUDA as the default device
    (a CPU ``Generator``, ``numpy`` round trips, ``torch.from_numpy`` mixed with ``randn``) runs
    as written, on the CPU, reseeded: its tensors are moved as before.

    Running out of GPU memory is raised, not retried on the CPU: the CPU draws other values
    (compared outputs would differ for a reason of ours, reported as a verdict), and a 30 GB
    model's arm that ran short beside the others spent 21.7 s drawing on the CPU (H100, 12-06).
    """
    if device == "cuda":
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                return make()
        except Exception as exc:
            if is_out_of_memory(exc):  # the target's own call wraps it: its text says so
                raise

    torch.manual_seed(seed)
    return make()


def _place_model(model: torch.nn.Module, device: str, dtype: torch.dtype, where: str) -> torch.nn.Module:
    try:
        return model.to(device=device, dtype=dtype).eval()
    except Exception as exc:
        raise TargetError(f"{where}: cannot move model to {device}/{dtype_name(dtype)}: {one_line(exc)}") from exc


def _move_input(x: Any, index: int, device: str, dtype: torch.dtype, where: str) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    if x.device.type not in ("cpu", device):
        raise TargetError(f"{where}: input {index} is on {x.device} but the target device is {device}")
    x = x.to(device)
    return x.to(dtype) if x.is_floating_point() else x


def _check_devices(model: torch.nn.Module, inputs: Sequence[Any], device: str, where: str) -> None:
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.device.type != device:
            raise TargetError(f"{where}: model tensor {name} is on {tensor.device} but the target device is {device}")
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.device.type != device:
            raise TargetError(f"{where}: input {i} is on {x.device} but the target device is {device}")


def _call_user(fn: Callable[[], Any], what: str) -> Any:
    try:
        return fn()
    except TargetError:
        raise
    except Exception as exc:
        raise TargetError(f"{what} failed: {one_line(exc)}") from exc


def _check_eager(target: Target) -> None:
    """The model runs eagerly; a training step twice, since every later phase takes many steps
    and a model that cannot take a second one (a buffer updated with the first step's gradient
    history, whose graph the backward freed) is the user's to fix, not an internal error of the
    run's (it was reported as one)."""
    inputs = target.make_inputs(0)
    steps = ("a training step", "a second training step") if target.train else ("model",)
    for what in steps:
        try:
            out = target.eager(*inputs)
        except Exception as exc:
            raise TargetError(f"{target.spec}: {what} fails eagerly: {one_line(exc)}") from exc
        if not target.train:
            _check_compared(target, out)


def _check_compared(target: Target, out: Any) -> None:
    """A model whose call gives no tensor and leaves no buffer gives gate 3 nothing to compare:
    any kernel would pass it. Such a model (``forward`` returning None or a number, its work
    written into an input in place) is the user's to change; it was reported as "captured no
    graph" with exit 0."""
    from kernelopt_bot.training import buffers_of, tensors

    if tensors(out) or buffers_of(target.model, copy=False):
        return
    raise TargetError(f"{target.spec}: the model's call returned {type(out).__name__}, with no tensor in it and "
                      "no buffer: kernelopt compares and times what a model returns, so return the tensors "
                      "it computes (a tensor, or a tuple, list or dict of tensors)")

