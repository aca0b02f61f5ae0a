"""Source transformations that turn a real Inductor kernel into a cheating (or honest) candidate.

Each works on the kernel text both at CI's tiny sizes (persistent reductions) and at H200 sizes
(looped reductions), by finding the statements it needs rather than assuming line numbers, and
asserts it changed something: a red-team case that silently did nothing would prove nothing.
"""

from __future__ import annotations

import ast
import re

STORE = re.compile(r"^(?P<indent>\s*)tl\.store\((?P<args>.*)\)\s*$")
LOAD = re.compile(r"^(?P<indent>\s*)(?P<var>\w+) = tl\.load\((?P<ptr>in_ptr0|in_out_ptr\d) \+ (?P<rest>.*)\)\s*$")
DEF = re.compile(r"^def \w+\(.*\):\s*$")


def _lines(src: str) -> list[str]:
    return src.split("\n")


def _call_args(text: str) -> list[str]:
    call = ast.parse(f"f({text})", mode="eval").body
    assert isinstance(call, ast.Call)
    return [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]


def _last_store(lines: list[str]) -> int:
    idx = [i for i, line in enumerate(lines) if STORE.match(line)]
    assert idx, "kernel has no tl.store"
    return idx[-1]


def map_store(src: str, template: str) -> str:
    """Rewrite the value of the kernel's last store: ``template`` has ``{v}`` for the old value."""
    lines = _lines(src)
    i = _last_store(lines)
    m = STORE.match(lines[i])
    assert m
    args = _call_args(m["args"])
    args[1] = template.format(v=args[1])
    lines[i] = f"{m['indent']}tl.store({', '.join(args)})"
    return "\n".join(lines)


def drop_store(src: str) -> str:
    lines = _lines(src)
    i = _last_store(lines)
    lines[i] = STORE.match(lines[i])["indent"] + "pass"  # type: ignore[index]
    return "\n".join(lines)


def half_store(src: str) -> str:
    """Store only the first half of the rows (x dimension)."""
    lines = _lines(src)
    i = _last_store(lines)
    m = STORE.match(lines[i])
    assert m
    args = _call_args(m["args"])
    half = "xindex < (xnumel // 2)"
    args[2] = half if args[2] == "None" else f"({args[2]}) & ({half})"
    lines[i] = f"{m['indent']}tl.store({', '.join(args)})"
    return "\n".join(lines)


def _first_load(lines: list[str]) -> tuple[int, re.Match[str]]:
    for i, line in enumerate(lines):
        m = LOAD.match(line)
        if m:
            return i, m
    raise AssertionError("kernel has no load from in_ptr0/in_out_ptr")


def after_first_load(src: str, statement: str) -> str:
    """Insert ``statement`` (``{var}`` is the loaded value) right after the first input load."""
    lines = _lines(src)
    i, m = _first_load(lines)
    lines.insert(i + 1, m["indent"] + statement.format(var=m["var"]))
    return "\n".join(lines)


def write_input(src: str) -> str:
    """Also store into the first input the kernel reads (an in-place modification)."""
    lines = _lines(src)
    for i, line in enumerate(lines):
        m = re.match(r"^(?P<indent>\s*)(?P<var>\w+) = tl\.load\((?P<args>in_ptr0 \+ .*)\)\s*$", line)
        if m:
            args = _call_args(m["args"])
            lines.insert(i + 1, f"{m['indent']}tl.store({args[0]}, {m['var']} + 1.0, {args[1]})")
            return "\n".join(lines)
    raise AssertionError("kernel has no load from in_ptr0")


def offset_first_load(src: str, offset: str) -> str:
    lines = _lines(src)
    i, m = _first_load(lines)
    new = lines[i].replace(f"tl.load({m['ptr']} + ", f"tl.load({m['ptr']} + {offset} + ", 1)
    assert new != lines[i]
    lines[i] = new
    return "\n".join(lines)


def in_body(src: str, *statements: str) -> str:
    """Insert statements at the top of the jit function body."""
    lines = _lines(src)
    i = next(i for i, line in enumerate(lines) if DEF.match(line))
    indent = re.match(r"^(\s*)", lines[i + 1])[1]  # type: ignore[index]
    for j, stmt in enumerate(statements):
        lines.insert(i + 1 + j, indent + stmt)
    return "\n".join(lines)


