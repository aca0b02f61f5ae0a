"""CPU interpreter mode: Inductor's kernels run right, and in reasonable time, without a GPU.

With no CUDA device, Inductor can still emit Triton kernels for CPU tensors (``cpu_backend =
"triton"``) and ``TRITON_INTERPRET=1`` runs them with numpy. The gaps in the stock stack need
patching (FINDINGS.md sections 4 and 8):

* ``torch.utils._triton.triton_hash_with_backend`` asks the active GPU driver for a hash;
* ``triton.language.extra.libdevice`` functions are ``...`` stubs that return ``None`` when
  interpreted, so a numpy-backed table stands in for them;
* compile workers would not inherit these patches, so compilation stays in-process.
* a Python ``float`` kernel argument reaches the kernel bare, not as the fp32 scalar a compiled
  kernel sees (hand-written kernels call ``.to`` on it);
* Inductor's reduction helpers combine pairwise in Python (slow), so numpy reductions stand in;
  any other combine function (an argmax's, a kernel's own) is applied to whole slices;
* ``not`` on a block is its truth in Python (True), where a compiled kernel negates each element;
* every call of a ``@triton.jit`` helper re-patched the whole language (40% of an argmax's time).

Times measured in this mode mean nothing and are never reported as numbers.
"""

from __future__ import annotations

import math
import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

_INTERPRETER_ENABLED = False


