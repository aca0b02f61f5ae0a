"""Gate 1, static: reject a candidate kernel or launch config before it costs any GPU time.

A kernel search is an optimizer pointed at the harness (VERIFY.md), so this gate does not ask
"does this look like a kernel?" but "can this text do anything other than be the original's
kernel, rewritten?". Everything here reads the candidate with :mod:`ast`; nothing is imported,
executed or compiled, so a hostile candidate cannot act while it is being judged.

Why each rule exists:

* **One kernel, same name, same parameters in the same order.** The re-stitched wrapper launches
  the kernel by name with positional arguments (``k.run(buf0, buf1, 512, ...)``); any change to
  the name, order or constexpr-ness of a parameter silently rebinds arguments.
* **Imports: only what the original imports, from a fixed allowed set.** A kernel module is
  executed on the host when it is loaded; an extra import is the first step of every host-side
  trick (timer patching, caching, reading the reference's output from disk).
* **Module level: imports, the kernel, the original's ``set_driver_to_*()`` call, literal
  constants.** Anything else runs on the host at load time or keeps state between calls (a
  result cache keyed on a pointer is the classic cheat).
* **Kernel body: only triton / tl / tl_math / libdevice / triton_helpers and locals.** Under
  ``TRITON_INTERPRET=1`` the body *is* Python run on the host, so ``os.getenv`` or ``open`` in
  it would really execute; on a GPU they fail to compile, but we reject them before either.
  Streams are rejected because work moved to another stream escapes the timer.
  ``inline_asm`` is opaque to every later check (and unsupported by the interpreter), so it
  needs an explicit opt-in.
* **Block sizes are powers of two.** ``tl.arange`` and Triton tiles require it; catching it here
  gives a clear reason instead of a compiler error deep in a subprocess.
* **The heuristics decorator keeps the grid contract.** ``grid_type`` decides how the launcher
  computes the grid from the block constexprs and ``mutated_arg_names`` tells Inductor which
  buffers the kernel writes; changing either changes what the wrapper does around the kernel.

Each failure names its rule first (``"imports: ..."``) and the rule is also in
``GateResult.numbers["rule"]`` so the red-team suite can assert which rule fired.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.compile.artifact import TritonKernel
from kernelopt_bot.stitch.keys import KernelSourceError, find_jit_function, read_decorator
from kernelopt_bot.stitch.pack import LaunchConfig
from kernelopt_bot.verify.result import GateResult

GATE = "static"

# Triton refuses tensors with more elements than this (``TRITON_MAX_TENSOR_NUMEL``): a launch
# config whose tile exceeds it cannot compile, whatever the kernel.
MAX_TILE_NUMEL = 2**20

ALLOWED_HEURISTICS = frozenset({
    "pointwise",
    "reduction",
    "persistent_reduction",
    "template",
    "split_scan",
    "cooperative_reduction",
    "foreach",
})

# Launch-config constexprs that size a tile. Older Inductor names the reduction block RBLOCK.
BLOCK_CONSTEXPRS = ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK", "RBLOCK")

# ``import X [as Y]`` may only name these modules (or a triton.language.extra submodule).
_IMPORTABLE_MODULES = frozenset({"triton", "triton.language"})
# ``from M import names``: M -> the names it may give (None: any public name).
_FROM_IMPORTS: dict[str, frozenset[str] | None] = {
    "triton": frozenset({"language", "cdiv", "next_power_of_2", "jit"}),
    "triton.language": None,
    "torch._inductor.runtime": frozenset({"triton_helpers", "triton_heuristics"}),
    "torch._inductor.runtime.triton_helpers": frozenset({"libdevice", "math"}),
    "torch._inductor.runtime.hints": None,
    "triton.language.extra": None,
}
_EXTRA_PREFIX = "triton.language.extra."

# What an imported name is, for deciding where it may be used.
_BODY_KINDS = frozenset({"triton", "tl", "helpers", "device_lib"})

# Names that never belong in a kernel: host I/O, reflection, process and network access.
_FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "hasattr",
    "globals", "locals", "vars", "dir", "print", "input", "breakpoint", "exit", "quit", "help",
    "type", "object", "super", "memoryview", "id",
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "torch", "time",
    "threading", "multiprocessing", "signal", "shutil", "pickle", "marshal", "numpy", "np",
    "pathlib", "io", "gc", "inspect", "asyncio",
})
# Attribute names that reach the host from an otherwise allowed module: triton.runtime (the
# driver), triton_helpers.triton / .pymath / .warnings, os.environ-style lookups.
_FORBIDDEN_ATTRS = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "torch", "time",
    "threading", "multiprocessing", "numpy", "environ", "getenv", "putenv", "system", "popen",
    "open", "exec", "eval", "compile", "runtime", "testing", "compiler", "backends", "tools", "knobs",
    "driver", "triton", "pymath", "warnings", "inspect", "core", "typing", "pkgutil",
    # the interpreter's host-side storage of a tensor (a numpy array: .tofile, .ctypes, ...)
    "handle", "tofile", "dump", "dumps",
})
# ``triton.<attr>`` inside a kernel: only the device-side API.
_TRITON_BODY_ATTRS = frozenset({"language", "cdiv", "next_power_of_2"})
# Inside a kernel, an attribute chain on a module may only pass through these device-API
# submodules (``tl.math.exp``, ``tl.extra.cuda.libdevice.exp``) ...
_DEVICE_SUBMODULES = frozenset({"language", "math", "extra", "cuda", "hip", "libdevice", "standard", "random"})
# ... and must not end on a module: a module object in a local is a path to host modules
# (``tl.core.inspect.os``, ``triton_helpers.triton.runtime``). These are the module-valued
# attributes of triton, triton.language and the Inductor helpers (triton 3.9).
_MODULE_ATTRS = frozenset({
    "backends", "compiler", "core", "cuda", "errors", "extra", "hip", "knobs", "language", "libdevice",
    "math", "module", "pkgutil", "pymath", "random", "runtime", "standard", "target_info", "testing", "tl",
    "tools", "triton", "warnings", "typing", "inspect", "builtins", "semantic", "interpreter",
})
# Imported names that are modules (the rest are functions, dtypes or hint classes).
_MODULE_IMPORT_NAMES = frozenset({"language", "triton_helpers", "triton_heuristics", "libdevice", "math",
                                  "cuda", "hip", "extra", "standard", "random"})
# Builtins Inductor kernels use (``float("-inf")``, ``range`` in templates); the Triton frontend
# understands them.
_ALLOWED_BUILTINS = frozenset({"range", "float", "int", "bool", "min", "max", "abs", "len"})
_DRIVER_CALLS = frozenset({"set_driver_to_gpu", "set_driver_to_cpu"})
_DECORATOR_CALLS = frozenset({"set", "frozenset"})


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


class _Reject(Exception):
    """One rule failed; carries the rule name and a reason for the report."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message


