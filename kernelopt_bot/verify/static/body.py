"""Gate 1, kernel body: an allowlist walk over every statement and expression.

Under ``TRITON_INTERPRET=1`` the body *is* Python run on the host, and Triton's code generator
executes plain Python it finds in a kernel at GPU compile time too. So the body may contain only
what :mod:`allowlist` lists: its parameters and locals, numeric/bool/None literals, device
functions by their plain dotted paths (``tl.load``, ``tl.math.exp``, ``libdevice.rsqrt``,
``triton_helpers.max2``), a fixed set of tensor methods on values, and string literals only as
the arguments of allowed calls that take them. A module name may appear only at the root of an
allowed path, so ``(a if c else tl).extra`` and ``[tl][0].extra`` have nothing to stand on.
Every node type not handled below is rejected, so a Python feature we did not think of is a
rejection, not a hole.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.verify.static import allowlist as allowed
from kernelopt_bot.verify.static.caps import (
    MAX_EXPR_DEPTH,
    MAX_LOOP_BOUND,
    MAX_LOOP_TRIPS,
    MAX_SIZE_SCALE,
    MAX_STATIC_UNROLL,
    MAX_TILE_NUMEL,
    const_int,
    trip_count,
)
from kernelopt_bot.verify.static.common import Reject, describe, is_constexpr_annotation, is_power_of_two
from kernelopt_bot.verify.static.module import canonical_path

# Host modules, reflection and I/O: not needed by the allowlist (they are simply not on it), but
# named here so the reason says what the candidate reached for.
HOST_NAMES = frozenset({
    "open", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "hasattr",
    "globals", "locals", "vars", "dir", "print", "input", "breakpoint", "exit", "quit", "help",
    "type", "object", "super", "memoryview", "id", "format", "repr", "str", "chr", "ord", "bytes",
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "torch", "time",
    "threading", "multiprocessing", "signal", "shutil", "pickle", "marshal", "numpy", "np",
    "pathlib", "io", "gc", "inspect", "asyncio",
})
HOST_ATTRIBUTES = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "torch", "time",
    "threading", "multiprocessing", "numpy", "environ", "getenv", "putenv", "system", "popen",
    "open", "exec", "eval", "compile", "runtime", "testing", "compiler", "backends", "tools", "knobs",
    "driver", "triton", "pymath", "warnings", "inspect", "core", "typing", "pkgutil", "modules",
    "format", "format_map", "join", "encode", "decode", "handle", "tofile", "dump", "dumps", "fn",
})

_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot)
_SHAPE_FIRST = frozenset({"tl.zeros", "tl.full"})
_SHAPE_SECOND = frozenset({"tl.broadcast_to", "tl.reshape", "tl.view"})
_SHAPE_METHODS = frozenset({"broadcast_to", "reshape", "view"})
_LOOP_PATHS = frozenset({"tl.range", "tl.static_range"})


@dataclass
class BodyScope:
    """What a kernel body may refer to besides the allowlist."""

    params: list[str]
    pointer_params: set[str]
    constexpr_params: set[str]
    paths: dict[str, str]  # import-bound name -> canonical device path
    kinds: dict[str, str]  # import-bound name -> kind (tl, heuristics, hints, ...)
    constants: dict[str, Any]  # module-level literal constants
    helpers: set[str]  # @triton.jit function names of the module
    original_paths: set[str]  # canonical call paths the original kernel uses
    allow_inline_asm: bool
    locals: set[str] = field(default_factory=set)
    known_ints: dict[str, int] = field(default_factory=dict)  # names with a literal int value


def check_identifiers(fn: ast.FunctionDef, scope: BodyScope) -> None:
    """First pass, for the clearest reason: names that reach the host, dunders, private
    attributes, streams and (unless opted in) inline assembly, wherever they appear."""
    for node in (n for stmt in fn.body for n in ast.walk(stmt)):
        if isinstance(node, ast.Name):
            _check_identifier(node.id, scope, attribute=False)
        elif isinstance(node, ast.Attribute):
            _check_identifier(node.attr, scope, attribute=True, context=describe(node))
        elif isinstance(node, ast.keyword) and node.arg is not None:
            _check_identifier(node.arg, scope, attribute=True)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            lowered = node.value.lower()
            if "stream" in lowered:
                raise Reject("streams", f"string {node.value!r} mentions a stream")
            if "inline_asm" in lowered and not scope.allow_inline_asm:
                raise Reject("inline-asm", f"string {node.value!r} mentions inline_asm")
            if "__" in node.value:
                raise Reject("forbidden-name", f"string {node.value!r} names a dunder")


def _check_identifier(name: str, scope: BodyScope, *, attribute: bool, context: str = "") -> None:
    where = f"{'attribute' if attribute else 'name'} '{name}'" + (f" in '{context}'" if context else "")
    lowered = name.lower()
    if "stream" in lowered:
        raise Reject("streams", f"{where} mentions a stream; work on another stream escapes the timer")
    if "inline_asm" in lowered and not scope.allow_inline_asm:
        raise Reject("inline-asm", f"{where}: inline_asm is not allowed unless allow_inline_asm is set")
    if name.startswith("__") or name.endswith("__"):
        raise Reject("forbidden-name", f"{where}: dunder access reaches host objects")
    if attribute and name.startswith("_"):
        raise Reject("forbidden-name", f"{where}: private attributes are not kernel API")
    if name == "print" and not attribute:
        raise Reject("forbidden-name", "builtin print() is host I/O; kernels print nothing")
    if name in (HOST_ATTRIBUTES if attribute else HOST_NAMES):
        raise Reject("forbidden-name", f"{where} is host/file/network/process access or reflection, "
                                       "not kernel code")


def locals_of(fn: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
    return names


def _assignments(fn: ast.FunctionDef) -> dict[str, list[ast.expr | None]]:
    """Name -> every value assigned to it (None: assigned by a loop, a tuple unpacking or ``+=``)."""
    out: dict[str, list[ast.expr | None]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
                else:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            out.setdefault(sub.id, []).append(None)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.For)):
            for sub in ast.walk(node.target):
                if isinstance(sub, ast.Name):
                    out.setdefault(sub.id, []).append(None)
    return out


def _known_ints(fn: ast.FunctionDef, constants: dict[str, Any]) -> dict[str, int]:
    """Names whose value is a literal integer: module constants, and locals (or reassigned
    parameters, as Inductor writes ``r0_numel = 4096``) assigned only literal expressions."""
    known = {k: v for k, v in constants.items() if isinstance(v, int) and not isinstance(v, bool)}
    assigned = _assignments(fn)
    # Worklist: a name is re-evaluated only when a name its values mention became known (each
    # name becomes known once), so this is linear; sweeping until stable is quadratic.
    users: dict[str, list[str]] = {}
    for name, values in assigned.items():
        for value in values:
            for sub in ast.walk(value) if value is not None else ():
                if isinstance(sub, ast.Name):
                    users.setdefault(sub.id, []).append(name)
    pending = list(assigned)
    while pending:
        name = pending.pop()
        values = assigned[name]
        if name in known or any(v is None for v in values):
            continue
        ints = [const_int(v, known) for v in values if v is not None]
        if ints and all(i is not None for i in ints) and len(set(ints)) == 1:
            known[name] = ints[0]  # type: ignore[assignment]
            pending.extend(users.get(name, []))
    return known


class BodyChecker:
    """Walks one @triton.jit function; raises :class:`Reject` on the first disallowed thing."""

    def __init__(self, fn: ast.FunctionDef, scope: BodyScope) -> None:
        self.fn = fn
        self.scope = scope
        scope.locals = locals_of(fn)
        scope.known_ints = _known_ints(fn, scope.constants)
        self.assigned = _assignments(fn)
        # Loops nest: the caps hold for the product along every nesting path, not per loop
        # (three nested ``range(65536)`` are 2**48 iterations; three ``static_range(256)`` unroll
        # 16M copies of the body at compile time).
        self.enclosing_trips = 1
        self.enclosing_unroll = 1
        self.size_scales: dict[str, int | None] = {}

    def check(self) -> None:
        check_identifiers(self.fn, self.scope)
        for index, stmt in enumerate(self.fn.body):
            if index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # docstring
            self.stmt(stmt)

    # ---------------------------------------------------------------------------- statements

    def stmts(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.target(target)
            self.expr(node.value)
            self.block_assignment(node.targets, node.value)
        elif isinstance(node, ast.AnnAssign):
            self.target(node.target)
            if not is_constexpr_annotation(node.annotation, self.scope.kinds):
                raise Reject("kernel-body", f"annotation '{ast.unparse(node.annotation)}' in the kernel: only "
                                            "tl.constexpr")
            if node.value is None:
                raise Reject("kernel-body", f"'{describe(node)}' declares without a value")
            self.expr(node.value)
            self.block_assignment([node.target], node.value)
        elif isinstance(node, ast.AugAssign):
            self.target(node.target)
            self.expr(node.value)
        elif isinstance(node, ast.Expr):
            if not isinstance(node.value, ast.Call):
                raise Reject("kernel-body", f"statement '{describe(node)}' has no effect; only calls may stand alone")
            self.expr(node.value)
        elif isinstance(node, ast.For):
            if node.orelse:
                raise Reject("kernel-body", "'for ... else' is not kernel code")
            self.target(node.target)
            trips, unroll = self.loop(node.iter)
            saved = self.enclosing_trips, self.enclosing_unroll
            self.enclosing_trips *= trips
            self.enclosing_unroll *= unroll
            try:
                self.stmts(node.body)
            finally:
                self.enclosing_trips, self.enclosing_unroll = saved
        elif isinstance(node, ast.If):
            self.expr(node.test)
            self.stmts(node.body)
            self.stmts(node.orelse)
        elif isinstance(node, ast.Return):
            if node.value is not None:
                self.expr(node.value)
        elif isinstance(node, ast.Assert):
            self.expr(node.test)
            if node.msg is not None and not (isinstance(node.msg, ast.Constant) and isinstance(node.msg.value, str)):
                raise Reject("kernel-body", "an assert message must be a string literal")
        elif isinstance(node, ast.Pass):
            return
        else:
            raise Reject("kernel-body", f"'{describe(node)}': {_statement_reason(node)}")

    def target(self, node: ast.expr) -> None:
        if isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                self.target(elt)
            return
        if not isinstance(node, ast.Name):
            raise Reject("kernel-body", f"assignment to '{describe(node)}': only plain local names can be assigned "
                                        "(no attributes, subscripts or starred targets)")
        name = node.id
        if name in self.scope.paths or name in self.scope.kinds or name in allowed.BUILTINS \
                or name in self.scope.helpers or name in self.scope.constants:
            raise Reject("kernel-body", f"assignment to '{name}' shadows an import, a builtin, a module constant "
                                        "or a kernel function")

    def block_assignment(self, targets: list[ast.expr], value: ast.expr) -> None:
        number = const_int(value, self.scope.known_ints)
        if number is None:
            if isinstance(value, ast.Call) and len(value.args) == 1:  # tl.constexpr(<literal>)
                number = const_int(value.args[0], self.scope.known_ints)
            if number is None:
                return
        for target in targets:
            if isinstance(target, ast.Name) and "BLOCK" in target.id.upper():
                if not is_power_of_two(number):
                    raise Reject("block-size", f"'{target.id}' is hardcoded to {number}; block sizes must be "
                                               "powers of two")
                if number > MAX_TILE_NUMEL:
                    raise Reject("block-size", f"'{target.id}' = {number} exceeds the tile cap {MAX_TILE_NUMEL}")

    # ---------------------------------------------------------------------------- loops

    def loop(self, node: ast.expr) -> tuple[int, int]:
        """Check a loop iterable; return (literal trip count or 1, static unroll count or 1)."""
        path = self.call_path(node) if isinstance(node, ast.Call) else None
        if not isinstance(node, ast.Call) or path not in ("range", *_LOOP_PATHS):
            raise Reject("loop-bounds", f"'for' over '{describe(node)}': a kernel loop iterates range, tl.range or "
                                        "tl.static_range")
        assert isinstance(node, ast.Call)
        if any(isinstance(a, ast.Starred) for a in node.args) or not 1 <= len(node.args) <= 3:
            raise Reject("loop-bounds", f"'{describe(node)}' needs 1 to 3 plain bounds")
        for kw in node.keywords:
            value = const_int(kw.value, {}) if not isinstance(kw.value, ast.Constant) or not isinstance(
                kw.value.value, bool) else int(kw.value.value)
            # Inductor's mix-order reductions pipeline with ``num_stages=NUM_STAGES``: a constexpr
            # parameter, whose launch-config value gate 1 caps (check_config's MAX_NUM_STAGES)
            constexpr = isinstance(kw.value, ast.Name) and kw.value.id in self.scope.constexpr_params \
                and kw.arg == "num_stages"
            small = constexpr or (value is not None and 0 <= value <= 16)
            if path != "tl.range" or kw.arg not in allowed.RANGE_KEYWORDS or not small:
                raise Reject("loop-bounds", f"'{describe(node)}': keyword {kw.arg}= must be one of tl.range's "
                                            f"{sorted(allowed.RANGE_KEYWORDS)} with a small literal "
                                            "(num_stages= also takes a constexpr parameter)")
        args = list(node.args)
        for arg in args:
            self.expr(arg)
        start, stop, step = (ast.Constant(0), args[0], ast.Constant(1)) if len(args) == 1 else (
            args[0], args[1], args[2] if len(args) == 3 else ast.Constant(1))
        # A stop bounded only from above bounds the trips only while the loop counts up
        step_value = const_int(step, self.scope.known_ints)
        counts_up = (step_value is not None and step_value > 0) or (
            isinstance(step, ast.Name) and step.id in self.scope.constexpr_params)  # gate 1: powers of two
        values = [self.bound(b, node, upper_only=b is stop and counts_up) for b in (start, stop, step)]
        text = ast.unparse(node)
        trips = trip_count(*values) if all(v is not None for v in values) else 1  # type: ignore[arg-type]
        unroll = 1
        if path == "tl.static_range":
            if any(v is None for v in values):
                raise Reject("loop-bounds", f"'{text}': tl.static_range is unrolled at compile time, so its bounds "
                                            "must be literals")
            unroll = trips
            if unroll * self.enclosing_unroll > MAX_STATIC_UNROLL:
                raise Reject("loop-bounds", f"'{text}' unrolls {unroll} times (x{self.enclosing_unroll} by the "
                                            f"enclosing static loops); the cap is {MAX_STATIC_UNROLL}")
        if trips * self.enclosing_trips > MAX_LOOP_TRIPS:
            raise Reject("loop-bounds", f"'{text}' runs {trips} iterations (x{self.enclosing_trips} by the enclosing "
                                        f"loops); loops with literal bounds may run at most {MAX_LOOP_TRIPS} in all")
        return trips, unroll

    def bound(self, node: ast.expr, loop: ast.Call, *, upper_only: bool = False) -> int | None:
        """A loop bound's literal value, or None for one bounded by the problem (a size parameter,
        a block constexpr); anything else is rejected. ``upper_only``: the loop's stop, which
        only needs an upper bound (the start is bounded both ways, so the trips are too): Inductor's
        mix-order reductions stop at ``split_size = min(RSPLIT_SIZE, xnumel - xoffset)``."""
        value = const_int(node, self.scope.known_ints)
        if value is not None:
            if abs(value) > MAX_LOOP_BOUND:
                raise Reject("loop-bounds", f"'{ast.unparse(loop)}': bound {value} exceeds {MAX_LOOP_BOUND} "
                                            "(no tensor dimension is larger)")
            return value
        if upper_only and self.bounded_above(node, set()):
            return None
        if not self.bounded(node, set()):
            raise Reject("loop-bounds", f"'{ast.unparse(loop)}': bound '{ast.unparse(node)}' is not a size "
                                        "parameter, a constexpr or a literal")
        return None

    def bounded_above(self, node: ast.expr, seen: set[str]) -> bool:
        """Is ``node`` at most a bounded size? A bounded size is; ``min(...)`` is when any of its
        arguments is; a local is when every value assigned to it is."""
        if self.bounded(node, set()):
            return True
        if isinstance(node, ast.Name):
            values = self.assigned.get(node.id, [])
            if node.id in seen or node.id in self.scope.params or not values or any(v is None for v in values):
                return False
            return all(self.bounded_above(v, seen | {node.id}) for v in values if v is not None)
        if isinstance(node, ast.Call) and not node.keywords and self.call_path(node) == "min":
            return any(self.bounded_above(a, seen) for a in node.args)
        return False

    def bounded(self, node: ast.expr, seen: set[str]) -> bool:
        scale = self.size_scale(node, seen)
        return scale is not None and scale <= MAX_SIZE_SCALE

    def size_scale(self, node: ast.expr, seen: set[str]) -> int | None:
        """How many times the problem size ``node`` may be, or None when it is not bounded by
        sizes at all. ``r0_numel`` is 1, ``2 * r0_numel`` is 2, ``tl.cdiv(n, BLOCK)`` is 1; a
        product of two sizes is unbounded, and so is a chain that doubles a size 60 times
        (``a1 = a0 + a0; ...``: each step is linear, the chain is not)."""
        value = const_int(node, self.scope.known_ints)
        if value is not None:
            return 0 if abs(value) <= MAX_LOOP_BOUND else None
        if isinstance(node, ast.Name):
            # Memoized: without it the doubling chain above is also exponential to check. A
            # name's answer does not depend on the path that reached it (a name on a cycle is
            # unbounded from anywhere), so caching is sound.
            name = node.id
            if name in self.size_scales:
                return self.size_scales[name]
            if name in seen or name in self.scope.pointer_params:
                return None
            values = self.assigned.get(name, [])
            result: int | None = None
            if name in self.scope.params and not values:
                result = 1
            elif (name in self.scope.params or name in self.scope.locals) and values \
                    and all(v is not None for v in values):
                scales = [self.size_scale(v, seen | {name}) for v in values if v is not None]
                result = None if any(sc is None for sc in scales) else max(scales)  # type: ignore[type-var]
            result = None if result is not None and result > MAX_SIZE_SCALE else result
            self.size_scales[name] = result
            return result
        if isinstance(node, ast.BinOp):
            left, right = self.size_scale(node.left, seen), self.size_scale(node.right, seen)
            if left is None or right is None:
                return None
            if isinstance(node.op, (ast.Add, ast.Sub)):
                total = left + right
            elif isinstance(node.op, ast.Mult):
                # size * literal is a bigger size; size * size is not a loop bound
                factors = [const_int(side, self.scope.known_ints) for side in (node.left, node.right)]
                if factors[0] is None and factors[1] is None:
                    return None
                total = abs(factors[0]) * right if factors[0] is not None else abs(factors[1] or 0) * left
            elif isinstance(node.op, (ast.FloorDiv, ast.RShift)):
                total = left
            else:
                return None
            return total if total <= MAX_SIZE_SCALE else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self.size_scale(node.operand, seen)
        if isinstance(node, ast.Call) and not node.keywords and self.call_path(node) in (
                "tl.cdiv", "triton.cdiv", "min", "max"):
            scales = [self.size_scale(a, seen) for a in node.args]
            if any(sc is None for sc in scales) or not scales:
                return None
            return scales[0] if self.call_path(node) in ("tl.cdiv", "triton.cdiv") else max(scales)  # type: ignore
        return None

    # ---------------------------------------------------------------------------- expressions

    def resolve(self, node: ast.expr) -> str | None:
        """The canonical dotted path of ``node`` when it starts at an imported name
        (``tl.math.exp`` -> ``math.exp``), else None."""
        attrs: list[str] = []
        while isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id in self.scope.locals:
            return None
        if node.id in self.scope.paths:
            return canonical_path(".".join([self.scope.paths[node.id], *reversed(attrs)]))
        if node.id in self.scope.kinds:
            raise Reject("kernel-body", f"'{node.id}' is host-side (decorator/hint API) and cannot be used in the "
                                        "kernel")
        return None

    def call_path(self, call: ast.Call) -> str | None:
        func = call.func
        if isinstance(func, ast.Name) and func.id in allowed.BUILTINS and func.id not in self.scope.locals:
            return func.id
        return self.resolve(func)

    def function_allowed(self, path: str) -> bool:
        head, _, name = path.partition(".")
        if path in allowed.ORIGINAL_ONLY:
            return path in self.scope.original_paths
        if path == f"tl.{allowed.INLINE_ASM}":
            return self.scope.allow_inline_asm
        table = {"tl": allowed.TL_FUNCTIONS, "math": allowed.MATH_FUNCTIONS, "libdevice": allowed.LIBDEVICE_FUNCTIONS,
                 "triton_helpers": allowed.HELPER_FUNCTIONS, "triton": allowed.TRITON_FUNCTIONS}.get(head)
        return table is not None and name in table

    def expr(self, node: ast.expr, depth: int = 0) -> None:
        if depth > MAX_EXPR_DEPTH:
            raise Reject("source-size", f"expression nested deeper than {MAX_EXPR_DEPTH}")
        d = depth + 1
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, str):
                raise Reject("strings", f"string {value!r} outside the arguments of a call that takes one "
                                        "(strings are not kernel values)")
            if value is not None and not isinstance(value, (bool, int, float)):
                raise Reject("kernel-body", f"literal {describe(node)} is not a number, bool or None")
            const_int(node, {})
        elif isinstance(node, ast.Name):
            self.name(node)
        elif isinstance(node, ast.Attribute):
            self.attribute(node, d)
        elif isinstance(node, ast.Call):
            self.call(node, d)
        elif isinstance(node, ast.BinOp):
            self.expr(node.left, d)
            self.expr(node.right, d)
            const_int(node, self.scope.known_ints)  # refuses 10**10**10 and 1 << 2**40
            if isinstance(node.op, (ast.Pow, ast.LShift)):
                exponent = const_int(node.right, self.scope.known_ints)
                if exponent is not None and exponent > 64 and const_int(node.left, self.scope.known_ints) is None:
                    raise Reject("literal-cap", f"'{describe(node)}': literal exponent/shift {exponent} > 64")
        elif isinstance(node, ast.UnaryOp):
            self.expr(node.operand, d)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self.expr(value, d)
        elif isinstance(node, ast.Compare):
            if not all(isinstance(op, _COMPARE_OPS) for op in node.ops):
                raise Reject("kernel-body", f"'{describe(node)}': 'in' tests are not kernel code")
            self.expr(node.left, d)
            for comp in node.comparators:
                self.expr(comp, d)
        elif isinstance(node, ast.IfExp):
            self.expr(node.test, d)
            self.expr(node.body, d)
            self.expr(node.orelse, d)
        elif isinstance(node, ast.Subscript):
            self.expr(node.value, d)
            self.expr(node.slice, d)
        elif isinstance(node, ast.Slice):
            for part in (node.lower, node.upper, node.step):
                if part is not None:
                    self.expr(part, d)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    raise Reject("kernel-body", f"'{describe(node)}': starred unpacking is not kernel code")
                self.expr(elt, d)
        else:
            raise Reject("kernel-body", f"'{describe(node)}': {_expression_reason(node)}")

    def name(self, node: ast.Name) -> None:
        name = node.id
        if name not in self.scope.locals and isinstance(self.scope.constants.get(name), str):
            raise Reject("strings", f"module constant '{name}' is a string; strings are not kernel values and "
                                    "may appear only as literals in the arguments that take them")
        if name in self.scope.locals or name in self.scope.constants:
            return
        path = self.resolve(node)
        if path is not None:
            if path in allowed.TL_VALUES or path.removeprefix("tl.") in allowed.TL_VALUES:
                return
            raise Reject("kernel-body", f"'{name}' ({path}) used as a value; a module or function is kernel code "
                                        "only when called by its dotted path")
        if name in self.scope.helpers:
            raise Reject("kernel-body", f"kernel function '{name}' used as a value (only called, or passed as a "
                                        "combine function)")
        if name in allowed.BUILTINS:
            raise Reject("kernel-body", f"builtin '{name}' used as a value")
        raise Reject("kernel-body", f"name '{name}' is neither a parameter or local of the kernel nor on the "
                                    "allowlist of triton/tl/tl_math/libdevice/triton_helpers")

    def attribute(self, node: ast.Attribute, depth: int) -> None:
        path = self.resolve(node)
        if path is not None:
            if path.removeprefix("tl.") in allowed.TL_VALUES and path.startswith("tl."):
                return
            raise Reject("kernel-body", f"'{ast.unparse(node)}' is not an allowed device value; module paths are "
                                        "kernel code only as allowlisted calls (tl.load, libdevice.exp, ...)")
        if _rooted_at_module(node, self.scope):
            raise Reject("kernel-body", f"'{ast.unparse(node)}' is not a device function or value of "
                                        "triton/tl/tl_math/libdevice/triton_helpers")
        if node.attr not in allowed.TENSOR_ATTRIBUTES:
            raise Reject("kernel-body", f"attribute '.{node.attr}' in '{describe(node)}': on a value only "
                                        f"{sorted(allowed.TENSOR_ATTRIBUTES)} and allowlisted method calls")
        self.expr(node.value, depth)

    def call(self, node: ast.Call, depth: int) -> None:
        func = node.func
        path = self.call_path(node)
        if path is not None:
            if path in ("range", *_LOOP_PATHS):
                raise Reject("loop-bounds", f"'{describe(node)}' outside a 'for' statement")
            if path not in allowed.BUILTINS and not self.function_allowed(path):
                raise Reject("kernel-body", f"call '{describe(func)}(...)' ({path}) is not on the allowlist of "
                                            "device functions")
        elif isinstance(func, ast.Name) and func.id in self.scope.helpers and func.id not in self.scope.locals:
            pass
        elif isinstance(func, ast.Attribute) and not _rooted_at_module(func, self.scope):
            if func.attr not in allowed.TENSOR_METHODS:
                raise Reject("kernel-body", f"method '.{func.attr}()' in '{describe(node)}' is not an allowlisted "
                                            "tensor method")
            self.expr(func.value, depth)
            path = f".{func.attr}"
        else:
            raise Reject("kernel-body", f"call '{describe(func)}(...)' is outside triton/tl/tl_math/libdevice/"
                                        "triton_helpers and the module's kernel functions")
        self.arguments(node, path, depth)
        self.shapes(node, path)

    def arguments(self, node: ast.Call, path: str | None, depth: int) -> None:
        positional = allowed.STRING_POSITIONAL.get(path or "", frozenset())
        for index, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                raise Reject("kernel-body", f"'*' arguments in '{describe(node)}' are not kernel code")
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                if index not in positional or (path == "float" and arg.value.lower() not in allowed.FLOAT_STRINGS):
                    raise Reject("strings", f"string {arg.value!r} as argument {index} of '{describe(node.func)}' "
                                            "is not allowed")
                continue
            if isinstance(arg, ast.Name) and arg.id in self.scope.helpers and arg.id not in self.scope.locals:
                continue  # a combine function for tl.reduce / tl.associative_scan
            self.expr(arg, depth)
        for kw in node.keywords:
            if kw.arg is None:
                raise Reject("kernel-body", f"'**' arguments in '{describe(node)}' are not kernel code")
            if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                values = allowed.STRING_KEYWORDS.get(kw.arg, frozenset())
                if kw.arg not in allowed.STRING_KEYWORDS or (values is not None and kw.value.value not in values):
                    raise Reject("strings", f"{kw.arg}={kw.value.value!r} in '{describe(node.func)}(...)' is not an "
                                            "allowed string argument")
                continue
            if isinstance(kw.value, ast.Name) and kw.value.id in self.scope.helpers:
                continue
            self.expr(kw.value, depth)

    def shapes(self, node: ast.Call, path: str | None) -> None:
        """``tl.arange`` spans and literal tensor shapes: powers of two within the tile cap."""
        known = self.scope.known_ints
        if path == "tl.arange":
            args: list[ast.expr | None] = list(node.args[:2])
            kws = {kw.arg: kw.value for kw in node.keywords}
            while len(args) < 2:
                args.append(kws.get("start" if not args else "end"))
            start, end = (const_int(a, known) if a is not None else None for a in args)
            if start is not None and end is not None:
                size = end - start
                if not is_power_of_two(size):
                    raise Reject("block-size", f"'{ast.unparse(node)}' spans {size} elements; Triton block sizes "
                                               "must be powers of two")
                if size > MAX_TILE_NUMEL:
                    raise Reject("block-size", f"'{ast.unparse(node)}' spans {size} elements; the cap is "
                                               f"{MAX_TILE_NUMEL}")
            return
        shape: ast.expr | None = None
        if path in _SHAPE_FIRST and node.args:
            shape = node.args[0]
        elif path in _SHAPE_SECOND and len(node.args) >= 2:
            shape = node.args[1]
        elif path is not None and path.removeprefix(".") in _SHAPE_METHODS and path.startswith(".") and node.args:
            shape = node.args[0] if len(node.args) == 1 else ast.Tuple(elts=list(node.args))
        if not isinstance(shape, (ast.List, ast.Tuple)):
            return
        total = 1
        for dim in shape.elts:
            value = const_int(dim, known)
            if value is None:
                continue
            if not is_power_of_two(value):
                raise Reject("block-size", f"shape dimension {value} in '{describe(node)}' is not a power of two")
            total *= value
            if total > MAX_TILE_NUMEL:
                raise Reject("block-size", f"shape in '{describe(node)}' has more than {MAX_TILE_NUMEL} elements")


def _rooted_at_module(node: ast.expr, scope: BodyScope) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id not in scope.locals and (
        node.id in scope.paths or node.id in scope.kinds)


def call_paths(fn: ast.FunctionDef, paths: dict[str, str]) -> set[str]:
    """Canonical dotted paths of every call in a (trusted) function: what the original uses."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            attrs: list[str] = []
            func = node.func
            while isinstance(func, ast.Attribute):
                attrs.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name) and func.id in paths:
                path = canonical_path(".".join([paths[func.id], *reversed(attrs)]))
                if path is not None:
                    out.add(path)
    return out


