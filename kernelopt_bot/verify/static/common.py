"""Shared pieces of gate 1: the rejection type, literal reading, and small AST helpers."""

from __future__ import annotations

import ast
from typing import Any

from kernelopt_bot.verify.verdict import GateResult

GATE = "static"


class Reject(Exception):
    """One rule failed; carries the rule name and a reason for the report."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message


def fail(exc: Reject, lines: int | None = None) -> GateResult:
    numbers: dict[str, Any] = {"rule": exc.rule}
    if lines is not None:
        numbers["lines"] = lines
    return GateResult.fail(GATE, f"{exc.rule}: {exc.message}", **numbers)


def is_power_of_two(value: Any) -> bool:
    """A positive int (not a bool) with one bit set."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def is_int(value: Any) -> bool:
    """An int that is not a bool (``True`` is not a block size, a warp count or a trip count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def describe(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node).splitlines()[0] if not isinstance(node, ast.FunctionDef) else f"def {node.name}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_constexpr_annotation(node: ast.expr | None, bindings: dict[str, str]) -> bool:
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


def literal_value(node: ast.expr, bindings: dict[str, str]) -> tuple[bool, Any]:
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
        and is_constexpr_annotation(node.func, bindings)
        and len(node.args) == 1
        and not node.keywords
    ):
        return literal_value(node.args[0], bindings)
    return False, None


def is_jit_decorator(dec: ast.expr) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(target, ast.Attribute) and target.attr == "jit") or (
        isinstance(target, ast.Name) and target.id == "jit"
    )
