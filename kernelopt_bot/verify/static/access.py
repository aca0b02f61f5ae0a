"""Gate 1, write/read discipline: a candidate touches memory the way the original does.

Read from the original's AST: which pointer parameters it stores into (``tl.store`` / atomics)
and which it loads from. A candidate may store only into the former and load only from the
latter. That rejects, before anything runs:

* an input used as scratch and restored afterwards (other programs read it in between: on an
  H200 the pattern corrupted hundreds of millions of elements);
* an output read before it is written (a kernel that is right only when it finds the verifier's
  prefill), since the original never loads from a pure output.

Every address must derive from exactly one pointer parameter (``param + <offset>``, possibly
through locals, ``tl.make_block_ptr`` or casts): an address mixing two pointer parameters, or
one that derives from none, is rejected, so provenance cannot be laundered. The dynamic half
(per-program write sets recorded in the interpreter) lives in gate 2.
"""

from __future__ import annotations

import ast

from kernelopt_bot.verify.static import allowlist as allowed
from kernelopt_bot.verify.static.common import Reject, describe
from kernelopt_bot.verify.static.module import canonical_path


def pointer_params(signature: dict[str, str], params: list[str]) -> set[str]:
    """Parameters whose Triton signature type is a pointer (``'*fp32'``)."""
    return {p for p in params if str(signature.get(p, "")).startswith("*")}


class Provenance:
    """Which pointer parameters each expression of one function may point into."""

    def __init__(self, fn: ast.FunctionDef, pointers: set[str], paths: dict[str, str]) -> None:
        self.paths = paths
        self.env: dict[str, set[str]] = {p: {p} for p in pointers}
        assigns: list[tuple[list[str], ast.expr]] = []
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                assigns.append((names, node.value))
        for _ in range(len(assigns) + 1):  # fixpoint: roots flow through chains of locals
            changed = False
            for names, value in assigns:
                roots = self.roots(value)
                for name in names:
                    if not roots <= self.env.get(name, set()):
                        self.env[name] = self.env.get(name, set()) | roots
                        changed = True
            if not changed:
                break

    def path(self, func: ast.expr) -> str | None:
        attrs: list[str] = []
        while isinstance(func, ast.Attribute):
            attrs.append(func.attr)
            func = func.value
        if isinstance(func, ast.Name) and func.id in self.paths:
            return canonical_path(".".join([self.paths[func.id], *reversed(attrs)]))
        return None

    def roots(self, node: ast.AST) -> set[str]:
        """Pointer parameters ``node`` may point into (an over-approximation: any pointer that
        flows into it, except through the value a load or atomic returns)."""
        if isinstance(node, ast.Name):
            return set(self.env.get(node.id, set()))
        if isinstance(node, ast.Call) and self.path(node.func) in allowed.LOAD_CALLS | allowed.WRITE_CALLS:
            return set()
        out: set[str] = set()
        for child in ast.iter_child_nodes(node):
            out |= self.roots(child)
        return out


def _address(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((kw.value for kw in call.keywords if kw.arg == "pointer"), None)


def memory_use(fn: ast.FunctionDef, pointers: set[str], paths: dict[str, str]) -> tuple[set[str], set[str]]:
    """(pointer params stored into, pointer params loaded from) by a trusted function."""
    prov = Provenance(fn, pointers, paths)
    writes: set[str] = set()
    reads: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            path = prov.path(node.func)
            address = _address(node)
            if address is None:
                continue
            if path in allowed.WRITE_CALLS:
                writes |= prov.roots(address)
            elif path in allowed.LOAD_CALLS:
                reads |= prov.roots(address)
    return writes, reads


def check_access(fn: ast.FunctionDef, pointers: set[str], paths: dict[str, str], helpers: set[str],
                 orig_writes: set[str], orig_reads: set[str]) -> None:
    """Every load and store of the candidate kernel against the original's."""
    prov = Provenance(fn, pointers, paths)
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in helpers:
            for arg in [*node.args, *(kw.value for kw in node.keywords)]:
                if prov.roots(arg):
                    raise Reject("memory-access", f"'{describe(node)}' passes a pointer to a helper function; only "
                                                  "the kernel itself loads and stores")
            continue
        path = prov.path(node.func)
        is_write = path in allowed.WRITE_CALLS
        if not is_write and path not in allowed.LOAD_CALLS:
            continue
        address = _address(node)
        roots = prov.roots(address) if address is not None else set()
        what = "store" if path == "tl.store" else ("load" if not is_write else path)
        if not roots:
            raise Reject("memory-access", f"'{describe(node)}': the {what} address does not derive from a pointer "
                                          "parameter")
        if len(roots) > 1:
            raise Reject("memory-access", f"'{describe(node)}': the {what} address mixes pointer parameters "
                                          f"{sorted(roots)}; an address is one parameter plus an offset")
        (root,) = roots
        if is_write and root not in orig_writes:
            raise Reject("memory-access", f"'{describe(node)}' writes into '{root}', which the original kernel never "
                                          f"writes (it writes only {sorted(orig_writes) or 'nothing'}); inputs are "
                                          "read-only, even as scratch that is restored")
        if not is_write and root not in orig_reads:
            raise Reject("memory-access", f"'{describe(node)}' loads from '{root}', which the original kernel never "
                                          "reads; an output's contents before the kernel writes it are the "
                                          "verifier's prefill, not data")


def check_helper_has_no_memory_access(fn: ast.FunctionDef, paths: dict[str, str]) -> None:
    """Helper @triton.jit functions (combine functions) compute; they do not touch memory."""
    prov = Provenance(fn, set(), paths)
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and prov.path(node.func) in allowed.LOAD_CALLS | allowed.WRITE_CALLS:
            raise Reject("memory-access", f"helper '{fn.name}' calls '{describe(node.func)}'; only the kernel loads "
                                          "and stores")
