"""Where the compiler's own search ends: the launch configs max-autotune would try for a kernel.

Inductor's kernels carry their heuristics in the decorator
(``@triton_heuristics.persistent_reduction(size_hints=..., inductor_meta={...})``); with
``max_autotune`` set in ``inductor_meta`` the same heuristics produce the wider list that
``mode="max-autotune"`` benchmarks. Starting the tuner from those configs (besides the one the
compiler chose) means its result is never behind what max-autotune finds for that kernel, so a
pack adds to max-autotune instead of rediscovering it.

The decorator is the compiler's code (trusted, like the kernel source the engine already loads);
it is re-evaluated in the kernel's own module with ``max_autotune`` switched on, and its configs
are read off the autotuner it builds. Nothing is compiled or run.
"""

from __future__ import annotations

import ast
from typing import Any

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.pack.format import LaunchConfig

HEURISTICS = ("pointwise", "reduction", "persistent_reduction")
MAX_AUTOTUNE_META = {"max_autotune": True, "max_autotune_pointwise": True}


def max_autotune_configs(kernel: TritonKernel) -> list[LaunchConfig]:
    """The configs Inductor's heuristics give this kernel under max-autotune (duplicates
    dropped, in their order); ``[]`` where the decorator is not one we can re-evaluate."""
    try:
        call = _heuristics_call(kernel)
        if call is None:
            return []
        autotuner = _re_evaluated(kernel, call)
    except Exception:  # noqa: BLE001 - seeds are a head start, never a reason to fail a search
        return []
    seen: dict[tuple, LaunchConfig] = {}
    for config in getattr(autotuner, "configs", None) or []:
        launch = _launch_config(config, kernel)
        if launch is not None:
            seen.setdefault((tuple(sorted(launch.kwargs.items())), launch.num_warps, launch.num_stages), launch)
    return list(seen.values())


def _heuristics_call(kernel: TritonKernel) -> ast.Call | None:
    tree = ast.parse(kernel.source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == kernel.name:
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr in HEURISTICS):
                    return decorator
    return None


def _re_evaluated(kernel: TritonKernel, call: ast.Call) -> Any:
    """The autotuner the decorator builds with ``max_autotune`` on, in the kernel's module."""
    from torch._inductor.codecache import PyCodeCache

    keywords = []
    for keyword in call.keywords:
        if keyword.arg == "inductor_meta":  # {**original, "max_autotune": True, ...}: ours win
            value: ast.expr = ast.Dict(keys=[None, *(ast.Constant(k) for k in MAX_AUTOTUNE_META)],
                                       values=[keyword.value, *(ast.Constant(v) for v in MAX_AUTOTUNE_META.values())])
            keyword = ast.keyword(arg="inductor_meta", value=value)
        keywords.append(keyword)
    expression = ast.fix_missing_locations(ast.Expression(ast.Call(call.func, call.args, keywords)))
    # A module of its own (the trailer): the compiler's loaded module and its autotuner stay untouched.
    module = PyCodeCache.load(f"{kernel.source}\n# kernelopt max-autotune configs\n")
    decorate = eval(compile(expression, f"<max-autotune configs of {kernel.name}>", "eval"), vars(module))
    return decorate(getattr(module, kernel.name).fn)


def _launch_config(config: Any, kernel: TritonKernel) -> LaunchConfig | None:
    kwargs = {k: int(v) for k, v in (getattr(config, "kwargs", None) or {}).items()
              if k in kernel.constexprs and isinstance(v, int) and not isinstance(v, bool)}
    if not kwargs:
        return None
    return LaunchConfig(kwargs, int(config.num_warps), int(config.num_stages))
