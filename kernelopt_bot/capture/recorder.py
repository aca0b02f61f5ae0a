"""Compile a target with ``torch.compile`` and capture its output modules and kernel arguments.

Capture does two model runs. The first compiles (and autotunes) and collects every output
module Inductor loads, whether it was generated now or came from the FX-graph cache. The second
runs with each kernel's module-level name swapped for a recorder that snapshots the kernel's
real argument tensors at its call site, so any one kernel can later be run alone
(:mod:`kernelopt_bot.harness.kernel`).
"""

from __future__ import annotations

import contextlib
import itertools
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from kernelopt_bot.capture.artifact import Artifact, parse_artifact
from kernelopt_bot.device import prepare_device
from kernelopt_bot.errors import CompileError, KerneloptError, one_line
from kernelopt_bot.harness.failures import causes, is_out_of_memory, is_sticky_device_error
from kernelopt_bot.targets import Target, dtype_name
from kernelopt_bot.training import COMPILE_CONFIG

_FRESH = itertools.count()


def versions() -> dict[str, str]:
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__}


def compile_fresh(model: torch.nn.Module, *, mode: str | None = None,
                  options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """``torch.compile`` a call of ``model`` through a code object no other compile shares.

    Dynamo caches compiled frames on code objects. Compiling a wrapper with its own code object
    keeps this compile's cache entries apart from any other compile of the same model in the
    process (a baseline and a packed variant, say).
    """

    def call_model(*args: Any) -> Any:
        return model(*args)

    code = call_model.__code__.replace(co_name=f"kernelopt_model_{next(_FRESH)}")
    fresh = types.FunctionType(code, call_model.__globals__, code.co_name,
                               call_model.__defaults__, call_model.__closure__)
    kwargs: dict[str, Any] = {}
    if mode is not None:
        kwargs["mode"] = mode
    if options:
        kwargs["options"] = options
    return torch.compile(fresh, **kwargs)


# Inductor's FX-graph cache counters, by what this module calls them: loaded from the cache,
# compiled anew, not cacheable, and compiled anew but not stored (a pickling or write error).
CACHE_COUNTERS = {"hit": ("fxgraph_cache_hit",), "miss": ("fxgraph_cache_miss",),
                  "bypass": ("fxgraph_cache_bypass",),
                  "unstored": ("fxgraph_cache_pickle_error", "fxgraph_cache_write_error")}


@contextmanager
def counting_cache_use() -> Iterator[dict[str, int]]:
    """How the graphs compiled while the block runs came out of Inductor's FX-graph cache: loaded
    (``hit``), compiled anew (``miss``; ``unstored`` of them could not be stored), or compiled
    anew because the cache cannot hold them (``bypass``). Filled in when the block ends; from
    Inductor's own counters, so a torch that counts none of them reports zeros."""
    from torch._dynamo.utils import counters

    def now() -> dict[str, int]:
        return {name: sum(int(counters["inductor"].get(c, 0)) for c in keys) for name, keys in CACHE_COUNTERS.items()}

    before = now()
    use = dict.fromkeys(CACHE_COUNTERS, 0)
    try:
        yield use
    finally:
        use.update({name: count - before[name] for name, count in now().items()})


COMPONENT_VALUE_CHARS = 160  # of a key component's value kept (Inductor's own lines run to 1024)


def compact_component(line: str) -> str:
    """One of Inductor's key-component lines (``[hash] name: value``) kept short: the hash's first
    eight characters, the name, and the value cut, or left out for the ~600 Inductor config
    entries (their name and hash say which one differs; the value is in the config)."""
    head, sep, rest = str(line).partition("] ")
    if not sep:
        return str(line)[:COMPONENT_VALUE_CHARS]
    name, _, value = rest.partition(": ")
    if name.startswith("inductor_config"):
        return f"{head[:9]}] {name}"
    return f"{head[:9]}] {name}: {value[:COMPONENT_VALUE_CHARS]}"


@contextmanager
def recording_cache_keys() -> Iterator[list[dict[str, Any]]]:
    """Each FX-graph cache lookup while the block runs: its key, ``hit`` or ``miss``, and for a
    miss (a key this process was the first to compile under) the key's components, compacted
    (Inductor's own debug lines, ``[hash] name: value``: what went into the key).

    Why: on the H200 (12-05e), arms of one model in identical processes, started after a process
    had compiled it into the cache, sometimes loaded that compile and sometimes missed it and
    compiled cold; two misses of one model under different keys, compared component by component
    (``scripts/cache_keys.py``), say which input to the key differs. Wraps
    ``FxGraphCache.load_with_key`` for the block; a torch without it records nothing."""
    import inspect

    from torch._inductor import codecache

    lookups: list[dict[str, Any]] = []
    cache = getattr(codecache, "FxGraphCache", None)
    stored = inspect.getattr_static(cache, "load_with_key", None) if cache is not None else None
    if not isinstance(stored, staticmethod):  # another torch: record nothing rather than guess its shape
        yield lookups
        return
    original, own = stored.__func__, "load_with_key" in vars(cache)

    def load_with_key(key: str, debug_lines: list[str], *args: Any, **kwargs: Any) -> Any:
        answer = original(key, debug_lines, *args, **kwargs)
        if isinstance(answer, tuple) and len(answer) == 2:  # (graph or None, cache info)
            graph, info = answer
            lookup: dict[str, Any] = {"key": key,
                                      "state": info.get("cache_state") if isinstance(info, dict) else None}
            if graph is None:
                lookup["components"] = [compact_component(line) for line in debug_lines or []]
            lookups.append(lookup)
        return answer

    cache.load_with_key = staticmethod(load_with_key)
    try:
        yield lookups
    finally:
        if own:
            cache.load_with_key = stored
        else:  # it was inherited: the class goes back to inheriting it
            del cache.load_with_key


@dataclass
class LoadedGraph:
    """An output module as loaded in this process."""

    module: types.ModuleType
    path: str
    code: str


@contextmanager
def collect_output_modules() -> Iterator[list[LoadedGraph]]:
    """Collect output modules loaded while the block runs (fresh compiles and cache hits)."""
    from torch._inductor.codecache import PyCodeCache

    loaded: list[LoadedGraph] = []
    seen: set[str] = set()
    original = PyCodeCache.load_by_key_path.__func__  # type: ignore[attr-defined]

    def load_by_key_path(cls: Any, key: str, path: str, *args: Any, **kwargs: Any) -> Any:
        mod = original(cls, key, path, *args, **kwargs)
        if path not in seen and hasattr(mod, "call"):
            with open(path) as fh:
                code = fh.read()
            if "AsyncCompile" in code:
                seen.add(path)
                loaded.append(LoadedGraph(mod, path, code))
        return mod

    PyCodeCache.load_by_key_path = classmethod(load_by_key_path)  # type: ignore[method-assign]
    try:
        yield loaded
    finally:
        PyCodeCache.load_by_key_path = classmethod(original)  # type: ignore[method-assign]


@dataclass
class KernelRecording:
    """A kernel's first launch in a model run: argument snapshots taken just before it ran."""

    graph: int
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    calls: int = 1
    # The launch config the compiler chose for it (its autotuner's pick): the one name for it
    # everywhere (SearchContext.chosen_config, a timing job's payload).
    chosen_config: dict[str, Any] | None = None
    kernel: Any = field(default=None, repr=False)

    def on(self, device: str) -> KernelRecording:
        """This recording with its arguments on ``device``: the capture keeps every kernel's in host
        memory (a large model's would not fit on the GPU together), so a harness on the GPU needs them moved."""
        return replace(self, args=relocated(self.args, device))


def snapshot(value: Any, device: str | torch.device | None = None, *, contents: bool = True) -> Any:
    """A copy of a kernel argument that keeps its storage layout (offset and strides: a kernel
    may reach its whole storage, not only the view), on ``device`` (default: where it is).
    ``contents=False``: the layout only, its values left unset, for a caller that fills the whole
    storage itself (gate 2's trials: a copy from host memory of what is then overwritten would
    cost a large model seconds a trial)."""
    if not isinstance(value, torch.Tensor):
        return value
    where = value.device if device is None else torch.device(device)
    storage = value.untyped_storage()
    copy = torch.empty(storage.nbytes(), dtype=torch.uint8, device=where)
    if contents:
        copy.copy_(torch.empty(0, dtype=torch.uint8, device=value.device).set_(storage))
    out = torch.empty(0, dtype=value.dtype, device=where)
    out.set_(copy.untyped_storage(), value.storage_offset(), value.size(), value.stride())
    return out


def relocated(values: tuple[Any, ...], device: str) -> tuple[Any, ...]:
    """``values`` with every tensor not already on ``device`` moved there, layout kept."""
    where = torch.device(device)
    return tuple(snapshot(a, where) if isinstance(a, torch.Tensor) and a.device.type != where.type else a
                 for a in values)


def launch_config(kernel: Any) -> dict[str, Any] | None:
    """The launch config an autotuned ``CachingAutotuner`` settled on, as plain data."""
    launchers = getattr(kernel, "launchers", None) or []
    config = getattr(launchers[0], "config", None) if len(launchers) == 1 else None
    if config is None:
        configs = getattr(kernel, "configs", None) or []
        config = configs[0] if len(configs) == 1 else None
    if config is None:
        return None
    return {
        "kwargs": {k: int(v) for k, v in config.kwargs.items() if isinstance(v, int)},
        "num_warps": int(config.num_warps),
        "num_stages": int(config.num_stages),
    }


class _Recorder:
    """Stands in for a kernel's module-level name during the recording run."""

    def __init__(self, kernel: Any, graph: int, name: str, sink: dict[tuple[int, str], KernelRecording]):
        self._kernel, self._graph, self._name, self._sink = kernel, graph, name, sink

    def run(self, *args: Any, **kwargs: Any) -> Any:
        key = (self._graph, self._name)
        if key in self._sink:
            self._sink[key].calls += 1
        else:
            kept = {k: v for k, v in kwargs.items() if k != "stream"}
            # Recordings go to host memory: every kernel of a model (of a training step, forward
            # and backward) is recorded, only the one being searched needs its arguments on the
            # GPU (KernelService.bench), and on the H200 the GPU copies of them all were
            # most of the engine's peak.
            self._sink[key] = KernelRecording(self._graph, self._name,
                                              tuple(snapshot(a, "cpu") for a in args), kept,
                                              kernel=self._kernel)
        out = self._kernel.run(*args, **kwargs)
        rec = self._sink[key]
        if rec.chosen_config is None:
            rec.chosen_config = launch_config(self._kernel)
        return out

    def __getattr__(self, item: str) -> Any:
        return getattr(self._kernel, item)


@dataclass
class Capture:
    """What capture produced: the artifact, the compiled callable and the kernel recordings."""

    target: Target
    artifact: Artifact
    compiled: Callable[..., Any]
    graphs: list[LoadedGraph]
    recordings: dict[tuple[int, str], KernelRecording]
    inputs: tuple[Any, ...]

    def recording(self, graph: int, name: str) -> KernelRecording:
        try:
            return self.recordings[(graph, name)]
        except KeyError:
            raise KeyError(f"kernel g{graph}:{name} did not launch during the recorded run") from None


def capture(target: Target, *, record: bool = True, mode: str | None = None,
            options: dict[str, Any] | None = None) -> Capture:
    """Compile ``target``, build its Artifact, and (``record``) snapshot each kernel's arguments."""
    prepare_device(target.device)
    compiled = compile_fresh(target.model, mode=mode, options=options)
    inputs = target.make_inputs(0)
    # A training step compiles its backward here too, both with the training config (nothing of it
    # leaks into this process's other compiles).
    training_config = torch._inductor.config.patch(COMPILE_CONFIG) if target.train else contextlib.nullcontext()
    try:
        with training_config, collect_output_modules() as graphs:
            target.run(compiled, inputs)
    except KerneloptError:
        raise
    except Exception as exc:
        if is_out_of_memory(exc) or is_sticky_device_error(exc) or _raised_by_us(exc):
            raise  # the device's state, handled as such by the run; or a fault of ours, reported as one
        raise CompileError(compile_failure(target, exc)) from exc
    artifact = parse_artifact(
        [g.code for g in graphs],
        target=target.spec,
        device=target.device,
        dtype=dtype_name(target.dtype),
        versions=versions(),
        paths=[g.path for g in graphs],
    )
    recordings: dict[tuple[int, str], KernelRecording] = {}
    if record:
        recordings = record_kernel_arguments(lambda: target.run(compiled, inputs), graphs, artifact)
    return Capture(target, artifact, compiled, graphs, recordings, inputs)


COMPILE_ERROR_CHARS = 300  # of the compiler's own message (Dynamo's run to pages)


def compile_failure(target: Target, exc: BaseException) -> str:
    """What to tell a user whose model runs eagerly but not compiled: the compiler's error in one
    line, and on the CPU, where the model launches Triton kernels of its own, that only a GPU can
    compile it (Dynamo traces into the Triton interpreter's Python and fails there)."""
    frames = [f.filename for e in causes(exc) for f in traceback.extract_tb(e.__traceback__)]
    hint = ""
    if target.device == "cpu" and any("/triton/" in name for name in frames):
        hint = (" (it launches Triton kernels of its own: torch.compile captures those only on a GPU, not in "
                "the CPU interpreter)")
    error = one_line(exc)
    error = error if len(error) <= COMPILE_ERROR_CHARS else error[: COMPILE_ERROR_CHARS - 3] + "..."
    return f"torch.compile could not compile and run {target.spec}, which runs eagerly{hint}: {error}"


def _raised_by_us(exc: BaseException) -> bool:
    """Whether the innermost frame of the error's root cause is this project's (a hook of the
    capture, a CPU shim): then it is our fault, not the compiler's."""
    frames = traceback.extract_tb(list(causes(exc))[-1].__traceback__)
    return bool(frames) and "/kernelopt_bot/" in frames[-1].filename


def record_kernel_arguments(call: Callable[[], Any], graphs: list[LoadedGraph], artifact: Artifact
                            ) -> dict[tuple[int, str], KernelRecording]:
    """Each kernel's arguments as ``call`` (one model call, as the target is used) launches it."""
    sink: dict[tuple[int, str], KernelRecording] = {}
    swapped: list[tuple[types.ModuleType, str, Any]] = []
    try:
        for graph, loaded in zip(artifact.graphs, graphs):
            for kernel in graph.kernels:
                original = getattr(loaded.module, kernel.name, None)
                if original is None:
                    continue
                swapped.append((loaded.module, kernel.name, original))
                setattr(loaded.module, kernel.name, _Recorder(original, graph.index, kernel.name, sink))
        call()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    finally:
        for module, name, original in swapped:
            setattr(module, name, original)
    return sink