def _fail(exc: _Reject, lines: int | None = None) -> GateResult:
    numbers: dict[str, Any] = {"rule": exc.rule}
    if lines is not None:
        numbers["lines"] = lines
    return GateResult.fail(GATE, f"{exc.rule}: {exc.message}", **numbers)


def is_power_of_two(value: Any) -> bool:
    """A positive int (not a bool) with one bit set."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


# --------------------------------------------------------------------------------------------
# Imports


@dataclass(frozen=True)
class _Import:
    """One name bound by an import statement."""

    bound: str
    origin: str  # dotted path of what the name refers to
    spec: tuple[str | None, ...]  # comparable form of the statement part that binds it
    text: str


def _imports_of(stmt: ast.Import | ast.ImportFrom) -> list[_Import]:
    out: list[_Import] = []
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            bound = alias.asname or alias.name.split(".")[0]
            origin = alias.name if alias.asname else alias.name.split(".")[0]
            text = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
            out.append(_Import(bound, origin, ("import", alias.name, alias.asname), text))
        return out
    module = "." * stmt.level + (stmt.module or "")
    for alias in stmt.names:
        text = f"from {module} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
        out.append(_Import(alias.asname or alias.name, f"{module}.{alias.name}",
                           ("from", module, alias.name, alias.asname), text))
    return out


def _import_allowed(imp: _Import) -> bool:
    if imp.spec[0] == "import":
        module = str(imp.spec[1])
        return module in _IMPORTABLE_MODULES or module.startswith(_EXTRA_PREFIX)
    module, name = str(imp.spec[1]), str(imp.spec[2])
    if name == "*" or name.startswith("_"):
        return False
    if module in _FROM_IMPORTS:
        names = _FROM_IMPORTS[module]
        return names is None or name in names
    return module.startswith(_EXTRA_PREFIX)


def _kind_of(origin: str) -> str:
    """Where an imported name may be used: in the kernel body, or only in decorators."""
    if origin == "triton":
        return "triton"
    if origin == "triton.jit":
        return "jit"
    if origin.startswith("triton.language.extra") or origin in (
        "torch._inductor.runtime.triton_helpers.libdevice",
        "torch._inductor.runtime.triton_helpers.math",
    ):
        return "device_lib"
    if origin == "torch._inductor.runtime.triton_helpers":
        return "helpers"
    if origin == "torch._inductor.runtime.triton_heuristics":
        return "heuristics"
    if origin.startswith("torch._inductor.runtime.hints."):
        return "hints"
    if origin in ("triton.language", "triton.cdiv", "triton.next_power_of_2") or origin.startswith("triton.language."):
        return "tl"
    return "other"


# --------------------------------------------------------------------------------------------
# Module structure


@dataclass
class _Module:
    """What a kernel module defines, as the rules need it."""

    tree: ast.Module
    imports: list[_Import] = field(default_factory=list)
    jit_functions: list[ast.FunctionDef] = field(default_factory=list)
    constants: dict[str, Any] = field(default_factory=dict)
    driver_calls: list[str] = field(default_factory=list)

    @property
    def bindings(self) -> dict[str, str]:
        return {imp.bound: _kind_of(imp.origin) for imp in self.imports}

    @property
    def module_names(self) -> set[str]:
        """Bound names that refer to modules rather than to functions or values."""
        return {imp.bound for imp in self.imports
                if imp.spec[0] == "import" or imp.spec[2] in _MODULE_IMPORT_NAMES}


def _is_jit_decorator(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
        isinstance(target, ast.Name) and target.id == "jit"
    )


def _is_driver_call(stmt: ast.stmt) -> bool:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    call = stmt.value
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr in _DRIVER_CALLS
        and isinstance(call.func.value, ast.Name)
        and not call.args
        and not call.keywords
    )


def _is_constexpr_annotation(node: ast.expr | None, bindings: dict[str, str]) -> bool:
    """``tl.constexpr``, ``triton.language.constexpr`` or a ``constexpr`` imported from tl."""
    if node is None:
        return False
    if isinstance(node, ast.Name):
        return node.id == "constexpr" and bindings.get(node.id) == "tl"
    if not (isinstance(node, ast.Attribute) and node.attr == "constexpr"):
        return False
    base = node.value
    if isinstance(base, ast.Name):
        return bindings.get(base.id) == "tl"
    return (
        isinstance(base, ast.Attribute)
        and base.attr == "language"
        and isinstance(base.value, ast.Name)
        and bindings.get(base.value.id) == "triton"
    )


def _literal_value(node: ast.expr, bindings: dict[str, str]) -> tuple[bool, Any]:
    """``(True, value)`` for an int/float/str/bool literal, a signed number, or
    ``tl.constexpr(<literal>)``; ``(False, None)`` otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return True, node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
    ):
        value = node.operand.value
        return True, -value if isinstance(node.op, ast.USub) else value
    if (
        isinstance(node, ast.Call)
        and _is_constexpr_annotation(node.func, bindings)
        and len(node.args) == 1
        and not node.keywords
    ):
        return _literal_value(node.args[0], bindings)
    return False, None