def _statement_reason(node: ast.stmt) -> str:
    reasons: list[tuple[type | tuple[type, ...], str]] = [
        (ast.While, "'while' loops have no static trip count; use range/tl.range with size bounds"),
        ((ast.Global, ast.Nonlocal), "module-level state is not allowed"),
        ((ast.Import, ast.ImportFrom), "imports belong at module level and are limited to triton and the Inductor "
                                       "runtime"),
        ((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef), "nested functions and classes are not allowed in the "
                                                                "kernel"),
        ((ast.Try, ast.With, ast.AsyncWith, ast.Raise), "exception handling and context managers are host code"),
        (ast.Delete, "'del' is not kernel code"),
    ]
    for kinds, reason in reasons:
        if isinstance(node, kinds):
            return reason
    return f"{type(node).__name__} statements are not kernel code"


def _expression_reason(node: ast.expr) -> str:
    if isinstance(node, ast.Lambda):
        return "lambdas are not allowed in the kernel"
    if isinstance(node, (ast.JoinedStr, ast.FormattedValue)):
        return "f-strings are host string formatting"
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return "comprehensions are not kernel code"
    if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
        return "generators and await are not kernel code"
    if isinstance(node, ast.NamedExpr):
        return "':=' is not kernel code"
    if isinstance(node, (ast.Dict, ast.Set)):
        return "dicts and sets are host objects"
    return f"{type(node).__name__} expressions are not kernel code"