def enable_interpreter_mode() -> None:
    """Idempotently switch this process to CPU-interpreter mode."""
    global _INTERPRETER_ENABLED
    if _INTERPRETER_ENABLED:
        return
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        # Triton and Inductor build their @triton.jit helpers at import; built outside
        # interpreter mode they refuse to run inside interpreted kernels.
        raise RuntimeError(
            "interpreter mode must be enabled before triton is imported "
            "(call prepare_device('cpu') first, or set TRITON_INTERPRET=1)"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton

    torch_triton.triton_hash_with_backend = lambda: "KERNELOPT_INTERPRETER"
    inductor_config.cpu_backend = "triton"
    inductor_config.compile_threads = 1
    try:
        import torch._inductor.runtime.triton_helpers as triton_helpers

        # Kernels generated for a CUDA target call this at import; there is no GPU driver here.
        triton_helpers.set_driver_to_gpu = lambda: None
    except (ImportError, AttributeError):  # pragma: no cover - older layouts
        pass
    _install_libdevice_shim()
    _install_reduction_shim()
    _install_sliced_combine_shim()
    _install_language_patch_shim()
    _install_logical_not_shim()
    _install_float_argument_shim()
    _INTERPRETER_ENABLED = True


def _wrap(np_fn: Callable[..., Any], out_bool: bool = False) -> Callable[..., Any]:
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def shim(*args: Any, **_: Any) -> Any:
        ref = next(a for a in args if isinstance(a, tl.tensor))
        datas = [a.handle.data if isinstance(a, tl.tensor) else a for a in args]
        with np.errstate(all="ignore"):
            out = np.asarray(np_fn(*datas))
        scalar_ty = tl.int1 if out_bool else ref.type.scalar
        if not out_bool:
            out = out.astype(ref.handle.data.dtype, copy=False)
        ty = tl.block_type(scalar_ty, list(out.shape)) if ref.type.is_block() else scalar_ty
        return tl.tensor(TensorHandle(out, scalar_ty), ty)

    return shim


def _libdevice_table() -> dict[str, Callable[..., Any]]:
    import numpy as np

    erf = np.vectorize(math.erf, otypes=[np.float64])
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    return {
        "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
        "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
        "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "fast_tanhf": np.tanh,
        "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin, "acos": np.arccos,
        "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
        "atan2": np.arctan2, "erf": erf, "erfc": erfc, "lgamma": lgamma, "floor": np.floor,
        "ceil": np.ceil, "trunc": np.trunc, "nearbyint": np.rint, "rint": np.rint,
        "llrint": np.rint, "round": np.round, "abs": np.abs, "pow": np.power, "fmod": np.fmod,
        "hypot": np.hypot, "copysign": np.copysign, "nextafter": np.nextafter,
        "ldexp": lambda x, e: np.ldexp(x, np.asarray(e).astype(np.int32)),
        "fma": lambda a, b, c: a * b + c, "div_rn": np.divide, "fdiv_rn": np.divide,
        "isnan": np.isnan, "isinf": np.isinf, "signbit": np.signbit, "isfinited": np.isfinite,
    }


_BOOL_RESULTS = {"isnan", "isinf", "signbit", "isfinited"}


def _install_libdevice_shim() -> None:
    """Patch the generic stub module in place; Inductor and Helion both resolve to it."""
    import triton.language.extra.libdevice as stub

    shim = types.SimpleNamespace(
        **{n: _wrap(f, out_bool=n in _BOOL_RESULTS) for n, f in _libdevice_table().items()}
    )
    for name, fn in vars(shim).items():
        setattr(stub, name, fn)


def _reduced(np_fn: Callable[..., Any]) -> Callable[..., Any]:
    """A reduction over one axis computed by numpy on the interpreter's block (NaN propagates,
    as in Inductor's ``triton_helpers.maximum``)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def reduce(a: Any, dim: Any, *_: Any, **__: Any) -> Any:
        axis = int(getattr(dim, "value", dim))
        with np.errstate(all="ignore"):
            out = np.asarray(np_fn(a.handle.data, axis=axis))
        scalar_ty = a.type.scalar
        out = out.astype(a.handle.data.dtype, copy=False)
        ty = tl.block_type(scalar_ty, list(out.shape)) if out.shape else scalar_ty
        return tl.tensor(TensorHandle(out, scalar_ty), ty)

    return reduce


def _install_reduction_shim() -> None:
    """Inductor's ``max2``/``min2``/``welford`` reduce with a combine function written in
    Triton, which the interpreter applies one pair at a time in Python: a 2048-wide row took 8 s.
    numpy's reductions give the same values (NaN-propagating) at once. The interpreter only: on
    a GPU Inductor's own helpers run."""
    import numpy as np

    try:
        import torch._inductor.runtime.triton_helpers as triton_helpers
    except ImportError:  # pragma: no cover - older layouts
        return
    triton_helpers.max2 = _reduced(np.max)
    triton_helpers.min2 = _reduced(np.min)
    triton_helpers.welford = _welford


def _install_sliced_combine_shim() -> None:
    """``tl.reduce`` and ``tl.associative_scan`` with a combine function of their own (Inductor's
    argmax and argmin through ``max_with_index``, a user kernel's own combine) fall to the
    interpreter's generic path, which calls the combine once per element in Python: one argmax
    over the 256 of a 16x256x64 tensor took minutes. A combine is elementwise, so it is applied to
    whole slices instead: a reduction combines neighbours, left before right, as a GPU's tree
    does (log2 n calls); a scan steps along the axis (n calls). A combine that cannot take slices
    (Python control flow on its values) keeps the interpreter's own path."""
    from triton.runtime import interpreter

    reduce_ops, scan_ops = interpreter.ReduceOps, interpreter.ScanOps
    if getattr(reduce_ops.generic_reduce, "_kernelopt_sliced", False):
        return
    element_reduce, element_scan = reduce_ops.generic_reduce, scan_ops.generic_scan

    def generic_reduce(op: Any, input: Any) -> Any:
        try:
            return _sliced_reduce(op, input)
        except Exception:  # noqa: BLE001 - not sliceable: one element at a time, as the interpreter does
            return element_reduce(op, input)

    def generic_scan(op: Any, input: Any) -> Any:
        try:
            return _sliced_scan(op, input)
        except Exception:  # noqa: BLE001 - as above
            return element_scan(op, input)

    generic_reduce._kernelopt_sliced = True  # type: ignore[attr-defined]
    reduce_ops.generic_reduce = generic_reduce
    scan_ops.generic_scan = generic_scan


_slicing = 0  # combines now running on slices (the interpreter runs one kernel at a time)


class _NotSliceable(Exception):
    """A combine asked for a block's truth: it branches on its values and needs them one at a time."""


def _block_truth(tensor: Any) -> bool:
    """A tensor's truth as the interpreter answers it (its value for one element, True for a
    block, since in a compiled kernel only scalars have one), except inside a combine applied to
    slices: there a block stands for many scalars, and its truth would silently pick one branch
    for all of them."""
    data = tensor.handle.data
    if data.size == 1:
        return bool(data)
    if _slicing:
        raise _NotSliceable("a combine branches on its values")
    return True


def _combined(op: Any, dtypes: list[Any], left: list[Any], right: list[Any]) -> list[Any]:
    """``op``'s combine function applied to two lists of same-shaped numpy slices, its results
    in the operands' own numpy dtypes (as the interpreter stores them)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    combine = op.combine_fn
    combine = combine if isinstance(combine, interpreter.InterpretedFunction) else combine.fn  # rewritten: not
    global _slicing
    _slicing += 1
    try:
        out = combine(*(op.to_tensor(a, t) for a, t in zip(left, dtypes)),
                      *(op.to_tensor(b, t) for b, t in zip(right, dtypes)))
    finally:
        _slicing -= 1
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != len(left):
        raise ValueError("the combine returned another number of values")
    return [np.broadcast_to(np.asarray(o.handle.data if isinstance(o, tl.tensor) else o), a.shape).astype(a.dtype)
            for o, a in zip(out, left)]


def _sliced_reduce(op: Any, input: Any) -> list[Any]:
    import numpy as np

    original_axis = op.axis
    input, axis = op.unravel(input, op.axis)
    dtypes = [t.dtype for t in input]
    input_shape = input[0].handle.data.shape
    datas = [np.moveaxis(t.handle.data, axis, 0) for t in input]
    if datas[0].shape[0] == 0:
        raise ValueError("nothing to reduce")
    while (n := datas[0].shape[0]) > 1:
        pairs = 2 * (n // 2)
        merged = _combined(op, dtypes, [d[0:pairs:2] for d in datas], [d[1:pairs:2] for d in datas])
        datas = [np.concatenate([m, d[n - 1:]]) if n % 2 else m for m, d in zip(merged, datas)]
    results = []
    for data, dtype in zip(datas, dtypes):
        data = data[0]
        if op.keep_dims:  # as the interpreter's generic_reduce shapes it
            data = np.expand_dims(data, axis) if original_axis is not None else data.reshape((1,) * len(input_shape))
        elif original_axis is None:
            data = data.item()
        results.append(op.to_tensor(data, dtype))
    return results


def _sliced_scan(op: Any, input: Any) -> list[Any]:
    import numpy as np

    dtypes = [t.dtype for t in input]
    datas = [np.moveaxis(t.handle.data, op.axis, 0) for t in input]
    outs = [np.empty_like(d) for d in datas]
    acc = [d[0:1] for d in datas]
    for i in range(datas[0].shape[0]):
        if i:
            acc = _combined(op, dtypes, acc, [d[i:i + 1] for d in datas])
        for out, a in zip(outs, acc):
            out[i:i + 1] = a
    return [op.to_tensor(np.ascontiguousarray(np.moveaxis(o, 0, op.axis)), t) for o, t in zip(outs, dtypes)]


def _install_logical_not_shim() -> None:
    """In a compiled kernel ``not x`` on a tensor is its elementwise logical not (Triton's code
    generator calls ``__not__``). The interpreter runs a kernel as Python, where ``not`` asks for
    the block's truth, which it answers True for any block of more than one element: Inductor's
    ``maximum_with_index`` (``a_isnan & (not b_isnan)``) then let a NaN lose an argmax. The
    interpreter already rewrites each kernel's syntax tree (chained comparisons); ``not`` is
    rewritten there too, into what the compiler makes of it."""
    import ast

    from triton.runtime import interpreter

    rewriter = interpreter.FunctionRewriter
    if getattr(rewriter.ast_transformer, "_kernelopt_not", False):
        return

    class NotAsCompiled(type(rewriter.ast_transformer)):  # type: ignore[misc]
        _kernelopt_not = True

        def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
            node = self.generic_visit(node)  # type: ignore[assignment]
            if not isinstance(node.op, ast.Not):
                return node
            call = ast.Call(func=ast.Name(id="_kernelopt_logical_not", ctx=ast.Load()), args=[node.operand],
                            keywords=[])
            return ast.copy_location(call, node)

    interpreter._kernelopt_logical_not = _logical_not  # the rewriter gives kernels the interpreter's globals
    rewriter.ast_transformer = NotAsCompiled()


def _install_language_patch_shim() -> None:
    """What the interpreter does to ``triton.language`` while a kernel runs, in one place. It
    patches the language (its builtins, the tensor class, reduce and scan) when a kernel starts
    and restores it when it ends. Two changes:

    * the tensor class's truth is a block's (:func:`_block_truth`), so a sliced combine can tell
      a combine that branches on its values, which must run one element at a time;
    * each call of a ``@triton.jit`` helper inside the kernel patched the language again, walking
      every module member with ``inspect``, although the kernel's patch already stood (Inductor's
      kernels call helpers for every ``maximum``, ``where`` of an index, combine: in one argmax 40%
      of the time went there). A helper's call while a patch of the same modules stands keeps it."""
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang
    if getattr(patch_lang, "_kernelopt_once", False):
        return
    patch_lang_tensor = interpreter._patch_lang_tensor

    def patch_lang_tensor_with_block_truth(tensor: Any, scope: Any) -> None:
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__bool__", _block_truth)

    standing: list[set[int]] = []  # the modules the running kernel's patch covers, and its helpers' since
    langs_of: dict[Any, frozenset[int]] = {}  # the language modules a function sees, as _patch_lang finds them

    def patch_lang_once(fn: Any) -> Any:
        langs = langs_of.get(fn)
        if langs is None:
            langs = langs_of[fn] = frozenset(id(v) for v in fn.__globals__.values()
                                             if inspect.ismodule(v) and v in (tl, tl.core))
        if standing and langs <= standing[0]:
            return interpreter._LangPatchScope()  # nothing to add, nothing to restore
        scope = patch_lang(fn)
        if standing:  # a helper's patch of other modules: left standing, as the interpreter leaves it
            standing[0] |= langs
            return scope
        standing.append(set(langs))
        restore = scope.restore

        def restore_and_forget() -> None:
            restore()
            standing.clear()

        scope.restore = restore_and_forget
        return scope

    patch_lang_once._kernelopt_once = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patch_lang_tensor_with_block_truth
    interpreter._patch_lang = patch_lang_once