def _describe(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node).splitlines()[0] if not isinstance(node, ast.FunctionDef) else f"def {node.name}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_module(tree: ast.Module, original_driver_calls: set[str]) -> _Module:
    """Sort the candidate's top-level statements; reject anything that is host code or state.

    ``original_driver_calls`` are the ``triton_helpers.set_driver_to_*()`` statements of the
    original: the only module-level calls a candidate may repeat (they pick the runtime driver).
    """
    mod = _Module(tree)
    for imp_stmt in (s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))):
        mod.imports.extend(_imports_of(imp_stmt))
    bindings = mod.bindings
    jit_names = {
        s.name for s in tree.body if isinstance(s, ast.FunctionDef) and any(map(_is_jit_decorator, s.decorator_list))
    }
    reserved = jit_names | _ALLOWED_BUILTINS | _FORBIDDEN_NAMES
    for index, stmt in enumerate(tree.body):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.FunctionDef):
            if any(map(_is_jit_decorator, stmt.decorator_list)):
                mod.jit_functions.append(stmt)
                continue
            raise _Reject("module-level", f"helper function '{stmt.name}' at module level is host code; "
                                          "only the @triton.jit kernel may be defined")
        if isinstance(stmt, (ast.AsyncFunctionDef, ast.ClassDef)):
            raise _Reject("module-level", f"'{_describe(stmt)}' at module level is host code")
        if isinstance(stmt, (ast.Global, ast.Nonlocal)):
            raise _Reject("module-level", f"'{_describe(stmt)}' statement: module-level state is not allowed")
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
            stmt.value.value, str
        ):
            if index == 0:
                continue  # module docstring
            raise _Reject("module-level", "bare string expression at module level")
        if _is_driver_call(stmt):
            text = ast.unparse(stmt)
            if text not in original_driver_calls:
                raise _Reject("module-level", f"'{text}' is not in the original kernel module")
            mod.driver_calls.append(text)
            continue
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            name, value = _read_constant(stmt, bindings, reserved)
            mod.constants[name] = value
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            raise _Reject("module-level", f"call '{_describe(stmt)}' at module level is host code")
        raise _Reject("module-level", f"'{_describe(stmt)}' ({type(stmt).__name__}) at module level is host "
                                      "code or module-level state")
    return mod


