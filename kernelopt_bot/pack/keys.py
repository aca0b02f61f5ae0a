"""Normalized keys for Inductor Triton kernels.

A pack must keep applying when a user flips a compiler flag that does not change what a kernel
computes. Such flags (``coordinate_descent_tuning``, ``force_disable_caches``, ``max_autotune``,
...) only rewrite the ``inductor_meta={...}`` line of the kernel source, and ``max_autotune`` can
also renumber the kernel (``..._0`` becomes ``..._1``). So the key is a hash of what decides the
kernel's behaviour and nothing else:

* the ``@triton.jit`` function, re-printed by :func:`ast.unparse` (comments and formatting gone)
  with its name replaced by a placeholder;
* the heuristic decorator's name (pointwise / reduction / ...) and its ``size_hints``;
* from ``triton_meta``: the signature, the constants and the divisibility specialisation;
* from ``inductor_meta``: only the entries that change the launch contract or semantics.

This module is imported by the production runtime, so it uses the standard library only.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass
from typing import Any

KEY_VERSION = 1

# inductor_meta entries that are part of the kernel's contract. Everything else there is a
# compiler flag, a statistic or a cache hash, and must not move the key.
SEMANTIC_INDUCTOR_META = (
    "grid_type",
    "mutated_arg_names",
    "no_x_dim",
    "atomic_add_found",
    "reduction_hint",
    "tile_hint",
    "persistent_reduction",
    "RSPLIT_SIZE",
)

_PLACEHOLDER = "__kernelopt_kernel__"


class KernelSourceError(ValueError):
    """The text is not an Inductor Triton kernel module we can read."""


@dataclass(frozen=True)
class KernelDecorator:
    """What the heuristics decorator of an Inductor kernel says, as plain data."""

    heuristic: str
    size_hints: Any
    triton_meta: dict[str, Any]
    inductor_meta: dict[str, Any]
    kwargs_src: dict[str, str]


def find_jit_function(tree: ast.Module) -> ast.FunctionDef:
    """Return the ``@triton.jit`` function of a kernel module (the last one if several)."""
    found: ast.FunctionDef | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
            found = node
    if found is None:
        raise KernelSourceError("no @triton.jit function in kernel source")
    return found


def _is_jit(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
        isinstance(target, ast.Name) and target.id == "jit"
    )


def _literal(node: ast.expr) -> Any:
    """Evaluate a decorator argument that is (almost) a literal.

    ``triton_meta`` holds ``DeviceProperties(...)`` calls and enum attributes such as
    ``ReductionHint.INNER``; they are turned into strings so the rest stays comparable.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        return {_dict_key(k): _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Set):
        return sorted(repr(_literal(e)) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal(node.operand)
        return -inner if isinstance(inner, (int, float)) else f"-{inner}"
    return ast.unparse(node)


def _dict_key(node: ast.expr | None) -> str:
    """JSON needs string keys; ``triton_meta['configs']`` is keyed by tuples like ``(0,)``."""
    if node is None:
        return "**"
    value = _literal(node)
    return value if isinstance(value, str) else repr(tuple(value) if isinstance(value, list) else value)


def read_decorator(fn_or_tree: ast.Module | str) -> KernelDecorator | None:
    """Read the ``@triton_heuristics.<kind>(...)`` decorator that wraps the jit function.

    Inductor puts the heuristics decorator on the same function as ``@triton.jit``. Returns
    ``None`` for kernels without one (hand-written Triton).
    """
    tree = ast.parse(fn_or_tree) if isinstance(fn_or_tree, str) else fn_or_tree
    fn = find_jit_function(tree)
    for dec in fn.decorator_list:
        if not isinstance(dec, ast.Call) or _is_jit(dec):
            continue
        func = dec.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        kwargs = {kw.arg: kw.value for kw in dec.keywords if kw.arg}
        size_hints = _literal(kwargs["size_hints"]) if "size_hints" in kwargs else None
        if size_hints is None and dec.args:
            size_hints = _literal(dec.args[0])
        triton_meta = _literal(kwargs["triton_meta"]) if "triton_meta" in kwargs else {}
        inductor_meta = _literal(kwargs["inductor_meta"]) if "inductor_meta" in kwargs else {}
        return KernelDecorator(
            heuristic=name,
            size_hints=size_hints,
            triton_meta=triton_meta if isinstance(triton_meta, dict) else {},
            inductor_meta=inductor_meta if isinstance(inductor_meta, dict) else {},
            kwargs_src={k: ast.unparse(v) for k, v in kwargs.items()},
        )
    return None


def parse_kernel(source: str) -> tuple[ast.FunctionDef, KernelDecorator | None]:
    """A kernel module's ``@triton.jit`` function and its Inductor decorator (None if it has none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise KernelSourceError(f"kernel source does not parse: {exc}") from exc
    return find_jit_function(tree), read_decorator(tree)


def normalized_form(source: str) -> dict[str, Any]:
    """The parts of a kernel source that decide its behaviour, as a JSON-able dict."""
    fn, dec = parse_kernel(source)
    body = ast.FunctionDef(
        name=_PLACEHOLDER,
        args=fn.args,
        body=fn.body,
        decorator_list=[],
        returns=fn.returns,
        type_comment=None,
        **({"type_params": []} if "type_params" in ast.FunctionDef._fields else {}),
    )
    ast.fix_missing_locations(body)
    form: dict[str, Any] = {"v": KEY_VERSION, "fn": ast.unparse(body)}
    if dec is not None:
        tm = dec.triton_meta
        form["heuristic"] = dec.heuristic
        form["size_hints"] = dec.size_hints
        form["signature"] = tm.get("signature")
        form["constants"] = tm.get("constants")
        form["specialization"] = tm.get("configs")
        device = tm.get("device")
        form["device_type"] = _device_type(device)
        form["meta"] = {
            k: dec.inductor_meta[k] for k in SEMANTIC_INDUCTOR_META if k in dec.inductor_meta
        }
        for extra in ("reduction_hint", "tile_hint"):
            if extra in dec.kwargs_src:
                form[extra] = dec.kwargs_src[extra]
    return form


def _device_type(device: Any) -> str | None:
    """``DeviceProperties(type='cuda', ...)`` is kept as text by :func:`_literal`."""
    if not isinstance(device, str):
        return None
    for candidate in ("cuda", "cpu", "xpu", "hip", "mtia"):
        if f"type='{candidate}'" in device or f'type="{candidate}"' in device:
            return candidate
    return None


def kernel_key(source: str) -> str:
    """The pack key of an Inductor kernel: sha256 of its normalized form."""
    blob = json.dumps(normalized_form(source), sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()


def source_sha256(source: str) -> str:
    """sha256 of the raw text, for exact identification (not for pack matching)."""
    return hashlib.sha256(source.encode()).hexdigest()


def kernel_function_name(source: str) -> str:
    """Name of the ``@triton.jit`` function defined by a kernel module."""
    return find_jit_function(ast.parse(source)).name