def _logical_not(value: Any) -> Any:
    """``not value`` as a compiled kernel computes it: per element for a block; a scalar keeps
    Python's ``not`` (its truth is its one value, as the interpreter already answers)."""
    import triton.language as tl

    if isinstance(value, tl.tensor) and value.type.is_block():
        return value.__not__() if value.dtype == tl.int1 else value == 0
    return not value


def _install_float_argument_shim() -> None:
    """A Python ``float`` kernel argument is an fp32 scalar tensor in a compiled kernel (so
    ``eps.to(tl.float32)`` works, as hand-written kernels such as liger-kernel's norms write it);
    the interpreter passes it on as a bare float. Wrap it as the compiler types it."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._implicit_cvt
    if getattr(original, "_kernelopt_float_shim", False):
        return

    def implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return original(arg)

    implicit_cvt._kernelopt_float_shim = True  # type: ignore[attr-defined]
    interpreter._implicit_cvt = implicit_cvt


def _welford(mean: Any, m2: Any, weight: Any, dim: Any) -> tuple[Any, Any, Any]:
    """Inductor's ``welford`` (a parallel Welford combine over ``dim``) in closed form: the
    total weight, the weighted mean, and the summed M2 plus each part's spread around the mean
    (a part whose mean equals the total's adds nothing: equal infinite means stay infinite, as
    in ``welford_combine``'s guard)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    axis = int(getattr(dim, "value", dim))
    m, q, w = (t.handle.data for t in (mean, m2, weight))
    with np.errstate(all="ignore"):
        total = w.sum(axis=axis)
        safe = np.where(total == 0, 1, total)
        mu = np.where(total == 0, 0, np.where(w == 0, 0, w * m).sum(axis=axis) / safe)
        spread = np.where(m == np.expand_dims(mu, axis), 0, m - np.expand_dims(mu, axis))
        spread = np.where(w == 0, 0, w * spread * spread)
        out_m2 = q.sum(axis=axis) + spread.sum(axis=axis)

    def wrap(data: Any, like: Any) -> Any:
        data = np.asarray(data).astype(like.handle.data.dtype, copy=False)
        scalar_ty = like.type.scalar
        ty = tl.block_type(scalar_ty, list(data.shape)) if data.shape else scalar_ty
        return tl.tensor(TensorHandle(data, scalar_ty), ty)

    return wrap(mu, mean), wrap(out_m2, m2), wrap(total, weight)