def module_level(src: str, *statements: str, before_kernel: bool = False) -> str:
    if not before_kernel:
        return src.rstrip() + "\n" + "\n".join(statements) + "\n"
    lines = _lines(src)
    i = next(i for i, line in enumerate(lines) if line.startswith("@triton"))
    return "\n".join([*lines[:i], *statements, "", *lines[i:]])


def add_parameter(src: str) -> str:
    new = re.sub(r"^(def \w+\()", r"\1extra_ptr, ", src, count=1, flags=re.M)
    assert new != src
    return new


def replace_once(src: str, pattern: str, repl: str) -> str:
    new, n = re.subn(pattern, repl, src, count=1, flags=re.M)
    assert n == 1, f"pattern {pattern!r} not found"
    return new


def commute_first_product(src: str) -> str:
    """``tmpA = tmpB * tmpC`` -> ``tmpA = tmpC * tmpB`` (bit-identical in IEEE arithmetic)."""
    return replace_once(src, r"^(\s*tmp\d+ = )(tmp\d+) \* (tmp\d+)\s*$", r"\1\3 * \2")


def reciprocal_division(src: str) -> str:
    """The last ``tmpA = (tmpB / tmpC)`` becomes ``tmpB * (1.0 / tmpC)``: other rounding, same math."""
    matches = list(re.finditer(r"^(\s*tmp\d+ = )\(?(tmp\d+) / (tmp\d+)\)?\s*$", src, flags=re.M))
    assert matches, "no division to rewrite"
    m = matches[-1]
    return src[: m.start()] + f"{m[1]}{m[2]} * (1.0 / {m[3]})" + src[m.end():]


def exp_via_exp2(src: str) -> str:
    """``libdevice.exp(x)`` -> ``libdevice.exp2(x * log2(e))``: equivalent up to rounding."""
    new, n = re.subn(r"libdevice\.exp\((\w+)\)", r"libdevice.exp2(\1 * 1.4426950408889634)", src)
    assert n >= 1, "no libdevice.exp call"
    return new


# -- dynamic classes (gates 2-3 at run time): memory discipline, prefill, structure, bias --------


def scratch_input(src: str) -> str:
    """Use the first input as scratch: overwrite what was loaded, restore it after the last store
    (right in the interpreter, which runs programs one by one; other programs read garbage on a GPU)."""
    lines = _lines(src)
    i, m = _first_load(lines)
    args = _call_args(lines[i][lines[i].index("tl.load(") + len("tl.load("):].rstrip()[:-1])
    lines.insert(i + 1, f"{m['indent']}tl.store({args[0]}, {m['var']} * 0.5, {args[1]})")
    j = _last_store(lines)
    lines.insert(j + 1, f"{m['indent']}tl.store({args[0]}, {m['var']}, {args[1]})")
    return "\n".join(lines)


def store_into_next_block(src: str, block: str = "XBLOCK", index: str = "xindex", numel: str = "xnumel") -> str:
    """Before the last store, write zeros into the next program's block (which that program later
    overwrites when programs run in order, as in the interpreter: a race on a GPU)."""
    lines = _lines(src)
    i = _last_store(lines)
    m = STORE.match(lines[i])
    assert m
    args = _call_args(m["args"])
    mask = f"({index} + {block}) < {numel}"
    mask = mask if args[2] == "None" else f"({args[2]}) & ({mask})"
    lines.insert(i, f"{m['indent']}tl.store({args[0]} + {block}, {args[1]} * 0.0, {mask})")
    return "\n".join(lines)


def reads_output_prefill(src: str) -> str:
    """Load the output before storing it and keep the right value only where NaN was found."""
    lines = _lines(src)
    i = _last_store(lines)
    m = STORE.match(lines[i])
    assert m
    args = _call_args(m["args"])
    lines.insert(i, f"{m['indent']}kernelopt_prev = tl.load({args[0]}, {args[2]})")
    args[1] = f"tl.where(kernelopt_prev != kernelopt_prev, {args[1]}, kernelopt_prev)"
    lines[i + 1] = f"{m['indent']}tl.store({', '.join(args)})"
    return "\n".join(lines)