def _read_constant(stmt: ast.Assign | ast.AnnAssign, bindings: dict[str, str],
                   reserved: frozenset[str] | set[str]) -> tuple[str, Any]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        raise _Reject("module-level", f"'{_describe(stmt)}': only 'NAME = <literal>' constants are allowed")
    name = targets[0].id
    if name.startswith("__") or name in bindings or name in reserved:
        raise _Reject("module-level", f"'{_describe(stmt)}' rebinds '{name}' (a dunder, an import, a builtin "
                                      "or the kernel)")
    if isinstance(stmt, ast.AnnAssign):
        ann = stmt.annotation
        if not (_is_constexpr_annotation(ann, bindings)
                or (isinstance(ann, ast.Name) and ann.id in ("int", "float", "str", "bool"))):
            raise _Reject("module-level", f"annotation '{ast.unparse(ann)}' on '{name}' is host code")
    value_node = stmt.value
    if value_node is None:
        raise _Reject("module-level", f"'{name}' is declared without a value")
    if isinstance(value_node, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        raise _Reject("module-level", f"'{_describe(stmt)}' is mutable module-level state (a cache "
                                      "survives between calls)")
    ok, value = _literal_value(value_node, bindings)
    if not ok:
        raise _Reject("module-level", f"'{_describe(stmt)}': module-level constants must be int/float/str "
                                      "literals or tl.constexpr(<literal>); anything else is host code")
    if "BLOCK" in name.upper() and isinstance(value, int) and not isinstance(value, bool) and not is_power_of_two(value):
        raise _Reject("block-size", f"module constant {name} = {value} is not a power of two")
    return name, value


# --------------------------------------------------------------------------------------------
# The kernel function: parameters, decorators, body


def _check_parameters(fn: ast.FunctionDef, orig_fn: ast.FunctionDef, cand_bindings: dict[str, str],
                      orig_bindings: dict[str, str]) -> None:
    args = fn.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults or args.kw_defaults:
        raise _Reject("parameters", "only plain positional parameters without defaults are allowed "
                                    "(no /, *args, keyword-only, **kwargs or default values)")
    if fn.returns is not None:
        raise _Reject("parameters", f"return annotation '{ast.unparse(fn.returns)}' is not allowed")
    got = [a.arg for a in args.args]
    want = [a.arg for a in orig_fn.args.args]
    if got != want:
        extra = [p for p in got if p not in want]
        missing = [p for p in want if p not in got]
        if extra:
            raise _Reject("parameters", f"extra parameter(s) {extra}; the kernel must take exactly the "
                                        f"original's parameters {want}")
        if missing:
            raise _Reject("parameters", f"missing parameter(s) {missing}; expected {want}")
        raise _Reject("parameters", f"parameter order changed: expected {want}, got {got}")
    orig_ann = {a.arg: a.annotation for a in orig_fn.args.args}
    for arg in args.args:
        cand_const = _is_constexpr_annotation(arg.annotation, cand_bindings)
        orig_const = _is_constexpr_annotation(orig_ann[arg.arg], orig_bindings)
        if arg.annotation is not None and not cand_const:
            raise _Reject("parameters", f"annotation '{ast.unparse(arg.annotation)}' on '{arg.arg}' is not "
                                        "allowed (only tl.constexpr)")
        if cand_const != orig_const:
            state = "must be" if orig_const else "must not be"
            raise _Reject("parameters", f"'{arg.arg}' {state} annotated tl.constexpr, as in the original")


def _check_decorator_args(call: ast.Call, bindings: dict[str, str]) -> None:
    """Decorator arguments are evaluated on the host at load time: literals only, plus the
    ``DeviceProperties(...)`` / hint enums / ``set()`` / ``__file__`` Inductor emits."""
    hints = {n for n, k in bindings.items() if k == "hints"}

    def hint_rooted(node: ast.expr) -> bool:
        while isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                return False
            node = node.value
        return isinstance(node, ast.Name) and node.id in hints

    for kw in call.keywords:
        if kw.arg is None:
            raise _Reject("decorator", "'**' arguments in the heuristics decorator are not allowed")
    for node in [*call.args, *(kw.value for kw in call.keywords)]:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Constant, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.keyword,
                                ast.expr_context, ast.unaryop)):
                continue
            if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, (ast.USub, ast.UAdd)):
                continue
            if isinstance(sub, ast.Name) and (sub.id == "__file__" or sub.id in hints or sub.id in _DECORATOR_CALLS):
                continue
            if isinstance(sub, ast.Attribute) and hint_rooted(sub):
                continue
            direct_call = isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and (
                sub.func.id in _DECORATOR_CALLS or sub.func.id in hints)
            # Older Inductor writes ``AttrsDescriptor.from_dict({...})``; no other method is a literal.
            from_dict = isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and (
                sub.func.attr == "from_dict" and hint_rooted(sub.func))
            if isinstance(sub, ast.Call) and not any(k.arg is None for k in sub.keywords) and (direct_call or from_dict):
                continue
            raise _Reject("decorator", f"'{_describe(sub)}' in the heuristics decorator would run host code "
                                       "at load time; only literals and Inductor hint values are allowed")


