"""Gate 1 on a candidate kernel source: may it stand in for the original at all?

A kernel search is an optimizer pointed at the harness (VERIFY.md), so this gate does not ask
"does this look like a kernel?" but "can this text do anything other than be the original's
kernel, rewritten?". Everything here reads the candidate with :mod:`ast`; nothing is imported,
executed or compiled, so a hostile candidate cannot act while it is being judged. The rules, in
the order they run: caps (caps.py), the module contract (module.py), the kernel body allowlist
(body.py, allowlist.py), the write/read discipline (access.py).

Each failure names its rule first (``"imports: ..."``) and the rule is also in
``GateResult.numbers["rule"]`` so the red-team suite can assert which rule fired.
"""

from __future__ import annotations

import ast

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.pack.keys import KernelSourceError, find_jit_function
from kernelopt_bot.verify.static.access import (
    check_access,
    check_helper_has_no_memory_access,
    memory_use,
    pointer_params,
)
from kernelopt_bot.verify.static.body import BodyChecker, BodyScope, call_paths
from kernelopt_bot.verify.static.caps import check_node_count, check_source_size
from kernelopt_bot.verify.static.common import GATE, Reject, fail, is_constexpr_annotation, is_jit_decorator
from kernelopt_bot.verify.static.module import (
    Module,
    check_grid_contract,
    check_parameters,
    heuristics_call,
    import_allowed,
    imports_of,
    is_driver_call,
    read_module,
)
from kernelopt_bot.verify.verdict import GateResult


def _original_module(original: TritonKernel) -> tuple[Module, ast.FunctionDef]:
    tree = ast.parse(original.source)
    mod = _read_module_lenient(tree)
    return mod, find_jit_function(tree)


def _read_module_lenient(tree: ast.Module) -> Module:
    """The original is trusted: record its imports, driver calls and jit functions only."""
    mod = Module(tree)
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            mod.imports.extend(imports_of(stmt))
        elif isinstance(stmt, ast.FunctionDef) and any(map(is_jit_decorator, stmt.decorator_list)):
            mod.jit_functions.append(stmt)
        elif is_driver_call(stmt):
            mod.driver_calls.append(ast.unparse(stmt))
    return mod


def check_source(original: TritonKernel, candidate: str, *, allow_inline_asm: bool = False) -> GateResult:
    """Gate 1 on a candidate kernel source: may it stand in for ``original`` at all?

    Passing says nothing about correctness or speed (gates 2-4); failing means the text is not a
    like-for-like kernel module, or could act outside the kernel.
    """
    try:
        check_source_size(candidate)
    except Reject as exc:
        return fail(exc)
    lines = len(candidate.splitlines())
    try:
        orig_mod, orig_fn = _original_module(original)
    except (SyntaxError, KernelSourceError) as exc:
        return GateResult.not_run(GATE, f"original kernel {original.name} cannot be read: {exc}")
    try:
        try:
            tree = ast.parse(candidate)
        except SyntaxError as exc:
            raise Reject("syntax", f"candidate does not parse: line {exc.lineno}: {exc.msg}") from None
        except (MemoryError, RecursionError) as exc:
            raise Reject("syntax", f"candidate is too deeply nested to parse ({type(exc).__name__})") from None
        check_node_count(tree)
        _check_source_tree(tree, original, orig_mod, orig_fn, allow_inline_asm)
    except Reject as exc:
        return fail(exc, lines)
    except Exception as exc:  # noqa: BLE001 - hostile input must be a rejection, never a crash of the tool
        return fail(Reject("internal", f"candidate could not be checked ({type(exc).__name__}: {exc})"), lines)
    return GateResult.ok(GATE, "passed static checks", lines=lines)


def _check_source_tree(tree: ast.Module, original: TritonKernel, orig_mod: Module, orig_fn: ast.FunctionDef,
                       allow_inline_asm: bool) -> None:
    # Imports first: an unknown import is the clearest sign of host code.
    orig_specs = {imp.spec for imp in orig_mod.imports}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for imp in imports_of(stmt):
                if not import_allowed(imp):
                    raise Reject("imports", f"'{imp.text}' is not allowed; a kernel may import only triton, "
                                             "triton.language and the Inductor runtime helpers (no torch, os, "
                                             "sys or other host modules)")
                if imp.spec not in orig_specs:
                    raise Reject("imports", f"'{imp.text}' is not imported by the original kernel")
    cand = read_module(tree, set(orig_mod.driver_calls))
    bindings = cand.bindings

    # Exactly one kernel, with the original's name; extra jit functions only where the original
    # has the same helper (Inductor emits combine-function helpers for some scans).
    want = orig_fn.name
    helpers = {f.name for f in orig_mod.jit_functions if f.name != want}
    names = [f.name for f in cand.jit_functions]
    kernels = [f for f in cand.jit_functions if f.name == want]
    if not cand.jit_functions:
        raise Reject("single-kernel", f"no @triton.jit function; expected one named '{want}'")
    if not kernels:
        raise Reject("single-kernel", f"the @triton.jit function must be named '{want}' (the original's name), "
                                       f"found {names}")
    if len(kernels) > 1:
        raise Reject("single-kernel", f"'{want}' is defined {len(kernels)} times")
    strays = [n for n in names if n != want and n not in helpers]
    if strays:
        raise Reject("single-kernel", f"{len(names)} @triton.jit functions {names}; a candidate defines exactly "
                                       f"one kernel '{want}' (extra: {strays})")
    fn = kernels[0]

    check_parameters(fn, orig_fn, bindings, orig_mod.bindings)
    call = heuristics_call(fn, bindings)
    orig_has_dec = any(not is_jit_decorator(d) for d in orig_fn.decorator_list)
    check_grid_contract(fn, call, orig_fn, orig_has_dec)

    params = [arg.arg for arg in orig_fn.args.args]
    pointers = pointer_params(original.signature, params)
    orig_writes, orig_reads = memory_use(orig_fn, pointers, orig_mod.paths)
    original_paths = call_paths(orig_fn, orig_mod.paths)
    for body_fn in cand.jit_functions:
        if body_fn is not fn and heuristics_call(body_fn, bindings) is not None:
            raise Reject("decorator", f"helper '{body_fn.name}' must be a plain @triton.jit function")
        scope = BodyScope(
            params=[arg.arg for arg in body_fn.args.args],
            pointer_params=pointers if body_fn is fn else set(),
            constexpr_params={arg.arg for arg in body_fn.args.args if is_constexpr_annotation(arg.annotation, bindings)},
            paths=cand.paths,
            kinds=bindings,
            constants=cand.constants,
            helpers=set(names),
            original_paths=original_paths,
            allow_inline_asm=allow_inline_asm,
        )
        BodyChecker(body_fn, scope).check()
        if body_fn is fn:
            check_access(fn, pointers, cand.paths, set(names), orig_writes, orig_reads)
        else:
            check_helper_has_no_memory_access(body_fn, cand.paths)


