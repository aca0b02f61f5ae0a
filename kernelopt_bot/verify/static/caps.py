"""Caps that make gate 1 a fast, bounded answer to any text, and keep a candidate's compile and
run bounded too.

A candidate is judged before any sandbox time is spent, so a hostile one must be rejected here
in milliseconds: a 14.7 MB source is refused before it is parsed, and a loop of 2**40 trips or a
``tl.static_range`` the compiler would unroll a trillion times is refused from its literals,
instead of being stopped by the sandbox deadline minutes later. Literal arithmetic is evaluated
conservatively (``10**10**10`` is refused without being computed).
"""

from __future__ import annotations

import ast
import math

from kernelopt_bot.verify.static.common import Reject, is_int

# Inductor's largest kernels are a few KiB and ~1,300 AST nodes; an LLM rewrite stays far below.
MAX_SOURCE_BYTES = 256 * 1024
MAX_AST_NODES = 50_000
MAX_EXPR_DEPTH = 100
# Triton refuses tensors with more elements than this (``TRITON_MAX_TENSOR_NUMEL``): a tile,
# ``tl.arange`` or shape beyond it cannot compile, whatever the kernel.
MAX_TILE_NUMEL = 2**20
# Largest integer literal (uint64 masks are the largest device integers).
MAX_INT_LITERAL = 2**64
# Loop bounds: sizes are at most int32 indices; a loop whose bounds are all literals may run at
# most MAX_LOOP_TRIPS times; ``tl.static_range`` is unrolled by the compiler, so its bounds must be
# literals and its trip count small.
MAX_LOOP_BOUND = 2**31
MAX_LOOP_TRIPS = 2**16
MAX_STATIC_UNROLL = 256
# A loop bound made of sizes may be at most this many times a size (``2 * r0_numel`` is fine;
# ``n * n`` or a size doubled 60 times through locals is a hang, not a kernel).
MAX_SIZE_SCALE = 64
# ``x ** n`` and ``x << n`` with a literal n: beyond this they are no kernel arithmetic.
MAX_LITERAL_EXPONENT = 64


def check_source_size(text: str) -> None:
    """Before parsing: a candidate larger than any kernel is rejected without reading it."""
    if len(text) > MAX_SOURCE_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        raise Reject("source-size", f"candidate is {len(text)} characters; the cap is {MAX_SOURCE_BYTES} bytes "
                                    "(Inductor's kernels are a few KiB)")


def check_node_count(tree: ast.AST) -> None:
    for count, _ in enumerate(ast.walk(tree), start=1):
        if count > MAX_AST_NODES:
            raise Reject("source-size", f"candidate has more than {MAX_AST_NODES} syntax nodes")


def _checked(value: int, node: ast.AST) -> int:
    if abs(value) > MAX_INT_LITERAL:
        raise Reject("literal-cap", f"'{ast.unparse(node)[:60]}' evaluates beyond {MAX_INT_LITERAL}; "
                                    "no kernel value is that large")
    return value


def const_int(node: ast.expr, names: dict[str, int]) -> int | None:
    """The value of an integer expression made of literals and names in ``names`` (module
    constants and locals assigned such expressions), or None. Never computes anything large:
    operands are capped before ``**`` and ``<<`` are applied."""
    if isinstance(node, ast.Constant):
        return _checked(node.value, node) if is_int(node.value) else None
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        value = const_int(node.operand, names)
        if value is None:
            return None
        return {ast.USub: -value, ast.UAdd: value, ast.Invert: ~value}[type(node.op)]
    if isinstance(node, ast.BinOp):
        left, right = const_int(node.left, names), const_int(node.right, names)
        if left is None or right is None:
            return None
        op = node.op
        if isinstance(op, (ast.Pow, ast.LShift)):
            if right < 0 or (right > MAX_LITERAL_EXPONENT and abs(left) > 1):
                raise Reject("literal-cap", f"'{ast.unparse(node)[:60]}': exponent/shift {right} is beyond "
                                            f"{MAX_LITERAL_EXPONENT}")
            return _checked(left**right if isinstance(op, ast.Pow) else left << right, node)
        if isinstance(op, (ast.FloorDiv, ast.Mod)) and right == 0:
            return None
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.RShift: lambda a, b: a >> b,
               ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}
        fn = ops.get(type(op))
        if fn is None or (isinstance(op, ast.RShift) and right < 0):
            return None
        return _checked(fn(left, right), node)
    return None


def trip_count(start: int, stop: int, step: int) -> int:
    if step == 0:
        raise Reject("loop-bounds", "loop step is 0")
    return max(0, math.ceil((stop - start) / step))