def _heuristics_call(fn: ast.FunctionDef, bindings: dict[str, str]) -> ast.Call | None:
    """Check the decorator list shape and return the heuristics call, if any."""
    decs = fn.decorator_list
    jits = [d for d in decs if _is_jit_decorator(d)]
    if len(jits) != 1:
        raise _Reject("decorator", f"'{fn.name}' must carry exactly one @triton.jit")
    jit = jits[0]
    bare_jit = (
        isinstance(jit, ast.Attribute) and isinstance(jit.value, ast.Name) and bindings.get(jit.value.id) == "triton"
    ) or (isinstance(jit, ast.Name) and bindings.get(jit.id) == "jit")
    if not bare_jit:
        raise _Reject("decorator", f"'@{ast.unparse(jit)}' is not a plain @triton.jit")
    if decs[-1] is not jit:
        raise _Reject("decorator", "@triton.jit must be the innermost decorator")
    others = decs[:-1]
    if not others:
        return None
    if len(others) > 1:
        raise _Reject("decorator", f"'{fn.name}' has {len(others)} decorators besides @triton.jit; at most the "
                                   "one heuristics decorator is allowed")
    dec = others[0]
    if not (
        isinstance(dec, ast.Call)
        and isinstance(dec.func, ast.Attribute)
        and isinstance(dec.func.value, ast.Name)
        and bindings.get(dec.func.value.id) == "heuristics"
    ):
        raise _Reject("decorator", f"'@{_describe(dec)}' is not a triton_heuristics decorator")
    if dec.func.attr not in ALLOWED_HEURISTICS:
        raise _Reject("decorator", f"triton_heuristics.{dec.func.attr} is not an allowed heuristic "
                                   f"({', '.join(sorted(ALLOWED_HEURISTICS))})")
    _check_decorator_args(dec, bindings)
    return dec


def _check_grid_contract(cand_fn: ast.FunctionDef, cand_call: ast.Call | None, orig_fn: ast.FunctionDef,
                         orig_has_decorator: bool) -> None:
    """The decorator must keep the original's heuristic, grid type, mutated args and signature."""
    orig = read_decorator(ast.Module(body=[orig_fn], type_ignores=[])) if orig_has_decorator else None
    if cand_call is None:
        if orig is not None:
            raise _Reject("decorator", f"the original's @triton_heuristics.{orig.heuristic} decorator is missing "
                                       "(the wrapper launches the kernel through it)")
        return
    if orig is None:
        raise _Reject("decorator", "the original has no heuristics decorator; the candidate must not add one")
    cand = read_decorator(ast.Module(body=[cand_fn], type_ignores=[]))
    assert cand is not None
    if cand.heuristic != orig.heuristic:
        raise _Reject("decorator", f"heuristic changed from {orig.heuristic} to {cand.heuristic}; the launch "
                                   "configs and grid are built by it")
    for key in ("grid_type", "mutated_arg_names"):
        want, got = orig.inductor_meta.get(key), cand.inductor_meta.get(key)
        if key == "mutated_arg_names":
            want = sorted(map(str, want)) if isinstance(want, list) else want
            got = sorted(map(str, got)) if isinstance(got, list) else got
        if want != got:
            what = "which arguments are mutated is a semantic change" if key == "mutated_arg_names" else (
                "the launcher computes the grid from it")
            raise _Reject("decorator", f"inductor_meta['{key}'] changed from {want!r} to {got!r}; {what}")
    for key, why in (("signature", "argument types and constexprs are part of the contract"),
                     ("constants", "arguments specialized to constants are part of the contract"),
                     ("configs", "divisibility specialization is a promise about the inputs, not the kernel")):
        if cand.triton_meta.get(key) != orig.triton_meta.get(key):
            raise _Reject("decorator", f"triton_meta['{key}'] differs from the original's ({why})")
    want_hints, got_hints = orig.size_hints, cand.size_hints
    if isinstance(want_hints, dict):
        if not isinstance(got_hints, dict) or set(got_hints) != set(want_hints):
            raise _Reject("decorator", f"size_hints must be a dict with keys {sorted(want_hints)}, got {got_hints!r}")
        values = list(got_hints.values())
    elif isinstance(want_hints, list):
        if not isinstance(got_hints, list) or len(got_hints) != len(want_hints):
            raise _Reject("decorator", f"size_hints must be a list of {len(want_hints)} ints, got {got_hints!r}")
        values = list(got_hints)
    else:
        values = []
    if any(not (isinstance(v, int) and not isinstance(v, bool) and v > 0) for v in values):
        raise _Reject("decorator", f"size_hints values must be positive ints, got {got_hints!r}")


@dataclass
class _Scope:
    """Names a kernel body may refer to."""

    locals: set[str]
    bindings: dict[str, str]
    constants: set[str]
    functions: set[str]
    allow_inline_asm: bool
    modules: set[str] = field(default_factory=set)

    def module_root(self, node: ast.expr) -> bool:
        """A name that refers to an imported module (not shadowed by a local)."""
        return isinstance(node, ast.Name) and node.id in self.modules and node.id not in self.locals


def _check_identifier(name: str, scope: _Scope, *, attribute: bool, context: str = "") -> None:
    """Reject identifiers that reach the host, streams and (unless opted in) inline assembly."""
    where = f"{'attribute' if attribute else 'name'} '{name}'" + (f" in '{context}'" if context else "")
    lowered = name.lower()
    if "stream" in lowered:
        raise _Reject("streams", f"{where} mentions a stream; work on another stream escapes the timer")
    if "inline_asm" in lowered and not scope.allow_inline_asm:
        raise _Reject("inline-asm", f"{where}: inline_asm is not allowed unless allow_inline_asm is set")
    if name.startswith("__"):
        raise _Reject("forbidden-name", f"{where}: dunder access reaches host objects")
    if attribute and name.startswith("_"):
        raise _Reject("forbidden-name", f"{where}: private attributes are not kernel API")
    if name == "print" and not attribute:
        raise _Reject("forbidden-name", "builtin print() is host I/O; use tl.device_print")
    forbidden = _FORBIDDEN_ATTRS if attribute else _FORBIDDEN_NAMES
    if name in forbidden:
        raise _Reject("forbidden-name", f"{where} is host/file/network/process access, not kernel code")


