"""Gate 1, module contract: imports, module-level statements, the kernel's parameters and its
heuristics decorator.

* **One kernel, same name, same parameters in the same order.** The re-stitched wrapper launches
  the kernel by name with positional arguments (``k.run(buf0, buf1, 512, ...)``); any change to
  the name, order or constexpr-ness of a parameter silently rebinds arguments.
* **Imports: only what the original imports, from a fixed allowed set.** A kernel module is
  executed on the host when it is loaded; an extra import is the first step of every host-side
  trick (timer patching, caching, reading the reference's output from disk).
* **Module level: imports, the kernel, the original's ``set_driver_to_*()`` call, numeric
  constants.** Anything else runs on the host at load time or keeps state between calls (a
  result cache keyed on a pointer is the classic cheat).
* **The heuristics decorator keeps the grid contract.** ``grid_type`` decides how the launcher
  computes the grid from the block constexprs and ``mutated_arg_names`` tells Inductor which
  buffers the kernel writes; changing either changes what the wrapper does around the kernel.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.pack.keys import read_decorator
from kernelopt_bot.verify.static.allowlist import BUILTINS
from kernelopt_bot.verify.static.common import (
    Reject,
    describe,
    is_constexpr_annotation,
    is_jit_decorator,
    is_power_of_two,
    literal_value,
)

ALLOWED_HEURISTICS = frozenset({
    "pointwise",
    "reduction",
    "persistent_reduction",
    "template",
    "split_scan",
    "cooperative_reduction",
    "foreach",
})

# ``import X [as Y]`` may only name these modules (or a triton.language.extra submodule).
_IMPORTABLE_MODULES = frozenset({"triton", "triton.language"})
# ``from M import names``: M -> the names it may give (None: any public name).
_FROM_IMPORTS: dict[str, frozenset[str] | None] = {
    "triton": frozenset({"language", "cdiv", "jit"}),
    "triton.language": None,
    "torch._inductor.runtime": frozenset({"triton_helpers", "triton_heuristics"}),
    "torch._inductor.runtime.triton_helpers": frozenset({"libdevice", "math"}),
    "torch._inductor.runtime.hints": None,
    "triton.language.extra": frozenset({"libdevice", "cuda", "hip"}),
    "triton.language.extra.cuda": frozenset({"libdevice"}),
    "triton.language.extra.hip": frozenset({"libdevice"}),
}
_IMPORTABLE_EXTRA = frozenset({"triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
                               "triton.language.extra.hip.libdevice"})
_DRIVER_CALLS = frozenset({"set_driver_to_gpu", "set_driver_to_cpu"})
_DECORATOR_CALLS = frozenset({"set", "frozenset"})
# inductor_meta entries a rewrite may change: counts that describe the body, not host behaviour.
_INFORMATIONAL_META = frozenset({"num_load", "num_store", "num_reduction", "atomic_add_found",
                                 "tiling_scores", "mutated_arg_names"})

# --------------------------------------------------------------------------------------------
# Imports


@dataclass(frozen=True)
class Import:
    """One name bound by an import statement."""

    bound: str
    origin: str  # dotted path of what the name refers to
    spec: tuple[str | None, ...]  # comparable form of the statement part that binds it
    text: str


def imports_of(stmt: ast.Import | ast.ImportFrom) -> list[Import]:
    out: list[Import] = []
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            bound = alias.asname or alias.name.split(".")[0]
            origin = alias.name if alias.asname else alias.name.split(".")[0]
            text = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
            out.append(Import(bound, origin, ("import", alias.name, alias.asname), text))
        return out
    module = "." * stmt.level + (stmt.module or "")
    for alias in stmt.names:
        text = f"from {module} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
        out.append(Import(alias.asname or alias.name, f"{module}.{alias.name}",
                           ("from", module, alias.name, alias.asname), text))
    return out


def import_allowed(imp: Import) -> bool:
    if imp.spec[0] == "import":
        module = str(imp.spec[1])
        return module in _IMPORTABLE_MODULES or module in _IMPORTABLE_EXTRA
    module, name = str(imp.spec[1]), str(imp.spec[2])
    if name == "*" or name.startswith("_"):
        return False
    names = _FROM_IMPORTS.get(module, frozenset())
    return names is None or name in names


def _kind_of(origin: str) -> str:
    """Where an imported name may be used: in the kernel body, or only in decorators."""
    if origin == "triton":
        return "triton"
    if origin == "triton.jit":
        return "jit"
    if origin == "torch._inductor.runtime.triton_heuristics":
        return "heuristics"
    if origin.startswith("torch._inductor.runtime.hints."):
        return "hints"
    path = canonical_path(origin)
    if path is None:
        return "other"
    return "tl" if path == "tl" or path.startswith("tl.") else "device"


# Prefixes that name the same device namespace; longest first.
_CANONICAL_PREFIXES = (
    ("torch._inductor.runtime.triton_helpers.libdevice", "libdevice"),
    ("torch._inductor.runtime.triton_helpers.math", "math"),
    ("torch._inductor.runtime.triton_helpers", "triton_helpers"),
    ("triton.language.extra.cuda.libdevice", "libdevice"),
    ("triton.language.extra.hip.libdevice", "libdevice"),
    ("triton.language.extra.libdevice", "libdevice"),
    ("triton.language.math", "math"),
    ("triton.language", "tl"),
    ("tl.extra.cuda.libdevice", "libdevice"),
    ("tl.extra.hip.libdevice", "libdevice"),
    ("tl.extra.libdevice", "libdevice"),
    ("tl.math", "math"),
    ("triton", "triton"),
)


def canonical_path(path: str) -> str | None:
    """One spelling per device namespace: ``triton.language.math.exp`` and ``tl_math.exp`` are
    both ``math.exp``; ``tl.extra.cuda.libdevice.exp`` is ``libdevice.exp``. ``None`` for a path
    outside triton and the Inductor runtime."""
    for _ in range(3):  # ``triton.language.extra.cuda.libdevice`` -> ``tl.extra...`` -> ``libdevice``
        for prefix, canon in _CANONICAL_PREFIXES:
            if path == prefix or path.startswith(prefix + "."):
                new = canon + path[len(prefix):]
                if new == path:
                    return path
                path = new
                break
        else:
            return path if path.split(".")[0] in ("tl", "math", "libdevice", "triton_helpers", "triton") else None
    return path


# --------------------------------------------------------------------------------------------
# Module structure


@dataclass
class Module:
    """What a kernel module defines, as the rules need it."""

    tree: ast.Module
    imports: list[Import] = field(default_factory=list)
    jit_functions: list[ast.FunctionDef] = field(default_factory=list)
    constants: dict[str, Any] = field(default_factory=dict)
    driver_calls: list[str] = field(default_factory=list)

    @property
    def bindings(self) -> dict[str, str]:
        return {imp.bound: _kind_of(imp.origin) for imp in self.imports}

    @property
    def paths(self) -> dict[str, str]:
        """Bound name -> its canonical device path (``tl``, ``libdevice``, ``tl.constexpr`` ...),
        for the names a kernel body may start a dotted path with."""
        out = {}
        for imp in self.imports:
            path = canonical_path(imp.origin)
            if path is not None and _kind_of(imp.origin) in ("tl", "triton", "device"):
                out[imp.bound] = path
        return out




def is_driver_call(stmt: ast.stmt) -> bool:
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








def read_module(tree: ast.Module, original_driver_calls: set[str]) -> Module:
    """Sort the candidate's top-level statements; reject anything that is host code or state.

    ``original_driver_calls`` are the ``triton_helpers.set_driver_to_*()`` statements of the
    original: the only module-level calls a candidate may repeat (they pick the runtime driver).
    """
    mod = Module(tree)
    for imp_stmt in (s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))):
        mod.imports.extend(imports_of(imp_stmt))
    bindings = mod.bindings
    jit_names = {
        s.name for s in tree.body if isinstance(s, ast.FunctionDef) and any(map(is_jit_decorator, s.decorator_list))
    }
    reserved = jit_names | BUILTINS
    for index, stmt in enumerate(tree.body):
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.FunctionDef):
            if any(map(is_jit_decorator, stmt.decorator_list)):
                mod.jit_functions.append(stmt)
                continue
            raise Reject("module-level", f"helper function '{stmt.name}' at module level is host code; "
                                          "only the @triton.jit kernel may be defined")
        if isinstance(stmt, (ast.AsyncFunctionDef, ast.ClassDef)):
            raise Reject("module-level", f"'{describe(stmt)}' at module level is host code")
        if isinstance(stmt, (ast.Global, ast.Nonlocal)):
            raise Reject("module-level", f"'{describe(stmt)}' statement: module-level state is not allowed")
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(
            stmt.value.value, str
        ):
            if index == 0:
                continue  # module docstring
            raise Reject("module-level", "bare string expression at module level")
        if is_driver_call(stmt):
            text = ast.unparse(stmt)
            if text not in original_driver_calls:
                raise Reject("module-level", f"'{text}' is not in the original kernel module")
            mod.driver_calls.append(text)
            continue
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            name, value = _read_constant(stmt, bindings, reserved)
            mod.constants[name] = value
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            raise Reject("module-level", f"call '{describe(stmt)}' at module level is host code")
        raise Reject("module-level", f"'{describe(stmt)}' ({type(stmt).__name__}) at module level is host "
                                      "code or module-level state")
    return mod


def _read_constant(stmt: ast.Assign | ast.AnnAssign, bindings: dict[str, str],
                   reserved: frozenset[str] | set[str]) -> tuple[str, Any]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        raise Reject("module-level", f"'{describe(stmt)}': only 'NAME = <literal>' constants are allowed")
    name = targets[0].id
    if name.startswith("__") or name in bindings or name in reserved:
        raise Reject("module-level", f"'{describe(stmt)}' rebinds '{name}' (a dunder, an import, a builtin "
                                      "or the kernel)")
    if isinstance(stmt, ast.AnnAssign):
        ann = stmt.annotation
        if not (is_constexpr_annotation(ann, bindings)
                or (isinstance(ann, ast.Name) and ann.id in ("int", "float", "str", "bool"))):
            raise Reject("module-level", f"annotation '{ast.unparse(ann)}' on '{name}' is host code")
    value_node = stmt.value
    if value_node is None:
        raise Reject("module-level", f"'{name}' is declared without a value")
    if isinstance(value_node, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        raise Reject("module-level", f"'{describe(stmt)}' is mutable module-level state (a cache "
                                      "survives between calls)")
    ok, value = literal_value(value_node, bindings)
    if not ok:
        raise Reject("module-level", f"'{describe(stmt)}': module-level constants must be int/float/str "
                                      "literals or tl.constexpr(<literal>); anything else is host code")
    if "BLOCK" in name.upper() and isinstance(value, int) and not isinstance(value, bool) and not is_power_of_two(value):
        raise Reject("block-size", f"module constant {name} = {value} is not a power of two")
    return name, value


# --------------------------------------------------------------------------------------------
# The kernel function: parameters, decorators, body


def check_parameters(fn: ast.FunctionDef, orig_fn: ast.FunctionDef, cand_bindings: dict[str, str],
                      orig_bindings: dict[str, str]) -> None:
    args = fn.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults or args.kw_defaults:
        raise Reject("parameters", "only plain positional parameters without defaults are allowed "
                                    "(no /, *args, keyword-only, **kwargs or default values)")
    if fn.returns is not None:
        raise Reject("parameters", f"return annotation '{ast.unparse(fn.returns)}' is not allowed")
    got = [a.arg for a in args.args]
    want = [a.arg for a in orig_fn.args.args]
    if got != want:
        extra = [p for p in got if p not in want]
        missing = [p for p in want if p not in got]
        if extra:
            raise Reject("parameters", f"extra parameter(s) {extra}; the kernel must take exactly the "
                                        f"original's parameters {want}")
        if missing:
            raise Reject("parameters", f"missing parameter(s) {missing}; expected {want}")
        raise Reject("parameters", f"parameter order changed: expected {want}, got {got}")
    orig_ann = {a.arg: a.annotation for a in orig_fn.args.args}
    for arg in args.args:
        cand_const = is_constexpr_annotation(arg.annotation, cand_bindings)
        orig_const = is_constexpr_annotation(orig_ann[arg.arg], orig_bindings)
        if arg.annotation is not None and not cand_const:
            raise Reject("parameters", f"annotation '{ast.unparse(arg.annotation)}' on '{arg.arg}' is not "
                                        "allowed (only tl.constexpr)")
        if cand_const != orig_const:
            state = "must be" if orig_const else "must not be"
            raise Reject("parameters", f"'{arg.arg}' {state} annotated tl.constexpr, as in the original")


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
            raise Reject("decorator", "'**' arguments in the heuristics decorator are not allowed")
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
            raise Reject("decorator", f"'{describe(sub)}' in the heuristics decorator would run host code "
                                       "at load time; only literals and Inductor hint values are allowed")


def heuristics_call(fn: ast.FunctionDef, bindings: dict[str, str]) -> ast.Call | None:
    """Check the decorator list shape and return the heuristics call, if any."""
    decs = fn.decorator_list
    jits = [d for d in decs if is_jit_decorator(d)]
    if len(jits) != 1:
        raise Reject("decorator", f"'{fn.name}' must carry exactly one @triton.jit")
    jit = jits[0]
    bare_jit = (
        isinstance(jit, ast.Attribute) and isinstance(jit.value, ast.Name) and bindings.get(jit.value.id) == "triton"
    ) or (isinstance(jit, ast.Name) and bindings.get(jit.id) == "jit")
    if not bare_jit:
        raise Reject("decorator", f"'@{ast.unparse(jit)}' is not a plain @triton.jit")
    if decs[-1] is not jit:
        raise Reject("decorator", "@triton.jit must be the innermost decorator")
    others = decs[:-1]
    if not others:
        return None
    if len(others) > 1:
        raise Reject("decorator", f"'{fn.name}' has {len(others)} decorators besides @triton.jit; at most the "
                                   "one heuristics decorator is allowed")
    dec = others[0]
    if not (
        isinstance(dec, ast.Call)
        and isinstance(dec.func, ast.Attribute)
        and isinstance(dec.func.value, ast.Name)
        and bindings.get(dec.func.value.id) == "heuristics"
    ):
        raise Reject("decorator", f"'@{describe(dec)}' is not a triton_heuristics decorator")
    if dec.func.attr not in ALLOWED_HEURISTICS:
        raise Reject("decorator", f"triton_heuristics.{dec.func.attr} is not an allowed heuristic "
                                   f"({', '.join(sorted(ALLOWED_HEURISTICS))})")
    _check_decorator_args(dec, bindings)
    return dec


def check_grid_contract(cand_fn: ast.FunctionDef, cand_call: ast.Call | None, orig_fn: ast.FunctionDef,
                         orig_has_decorator: bool) -> None:
    """The decorator must keep the original's heuristic, grid type, mutated args and signature."""
    orig = read_decorator(ast.Module(body=[orig_fn], type_ignores=[])) if orig_has_decorator else None
    if cand_call is None:
        if orig is not None:
            raise Reject("decorator", f"the original's @triton_heuristics.{orig.heuristic} decorator is missing "
                                       "(the wrapper launches the kernel through it)")
        return
    if orig is None:
        raise Reject("decorator", "the original has no heuristics decorator; the candidate must not add one")
    cand = read_decorator(ast.Module(body=[cand_fn], type_ignores=[]))
    assert cand is not None
    if cand.heuristic != orig.heuristic:
        raise Reject("decorator", f"heuristic changed from {orig.heuristic} to {cand.heuristic}; the launch "
                                   "configs and grid are built by it")
    # The launcher acts on its keyword arguments on the host: ``filename`` names where the
    # autotune cache (``<stem>.best_config``) is written and inductor_meta switches caches,
    # profiling output files and remote caches on. So they are the original's, except counters.
    filename = next((kw.value for kw in cand_call.keywords if kw.arg == "filename"), None)
    if filename is not None and not (isinstance(filename, ast.Name) and filename.id == "__file__"):
        raise Reject("decorator", f"filename={ast.unparse(filename)[:60]}: the launcher writes its autotune cache "
                                   "next to it; only filename=__file__ is allowed")
    if set(cand.inductor_meta) != set(orig.inductor_meta):
        changed = sorted(set(cand.inductor_meta) ^ set(orig.inductor_meta))[:5]
        raise Reject("decorator", f"inductor_meta keys differ from the original's ({changed}); they switch caches, "
                                   "profiling and output files on the host")
    for key, value in cand.inductor_meta.items():
        if key not in _INFORMATIONAL_META and value != orig.inductor_meta[key]:
            raise Reject("decorator", f"inductor_meta['{key}'] changed from {orig.inductor_meta[key]!r} to "
                                       f"{value!r}; only {sorted(_INFORMATIONAL_META)} may differ")
    for key in ("grid_type", "mutated_arg_names"):
        want, got = orig.inductor_meta.get(key), cand.inductor_meta.get(key)
        if key == "mutated_arg_names":
            want = sorted(map(str, want)) if isinstance(want, list) else want
            got = sorted(map(str, got)) if isinstance(got, list) else got
        if want != got:
            what = "which arguments are mutated is a semantic change" if key == "mutated_arg_names" else (
                "the launcher computes the grid from it")
            raise Reject("decorator", f"inductor_meta['{key}'] changed from {want!r} to {got!r}; {what}")
    for key, why in (("signature", "argument types and constexprs are part of the contract"),
                     ("constants", "arguments specialized to constants are part of the contract"),
                     ("configs", "divisibility specialization is a promise about the inputs, not the kernel")):
        if cand.triton_meta.get(key) != orig.triton_meta.get(key):
            raise Reject("decorator", f"triton_meta['{key}'] differs from the original's ({why})")
    want_hints, got_hints = orig.size_hints, cand.size_hints
    if isinstance(want_hints, dict):
        if not isinstance(got_hints, dict) or set(got_hints) != set(want_hints):
            raise Reject("decorator", f"size_hints must be a dict with keys {sorted(want_hints)}, got {got_hints!r}")
        values = list(got_hints.values())
    elif isinstance(want_hints, list):
        if not isinstance(got_hints, list) or len(got_hints) != len(want_hints):
            raise Reject("decorator", f"size_hints must be a list of {len(want_hints)} ints, got {got_hints!r}")
        values = list(got_hints)
    else:
        values = []
    if any(not (isinstance(v, int) and not isinstance(v, bool) and v > 0) for v in values):
        raise Reject("decorator", f"size_hints values must be positive ints, got {got_hints!r}")

