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
        # Fixpoint by worklist: an assignment is re-read only when a name it mentions gained a
        # root. Each name gains at most len(pointers) roots, so this is linear in the body (a
        # sweep-until-stable loop is quadratic: 6,000 chained locals took minutes).
        users: dict[str, list[int]] = {}
        for index, (_, value) in enumerate(assigns):
            for sub in ast.walk(value):
                if isinstance(sub, ast.Name):
                    users.setdefault(sub.id, []).append(index)
        pending = list(range(len(assigns)))
        queued = set(pending)
        while pending:
            index = pending.pop()
            queued.discard(index)
            names, value = assigns[index]
            roots = self.roots(value)
            for name in names:
                if not roots <= self.env.get(name, set()):
                    self.env[name] = self.env.get(name, set()) | roots
                    for user in users.get(name, []):
                        if user not in queued:
                            queued.add(user)
                            pending.append(user)

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
    check_pointer_uses(fn, prov)


# Calls a pointer passes through and stays a pointer (argument index that carries it).
_POINTER_THROUGH = {"tl.make_block_ptr": 0, "tl.advance": 0, "tl.broadcast_to": 0, "tl.reshape": 0, "tl.view": 0,
                    "tl.expand_dims": 0, "tl.multiple_of": 0, "tl.max_contiguous": 0, "tl.max_constancy": 0}
_POINTER_METHODS = frozenset({"advance", "broadcast_to", "reshape", "view", "expand_dims"})


def _parents(fn: ast.FunctionDef) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}


def _is_pointer_type(node: ast.expr | None, prov: Provenance) -> bool:
    return isinstance(node, ast.Call) and prov.path(node.func) == "tl.pointer_type"


def check_pointer_uses(fn: ast.FunctionDef, prov: Provenance) -> None:
    """A pointer is only ever an address: ``param + offset`` on its way into a load, a store or
    a local. Provenance follows values, not information: a pointer turned into an integer
    (``.to(tl.int64)``, ``ptr - ptr``, a comparison, an ``if`` on it, the ``other=`` or value of a
    load/store/atomic) comes back as an offset with no pointer root, and ``out_ptr0 + (that -
    out_ptr0 as int)`` then writes into any buffer while deriving from ``out_ptr0`` alone.
    So every use of a pointer-valued expression must stay in pointer position."""
    parents = _parents(fn)
    for name in ast.walk(fn):
        if not (isinstance(name, ast.Name) and isinstance(name.ctx, ast.Load) and prov.roots(name)):
            continue
        node: ast.AST = name
        while True:
            parent = parents.get(node)
            if parent is None or _pointer_sink(node, parent, prov):
                break
            if not _pointer_carried(node, parent, prov):
                raise Reject("memory-access", f"pointer '{name.id}' used as a value in '{describe(parent)}'; a "
                                              "pointer may only be offset (+/- a non-pointer) and used as an "
                                              "address (no casts to integers, comparisons, pointer differences, "
                                              "or pointers inside values, masks or conditions)")
            node = parent


def _pointer_sink(node: ast.AST, parent: ast.AST, prov: Provenance) -> bool:
    """``node`` (pointer-valued) ends here correctly: as an address, or assigned to a local."""
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and parent.value is node:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return all(isinstance(t, ast.Name) for t in targets)
    if isinstance(parent, ast.Call) and prov.path(parent.func) in allowed.LOAD_CALLS | allowed.WRITE_CALLS:
        return _address(parent) is node
    return isinstance(parent, ast.Attribute) and parent.value is node and parent.attr == "dtype"


def _pointer_carried(node: ast.AST, parent: ast.AST, prov: Provenance) -> bool:
    """``parent`` is still a pointer made from ``node`` (and no other pointer leaks into it)."""
    if isinstance(parent, ast.BinOp):
        if isinstance(parent.op, ast.Add):
            other = parent.right if parent.left is node else parent.left
            return not prov.roots(other)
        return isinstance(parent.op, ast.Sub) and parent.left is node and not prov.roots(parent.right)
    if isinstance(parent, ast.Subscript):
        return parent.value is node and not prov.roots(parent.slice)
    if isinstance(parent, ast.IfExp):
        return parent.test is not node
    if isinstance(parent, ast.Attribute):  # a method call on the pointer: ``p.to(...)`` / ``p.advance(...)``
        return parent.value is node and parent.attr in (_POINTER_METHODS | {"to"})
    if not isinstance(parent, ast.Call):
        return False
    rest = [a for a in [*parent.args, *(kw.value for kw in parent.keywords)] if a is not node]
    func = parent.func
    if isinstance(func, ast.Attribute) and func is node:  # ``p.to(tl.pointer_type(...))``
        if func.attr == "to":
            dtype = parent.args[0] if parent.args else next(
                (kw.value for kw in parent.keywords if kw.arg == "dtype"), None)
            return _is_pointer_type(dtype, prov) and not any(prov.roots(a) for a in rest)
        return func.attr in _POINTER_METHODS and not any(prov.roots(a) for a in rest)
    path = prov.path(func)
    if path == "tl.cast":
        carried = (parent.args[:1] == [node]) and _is_pointer_type(
            parent.args[1] if len(parent.args) > 1 else next(
                (kw.value for kw in parent.keywords if kw.arg == "dtype"), None), prov)
        return carried and not any(prov.roots(a) for a in rest)
    if path == "tl.where":
        return node in parent.args[1:3]
    if path == "tl.make_block_ptr":
        base = parent.args[0] if parent.args else next((kw.value for kw in parent.keywords if kw.arg == "base"), None)
        return base is node and not any(prov.roots(a) for a in rest)
    index = _POINTER_THROUGH.get(path or "")
    return index is not None and parent.args[index:index + 1] == [node] and not any(prov.roots(a) for a in rest)


def check_helper_has_no_memory_access(fn: ast.FunctionDef, paths: dict[str, str]) -> None:
    """Helper @triton.jit functions (combine functions) compute; they do not touch memory."""
    prov = Provenance(fn, set(), paths)
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and prov.path(node.func) in allowed.LOAD_CALLS | allowed.WRITE_CALLS:
            raise Reject("memory-access", f"helper '{fn.name}' calls '{describe(node.func)}'; only the kernel loads "
                                          "and stores")