def _call_root(func: ast.expr) -> ast.expr:
    while isinstance(func, ast.Attribute):
        func = func.value
    return func


def _is_tl_attr(node: ast.expr, attr: str, scope: _Scope) -> bool:
    if not (isinstance(node, ast.Attribute) and node.attr == attr):
        return False
    base = node.value
    if isinstance(base, ast.Name):
        return scope.bindings.get(base.id) == "tl"
    return (isinstance(base, ast.Attribute) and base.attr == "language" and isinstance(base.value, ast.Name)
            and scope.bindings.get(base.value.id) == "triton")


def _check_arange(call: ast.Call, scope: _Scope) -> None:
    if not _is_tl_attr(call.func, "arange", scope):
        return
    args: list[ast.expr | None] = list(call.args[:2])
    kws = {kw.arg: kw.value for kw in call.keywords}
    while len(args) < 2:
        args.append(kws.get("start" if not args else "end"))
    start, end = args
    if isinstance(start, ast.Constant) and isinstance(end, ast.Constant) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in (start.value, end.value)
    ):
        size = end.value - start.value
        if not is_power_of_two(size):
            raise _Reject("block-size", f"'{ast.unparse(call)}' spans {size} elements; Triton block sizes must "
                                        "be powers of two")


def _check_block_assignment(stmt: ast.Assign | ast.AnnAssign, scope: _Scope) -> None:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if stmt.value is None:
        return
    ok, value = _literal_value(stmt.value, scope.bindings)
    if not ok or not isinstance(value, int) or isinstance(value, bool):
        return
    for target in targets:
        if isinstance(target, ast.Name) and "BLOCK" in target.id.upper() and not is_power_of_two(value):
            raise _Reject("block-size", f"'{target.id}' is hardcoded to {value}; block sizes must be powers of two")


def _check_body(fn: ast.FunctionDef, scope: _Scope) -> None:
    """Walk the kernel body: device API and locals only, no host access, no state.

    Two passes, so the most specific reason wins: forbidden identifiers (``open``, ``os``,
    streams, ``inline_asm``) and forbidden statements first, then whether every name and call
    resolves to a local or the device API.
    """
    nodes = [node for stmt in fn.body for node in ast.walk(stmt)]
    for node in nodes:
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            kw = "global" if isinstance(node, ast.Global) else "nonlocal"
            raise _Reject("kernel-body", f"'{kw}' statement in the kernel: module-level state is not allowed")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            raise _Reject("kernel-body", f"'{_describe(node)}' inside the kernel: imports belong at module "
                                         "level and are limited to triton and the Inductor runtime")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            raise _Reject("kernel-body", "nested functions, lambdas and classes are not allowed in the kernel")
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            raise _Reject("kernel-body", "generators and await are not kernel code")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "stream" in node.value.lower():
                raise _Reject("streams", f"string {node.value!r} mentions a stream")
            if "inline_asm" in node.value.lower() and not scope.allow_inline_asm:
                raise _Reject("inline-asm", f"string {node.value!r} mentions inline_asm")
        if isinstance(node, ast.Name):
            _check_identifier(node.id, scope, attribute=False)
        elif isinstance(node, ast.Attribute):
            _check_identifier(node.attr, scope, attribute=True, context=_describe(node))
    parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
    for node in nodes:
        if isinstance(node, ast.Name):
            _check_name(node, scope)
            parent = parents.get(node)
            if scope.module_root(node) and not (isinstance(parent, ast.Attribute) and parent.value is node):
                raise _Reject("kernel-body", f"module '{node.id}' used as a value; only '{node.id}.<function>' "
                                             "is kernel code")
        elif isinstance(node, ast.Attribute):
            parent = parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                _check_module_chain(node, scope)
        elif isinstance(node, ast.Call):
            _check_call(node, scope)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            _check_block_assignment(node, scope)


def _check_module_chain(node: ast.Attribute, scope: _Scope) -> None:
    """``tl.x``, ``tl.math.x``, ``triton.language.x``: through device submodules to a non-module."""
    segments: list[str] = []
    root: ast.expr = node
    while isinstance(root, ast.Attribute):
        segments.append(root.attr)
        root = root.value
    if not scope.module_root(root):
        return
    assert isinstance(root, ast.Name)
    segments.reverse()
    text = ast.unparse(node)
    if scope.bindings.get(root.id) == "triton" and segments[0] not in _TRITON_BODY_ATTRS:
        raise _Reject("kernel-body", f"'{text}' is host-side triton API, not device code")
    if any(seg not in _DEVICE_SUBMODULES for seg in segments[:-1]) or segments[-1] in _MODULE_ATTRS:
        raise _Reject("kernel-body", f"'{text}' is not a device function or value of "
                                     "triton/tl/tl_math/libdevice/triton_helpers")