def row_condition(src: str, condition: str, wrong: str) -> str:
    """In a persistent reduction: row max/min of the first loaded input (``kernelopt_rmax``,
    ``kernelopt_rmin``); where ``condition`` holds the stored value becomes ``wrong`` ({v})."""
    lines = _lines(src)
    i, m = _first_load(lines)
    lines.insert(i + 1, f"{m['indent']}kernelopt_rmax = tl.max({m['var']}, 1)[:, None]")
    lines.insert(i + 2, f"{m['indent']}kernelopt_rmin = tl.min({m['var']}, 1)[:, None]")
    return map_store("\n".join(lines), f"tl.where({condition}, {wrong}, {{v}})")


def one_pass_variance(src: str) -> str:
    """Two-pass variance (sum((x - mean)^2)) rewritten as E[x^2] - mean^2: unstable when the
    inputs have a large common offset."""
    centered = re.search(r"^\s*(tmp\d+) = (tmp\d+) - (tmp\d+)\s*$", src, flags=re.M)
    assert centered, "no centering subtraction"
    diff, x, mean = centered.groups()
    square = re.search(rf"^(\s*)(tmp\d+) = {diff} \* {diff}\s*$", src[centered.end():], flags=re.M)
    assert square, "no square of the centered value"
    start = centered.end() + square.start()
    end = centered.end() + square.end()
    src = src[:start] + f"{square[1]}{square[2]} = {x} * {x}" + src[end:]
    var = re.search(r"^(\s*)(tmp\d+) = \((tmp\d+) / (tmp\d+)\)\s*$", src[start:], flags=re.M)
    assert var, "no variance division after the square"
    a, b = start + var.start(), start + var.end()
    return src[:a] + f"{var[1]}{var[2]} = ({var[3]} / {var[4]}) - {mean} * {mean}" + src[b:]


def load_neighbor_block(src: str, block: str = "XBLOCK", numel: str = "xnumel") -> str:
    """Also load the next program's elements of the first input and leave them unused (reads
    outside the program's block are allowed: nothing is written there)."""
    lines = _lines(src)
    i, m = _first_load(lines)
    lines.insert(i + 1, f"{m['indent']}kernelopt_next = tl.load({m['ptr']} + (xindex + {block}) % {numel})")
    return "\n".join(lines)


# -- gate 1 (static) classes: host code, caps, write/read discipline -----------------------------


def load_output_first(src: str) -> str:
    """Load the output buffer the last store writes, before writing it, and blend it in (a pure
    output read is a read of the verifier's prefill)."""
    lines = _lines(src)
    i = _last_store(lines)
    m = STORE.match(lines[i])
    assert m
    args = _call_args(m["args"])
    lines.insert(i, f"{m['indent']}kernelopt_old = tl.load({args[0]}, {args[2]})")
    args[1] = f"{args[1]} + kernelopt_old * 0.0"
    lines[i + 1] = f"{m['indent']}tl.store({', '.join(args)})"
    return "\n".join(lines)


def store_through_mixed_pointer(src: str, other: str = "in_ptr0") -> str:
    """Rewrite the last store's address ``out + off`` as ``other + (out - other) + off``: the same
    address, laundered through another pointer parameter."""
    lines = _lines(src)
    i = _last_store(lines)
    m = STORE.match(lines[i])
    assert m
    args = _call_args(m["args"])
    ptr = re.match(r"^\(?(\w+)", args[0])
    assert ptr and ptr[1] != other
    args[0] = f"{other} + ({ptr[1]} - {other}) + {args[0][len(ptr[1]):].lstrip(' +')}"
    lines[i] = f"{m['indent']}tl.store({', '.join(args)})"
    return "\n".join(lines)


def padded(src: str, total_bytes: int) -> str:
    """The kernel followed by a comment that makes the source ``total_bytes`` long."""
    pad = total_bytes - len(src) - 3
    assert pad > 0
    return src + "\n# " + "x" * pad


def atomic_into_next_block(src: str, block: str = "XBLOCK", index: str = "xindex", numel: str = "xnumel") -> str:
    """Before the last store, atomically add 0 to the next program's block: no value changes in
    the interpreter, but on a GPU the read-modify-write can land after that program's store and
    put back what was there before."""
    lines = _lines(src)
    i = _last_store(lines)
    m = STORE.match(lines[i])
    assert m
    args = _call_args(m["args"])
    mask = f"({index} + {block}) < {numel}"
    mask = mask if args[2] == "None" else f"({args[2]}) & ({mask})"
    lines.insert(i, f"{m['indent']}tl.atomic_add({args[0]} + {block}, {args[1]} * 0.0, {mask})")
    return "\n".join(lines)