def _check_name(node: ast.Name, scope: _Scope) -> None:
    if not isinstance(node.ctx, ast.Load) or node.id in scope.locals:
        return
    if node.id in scope.constants or node.id in scope.functions or node.id in _ALLOWED_BUILTINS:
        return
    kind = scope.bindings.get(node.id)
    if kind in _BODY_KINDS:
        return
    if kind is not None:
        raise _Reject("kernel-body", f"'{node.id}' is host-side (decorator/hint API) and cannot be used in the kernel")
    raise _Reject("kernel-body", f"name '{node.id}' is neither a local of the kernel nor "
                                 "triton/tl/tl_math/libdevice/triton_helpers")


def _check_call(call: ast.Call, scope: _Scope) -> None:
    root = _call_root(call.func)
    if isinstance(root, ast.Name):
        name = root.id
        ok = (
            name in scope.locals
            or name in scope.functions
            or scope.bindings.get(name) in _BODY_KINDS
            or (name in _ALLOWED_BUILTINS and root is call.func)
        )
        if not ok:
            raise _Reject("kernel-body", f"call '{_describe(call.func)}(...)' is outside "
                                         "triton/tl/tl_math/libdevice/triton_helpers and the kernel's locals")
    _check_arange(call, scope)


def _locals_of(fn: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


# --------------------------------------------------------------------------------------------
# Public API


def _original_module(original: TritonKernel) -> tuple[_Module, ast.FunctionDef]:
    tree = ast.parse(original.source)
    mod = _read_module_lenient(tree)
    return mod, find_jit_function(tree)


def _read_module_lenient(tree: ast.Module) -> _Module:
    """The original is trusted: record its imports, driver calls and jit functions only."""
    mod = _Module(tree)
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            mod.imports.extend(_imports_of(stmt))
        elif isinstance(stmt, ast.FunctionDef) and any(map(_is_jit_decorator, stmt.decorator_list)):
            mod.jit_functions.append(stmt)
        elif _is_driver_call(stmt):
            mod.driver_calls.append(ast.unparse(stmt))
    return mod


def check_source(original: TritonKernel, candidate: str, *, allow_inline_asm: bool = False) -> GateResult:
    """Gate 1 on a candidate kernel source: may it stand in for ``original`` at all?

    Passing says nothing about correctness or speed (gates 2-4); failing means the text is not a
    like-for-like kernel module, or could act outside the kernel.
    """
    lines = len(candidate.splitlines())
    try:
        orig_mod, orig_fn = _original_module(original)
    except (SyntaxError, KernelSourceError) as exc:
        return GateResult.not_run(GATE, f"original kernel {original.name} cannot be read: {exc}")
    try:
        try:
            tree = ast.parse(candidate)
        except SyntaxError as exc:
            raise _Reject("syntax", f"candidate does not parse: line {exc.lineno}: {exc.msg}") from None
        except (MemoryError, RecursionError) as exc:
            raise _Reject("syntax", f"candidate is too deeply nested to parse ({type(exc).__name__})") from None
        _check_source_tree(tree, orig_mod, orig_fn, allow_inline_asm)
    except _Reject as exc:
        return _fail(exc, lines)
    except Exception as exc:  # noqa: BLE001 - hostile input must be a rejection, never a crash of the tool
        return _fail(_Reject("internal", f"candidate could not be checked ({type(exc).__name__}: {exc})"), lines)
    return GateResult.ok(GATE, "passed static checks", lines=lines)


def _check_source_tree(tree: ast.Module, orig_mod: _Module, orig_fn: ast.FunctionDef,
                       allow_inline_asm: bool) -> None:
    # Imports first: an unknown import is the clearest sign of host code.
    orig_specs = {imp.spec for imp in orig_mod.imports}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for imp in _imports_of(stmt):
                if not _import_allowed(imp):
                    raise _Reject("imports", f"'{imp.text}' is not allowed; a kernel may import only triton, "
                                             "triton.language and the Inductor runtime helpers (no torch, os, "
                                             "sys or other host modules)")
                if imp.spec not in orig_specs:
                    raise _Reject("imports", f"'{imp.text}' is not imported by the original kernel")
    cand = _read_module(tree, set(orig_mod.driver_calls))
    bindings = cand.bindings

    # Exactly one kernel, with the original's name; extra jit functions only where the original
    # has the same helper (Inductor emits combine-function helpers for some scans).
    want = orig_fn.name
    helpers = {f.name for f in orig_mod.jit_functions if f.name != want}
    names = [f.name for f in cand.jit_functions]
    kernels = [f for f in cand.jit_functions if f.name == want]
    if not cand.jit_functions:
        raise _Reject("single-kernel", f"no @triton.jit function; expected one named '{want}'")
    if not kernels:
        raise _Reject("single-kernel", f"the @triton.jit function must be named '{want}' (the original's name), "
                                       f"found {names}")
    if len(kernels) > 1:
        raise _Reject("single-kernel", f"'{want}' is defined {len(kernels)} times")
    strays = [n for n in names if n != want and n not in helpers]
    if strays:
        raise _Reject("single-kernel", f"{len(names)} @triton.jit functions {names}; a candidate defines exactly "
                                       f"one kernel '{want}' (extra: {strays})")
    fn = kernels[0]

    _check_parameters(fn, orig_fn, bindings, orig_mod.bindings)
    call = _heuristics_call(fn, bindings)
    orig_has_dec = any(not _is_jit_decorator(d) for d in orig_fn.decorator_list)
    _check_grid_contract(fn, call, orig_fn, orig_has_dec)

    for body_fn in cand.jit_functions:
        if body_fn is not fn and _heuristics_call(body_fn, bindings) is not None:
            raise _Reject("decorator", f"helper '{body_fn.name}' must be a plain @triton.jit function")
        scope = _Scope(
            locals=_locals_of(body_fn),
            bindings=bindings,
            constants=set(cand.constants),
            functions=set(names),
            allow_inline_asm=allow_inline_asm,
            modules=cand.module_names,
        )
        _check_body(body_fn, scope)


def _hardcoded_blocks(original: TritonKernel) -> dict[str, int]:
    """Block sizes a kernel fixes in its body (persistent reductions: ``R0_BLOCK: tl.constexpr = 128``)."""
    try:
        fn = find_jit_function(ast.parse(original.source))
    except (SyntaxError, KernelSourceError):
        return {}
    found: dict[str, int] = {}
    for stmt in fn.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
                for t in targets:
                    if isinstance(t, ast.Name) and t.id in BLOCK_CONSTEXPRS:
                        found[t.id] = value.value
    return found


def check_config(original: TritonKernel, config: LaunchConfig, limits: DeviceLimits | None = None) -> GateResult:
    """Gate 1 on a launch config: can it be a valid launch of ``original`` on this device?

    Only constexprs the launcher passes (signature ``'constexpr'``) may be set; a persistent
    reduction fixes ``R0_BLOCK`` in its body, so setting it there would be ignored or clash.
    """
    limits = limits or DeviceLimits.from_current_device()
    try:
        tile = _check_config(original, config, limits)
    except _Reject as exc:
        return _fail(exc)
    return GateResult.ok(GATE, "launch config passed static checks", tile=tile)


def _wrapper_constants(original: TritonKernel) -> set[str]:
    """Constexpr parameters the wrapper passes itself (``triton_meta['constants']``, e.g. an
    ``xnumel`` of 1): a launch config must not set them too."""
    try:
        dec = read_decorator(original.source)
    except (SyntaxError, KernelSourceError):
        return set()
    constants = dec.triton_meta.get("constants") if dec else None
    return {str(k) for k in constants} if isinstance(constants, dict) else set()


def _check_config(original: TritonKernel, config: LaunchConfig, limits: DeviceLimits) -> int:
    fixed = _wrapper_constants(original)
    constexprs = [c for c in original.constexprs if c not in fixed]
    for key, value in config.kwargs.items():
        if key in fixed:
            raise _Reject("config-key", f"{key} is a constant the wrapper passes to {original.name} "
                                        "(triton_meta constants), not a launch-config knob")
        if key not in constexprs:
            hint = ""
            if key in BLOCK_CONSTEXPRS and original.kind == "persistent_reduction":
                hint = f"; a persistent reduction fixes {key} in its body"
            raise _Reject("config-key", f"{key} is not a constexpr parameter of {original.name} "
                                        f"(its constexprs: {constexprs or 'none'}){hint}")
        if not is_power_of_two(value):
            raise _Reject("config-value", f"{key}={value!r} is not a positive power of two")
    missing = [c for c in constexprs if c in BLOCK_CONSTEXPRS and c not in config.kwargs]
    if missing:
        raise _Reject("config-missing", f"block size(s) {missing} of {original.name} must be given")
    warps = config.num_warps
    if not is_power_of_two(warps):
        raise _Reject("num_warps", f"num_warps={warps!r} is not a power of two")
    if warps * limits.warp_size > limits.max_threads_per_block:
        raise _Reject("num_warps", f"num_warps={warps} x warp size {limits.warp_size} = {warps * limits.warp_size} "
                                   f"threads exceeds the device's {limits.max_threads_per_block} per block")
    stages = config.num_stages
    if not (isinstance(stages, int) and not isinstance(stages, bool) and 1 <= stages <= 8):
        raise _Reject("num_stages", f"num_stages={stages!r} must be between 1 and 8")
    blocks = {k: v for k, v in config.kwargs.items() if k in BLOCK_CONSTEXPRS}
    for name, value in _hardcoded_blocks(original).items():
        blocks.setdefault(name, value)
    tile = 1
    for value in blocks.values():
        tile *= value
    if tile > MAX_TILE_NUMEL:
        shown = " x ".join(f"{k}={v}" for k, v in sorted(blocks.items()))
        raise _Reject("tile-size", f"tile {shown} = {tile} elements exceeds Triton's limit of {MAX_TILE_NUMEL}")
    return tile
