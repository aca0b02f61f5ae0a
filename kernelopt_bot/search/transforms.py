"""Source transformations of our own: strategy changes a launch config cannot express.

Each takes the compiler's kernel source and returns new source (or None when it does not apply).
They keep the kernel's name, parameters, mutation contract and heuristics decorator, so every
result is an ordinary candidate for the gates; none is trusted because we wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_LOOP = re.compile(r"^(?P<indent>\s*)for (?P<var>r\d_offset) in (?:tl\.)?range\((?P<args>[^)=]*)\):\s*$", re.M)
_EVICT = re.compile(r"eviction_policy='(evict_first|evict_last)'")


def pipelined_reduction_loop(stages: int) -> Callable[[str], str | None]:
    """Looped reductions: iterate with ``tl.range(..., num_stages=N)`` so loads of the next
    chunk are issued while the current one is reduced (software pipelining)."""

    def transform(source: str) -> str | None:
        if not _LOOP.search(source):
            return None
        return _LOOP.sub(lambda m: f"{m['indent']}for {m['var']} in tl.range({m['args']}, num_stages={stages}):",
                         source)

    transform.__name__ = f"pipelined_loop_{stages}"
    return transform


def flip_eviction(source: str) -> str | None:
    """Swap the cache-eviction hints: data Inductor streams once (evict_first) is kept, and
    reused data (evict_last) is streamed. Wins when Inductor's reuse guess is wrong for the shape."""
    if not _EVICT.search(source):
        return None
    return _EVICT.sub(lambda m: "eviction_policy='evict_last'" if m[1] == "evict_first"
                      else "eviction_policy='evict_first'", source)


def drop_eviction_hints(source: str) -> str | None:
    """Remove the eviction hints altogether and let the hardware's default policy decide."""
    new = re.sub(r",\s*eviction_policy='evict_(first|last)'", "", source)
    return new if new != source else None


_WELFORD_STEP = re.compile(
    r"^(?P<indent>[ \t]*)(?P<acc>\w+)_mean_next, (?P=acc)_m2_next, (?P=acc)_weight_next = "
    r"triton_helpers\.welford_reduce\(\s*(?P<value>\w+),\s*(?P=acc)_mean,\s*(?P=acc)_m2,\s*(?P=acc)_weight,"
    r"[^()\n]*(?:\n[^()\n]*)?\)[ \t]*$", re.M)


def shifted_sums_for_welford(source: str) -> str | None:
    """Looped mean/variance reductions (layer norm, group norm, var, std): Inductor accumulates
    each lane with Welford's update, one division per element (``mean += delta / count``). This
    accumulates the lane's sum and sum of squares instead, shifted by the lane's first value so
    that a large mean does not cancel the variance away (the shifted-data algorithm), with no
    division in the loop; the lanes' (mean, M2, count) are formed once after it and combined by
    Inductor's own ``triton_helpers.welford``, as before. The sum of squares is compensated
    (Kahan): plainly summed, on values with bf16's few significant bits, it came out 1.3e-6 low
    against float64 on average (11 float32 rounding units, where Welford's is unbiased), and
    gate 2 rightly rejected the group norm statistics of a bf16 convolution on the H200 (12-03b);
    compensated, the bias is 3e-8. Other rounding differs from Welford's, which gates 2 and 3
    judge like any candidate's."""
    accumulators = [step["acc"] for step in _WELFORD_STEP.finditer(source)]
    if not accumulators or any(f"{acc}_shift" in source for acc in accumulators):
        return None
    new = source
    for acc in accumulators:
        step = next(m for m in _WELFORD_STEP.finditer(new) if m["acc"] == acc)
        init = re.search(rf"^(?P<indent>[ \t]*){acc}_mean = (?P<zeros>tl\.zeros\([^\n]*\))[ \t]*$", new, re.M)
        combine = re.search(rf"^(?P<indent>[ \t]*)\w+, \w+, \w+ = triton_helpers\.welford\("
                            rf"{acc}_mean, {acc}_m2, {acc}_weight, \d+\)[ \t]*$", new, re.M)
        if init is None or combine is None or not init.end() < step.start() < step.end() < combine.start():
            return None
        indent, value, c = step["indent"], step["value"], combine["indent"]
        # Inductor's update of M2 after the step: masked, or plain where no mask applies.
        update = re.search(rf"^{re.escape(indent)}{acc}_m2 = (?:tl\.where\((?P<mask>[^\n]+), {acc}_m2_next, "
                           rf"{acc}_m2\)|{acc}_m2_next)[ \t]*$", new[step.end():combine.start()], re.M)
        if update is None:
            return None
        m2c_update = (f"tl.where({update['mask']}, {acc}_m2c_next, {acc}_m2c)" if update["mask"]
                      else f"{acc}_m2c_next")
        accumulate = "\n".join([
            f"{indent}{acc}_shift = tl.where({acc}_weight == 0, {value}, {acc}_shift)",
            # 0 for the lane's first value itself (an infinite one would give inf - inf = NaN)
            f"{indent}{acc}_delta = tl.where({acc}_weight == 0, 0.0, {value} - {acc}_shift)",
            f"{indent}{acc}_mean_next = {acc}_mean + {acc}_delta",
            # Kahan: {acc}_m2c holds what the sum of squares lost to rounding so far
            f"{indent}{acc}_square = {acc}_delta * {acc}_delta - {acc}_m2c",
            f"{indent}{acc}_m2_next = {acc}_m2 + {acc}_square",
            f"{indent}{acc}_m2c_next = ({acc}_m2_next - {acc}_m2) - {acc}_square",
            f"{indent}{acc}_weight_next = {acc}_weight + 1",
        ])
        # The lane's (sum, sum of squares, count) of shifted values into Welford's (mean, M2,
        # count); an empty lane is (0, 0, 0), which the combine weighs at nothing. M2's rounding
        # below zero is cut to zero; a NaN stays NaN (as Welford's would).
        finish = "\n".join([
            f"{c}{acc}_count = tl.where({acc}_weight == 0, 1.0, {acc}_weight)",
            f"{c}{acc}_m2 = {acc}_m2 - {acc}_mean * ({acc}_mean / {acc}_count)",
            f"{c}{acc}_m2 = tl.where(({acc}_weight == 0) | ({acc}_m2 < 0.0), 0.0, {acc}_m2)",
            f"{c}{acc}_mean = tl.where({acc}_weight == 0, 0.0, {acc}_shift + {acc}_mean / {acc}_count)",
        ])
        # Spliced from the last position back, so the earlier matches' offsets still hold.
        new = new[:combine.start()] + finish + "\n" + new[combine.start():]
        # The compensation advances where the sum does (Inductor's masked update of M2).
        m2_update = step.end() + update.end()
        new = new[:m2_update] + f"\n{indent}{acc}_m2c = {m2c_update}" + new[m2_update:]
        new = new[:step.start()] + accumulate + new[step.end():]
        new = (new[:init.end()] + f"\n{init['indent']}{acc}_shift = {init['zeros']}"
               + f"\n{init['indent']}{acc}_m2c = {init['zeros']}" + new[init.end():])
    return new



_LOAD = re.compile(r"^(?P<var>tmp\d+) = tl\.load\((?P<where>\w+ \+ \(.+\)), (?P<mask>[\w &]+), "
                   r"(?:eviction_policy='\w+', )?other=0\.0\)(?:\.to\(tl\.float32\))?$")
_INDEX_LINE = re.compile(r"^(?:r0_index|r0_mask|roffset|rindex|r0_\d+) = ")
_ROW_MASKS = {"r0_mask", "r0_mask & xmask", "xmask & r0_mask"}
_WHOLE_ROW = "for r0_offset in tl.range(0, r0_numel, R0_BLOCK):"


def _loops(lines: list[str]) -> list[tuple[int, int, int]]:
    """(for-line index, end index exclusive, indent) of every reduction loop in ``lines``."""
    out = []
    for i, line in enumerate(lines):
        m = _LOOP.match(line)
        if m:
            indent, j = len(m["indent"]), i + 1
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
                j += 1
            out.append((i, j, indent))
    return out


def _shifted_sum_loop(lines: list[str], start: int, end: int) -> dict[str, object] | None:
    """A loop that only sums ``x - s1 - s2 ...`` of one load (``s`` fixed in the loop, the row's
    mask only): what it reads, how it is masked, the shifts, the accumulator and its name."""
    body = [ln.strip() for ln in lines[start + 1:end] if ln.strip() and not _INDEX_LINE.match(ln.strip())]
    invariant = _loop_invariant(body)  # the log of the row's sum, computed in the loop on torch 2.11's GPU
    body = [ln for ln in body if ln not in invariant]
    if len(body) < 5:
        return None
    load = _LOAD.match(body[0])
    if load is None or load["mask"] not in _ROW_MASKS:
        return None
    value, rest = load["var"], body[1:]
    shifts: list[str] = []  # x - s1 - s2 ..., with casts to float32 (bf16 data) anywhere in the chain
    while rest and (m := re.fullmatch(rf"(tmp\d+) = {value}(?: - (tmp\d+)|\.to\(tl\.float32\))", rest[0])):
        value, rest = m[1], rest[1:]
        shifts += [m[2]] if m[2] else []
    if not shifts or len(rest) != 3:
        return None
    spread = re.fullmatch(rf"(tmp\d+) = tl\.broadcast_to\({value}, \[XBLOCK, R0_BLOCK\]\)", rest[0])
    add = spread and re.fullmatch(rf"(tmp\d+) = (_tmp\d+) \+ {spread[1]}", rest[1])
    keep = add and re.fullmatch(rf"{add[2]} = tl\.where\({re.escape(load['mask'])}, {add[1]}, {add[2]}\)", rest[2])
    assigned = {ln.split(" = ", 1)[0] for ln in body}
    if not keep or any(shift in assigned for shift in shifts):
        return None
    return {"where": load["where"], "mask": load["mask"], "shifts": shifts, "acc": add[2], "invariant": invariant}


def _loop_invariant(body: list[str]) -> list[str]:
    """The lines of a loop body that compute the same value every pass (pure expressions of
    values fixed before the loop, in order), so that they can move out of it."""
    assigned = {ln.split(" = ", 1)[0] for ln in body if re.match(r"^_?tmp\d+ = ", ln)}
    moved: list[str] = []
    fixed: set[str] = set()  # the names the moved lines assign
    for line in body:
        m = re.fullmatch(r"(tmp\d+) = (.+)", line)
        if m is None or re.search(r"tl\.(load|store|atomic|rand)|device_assert|\br0_|\br(index|offset)\b", m[2]):
            continue
        if all(name not in assigned or name in fixed for name in re.findall(r"\b_?tmp\d+\b", m[2])):
            moved.append(line)
            fixed.add(m[1])
    return moved


def fold_shifted_sum_loop(source: str) -> str | None:
    """A looped reduction that reads its rows again only to sum ``x - max - lse`` (a
    cross-entropy's label smoothing after its softmax loop; any sum of one load less values fixed
    for the row) reads them once less: an earlier loop over the same row also sums ``x``, and the
    sum becomes ``sum(x) - n * (max + lse)`` (shifted per lane, counted per lane: see below). On
    the H200 such a kernel ran at 44% of the one-read copy roofline and no launch config moved it.
    Rounding differs, which gates 2 and 3 judge like any candidate's."""
    lines = source.splitlines()
    # Only whole rows walked from 0 (a cooperative reduction's loop covers its share of the row)
    loops = [loop for loop in _loops(lines) if lines[loop[0]].strip() == _WHOLE_ROW]
    for k, (start, end, indent) in reversed(list(enumerate(loops))):
        found = _shifted_sum_loop(lines, start, end)
        pointer = str(found["where"]).split(" + ", 1)[0] if found else ""
        if found is None or re.search(rf"tl\.store\({pointer} \+", source):
            continue  # a row the kernel writes in place reads otherwise in an earlier loop
        acc, pad = found["acc"], " " * indent
        init = next((i for i in range(start - 1, -1, -1)
                     if lines[i].strip() == f"{acc} = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)"), None)
        total = next((i for i in range(end, len(lines))
                      if re.fullmatch(rf"\s*tmp\d+ = tl\.sum\({acc}, 1\)\[:, None\]", lines[i])), None)
        if init is None or total is None:
            continue
        for first, first_end, _ in loops[:k]:  # the earliest loop that loads the same row alike
            hit = next((i for i in range(first + 1, first_end)
                        if (m := _LOAD.match(lines[i].strip())) and m["where"] == found["where"]
                        and m["mask"] == found["mask"]), None)
            if hit is None:
                continue
            loaded = _LOAD.match(lines[hit].strip())
            assert loaded is not None
            name, inner = f"_kfold{k}", lines[hit][:len(lines[hit]) - len(lines[hit].lstrip())]
            result = lines[total].split(" = ", 1)[0].strip()
            # Edits at the original line numbers, the last first: (line, lines removed, lines put there)
            # Each lane sums x less its own first finite value c (no cancellation when the row sits
            # far from zero: logits near 1000 lose nothing) and counts its elements n, so that
            # sum(x - s) = sum over lanes of (S - n * (s - c)); an infinite or NaN first value is
            # no shift (c = 0), and -inf, +inf and NaN reach the sum as in the original.
            mask = found["mask"]
            shift_c = f"({found['shifts'][0]} - {name}_c)" + "".join(f" + {x}" for x in found["shifts"][1:])  # type: ignore[index]
            edits = [  # a lane with no element adds nothing (0 * inf would be NaN)
                (total, 1, [f"{pad}{line}" for line in found["invariant"]] + [  # type: ignore[attr-defined]
                    f"{pad}{result} = tl.sum({name} - tl.where({name}_n > 0, {name}_n * ({shift_c}), 0.0), 1)"
                    "[:, None]"]),
                (start, end - start, []),  # the loop that read the rows again
                (init, 1, []),  # its accumulator's start
                (hit + 1, 0, [
                    f"{inner}{name}_x = tl.broadcast_to({loaded['var']}.to(tl.float32), [XBLOCK, R0_BLOCK])",
                    f"{inner}{name}_c = tl.where(r0_offset == 0, "
                    f"tl.where(tl.abs({name}_x) < float('inf'), {name}_x, 0.0), {name}_c)",
                    f"{inner}{name} = tl.where({mask}, {name} + ({name}_x - {name}_c), {name})",
                    f"{inner}{name}_n = tl.where({mask}, {name}_n + 1.0, {name}_n)"]),
                (first, 0, [f"{pad}{name}{part} = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)"
                            for part in ("", "_c", "_n")]),
            ]
            new = list(lines)
            for at, removed, added in sorted(edits, key=lambda e: -e[0]):
                new[at:at + removed] = added
            return "\n".join(new) + ("\n" if source.endswith("\n") else "")
    return None


_COMBINE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<max>\w+), (?P<sum>\w+) = triton_helpers\.online_softmax_combine\(\s*"
    r"(?P<m>\w+), (?P<s>\w+), (?P<x>\w+), (?P<fast>True|False)\s*\)", re.M)


def one_exp_online_softmax(source: str) -> str | None:
    """An online softmax loop (Inductor's ``online_softmax_combine``) takes two exponentials per
    element: the running sum's rescale ``exp(m - max)`` and the new term ``exp(x - max)``, one of
    which is always ``exp(0) = 1``. Taking only the other, ``exp(-|x - m|)``, gives the same bits
    for finite values (``s * e + 1`` where x raises the maximum, ``s + e`` where it does not) and
    the same results for -inf, +inf and NaN; on the H200 such loops run at 23-44% of the copy
    roofline, bound by instructions rather than memory."""
    def inline(m: re.Match[str]) -> str:
        pad, new_max, new_sum, old_max, old_sum, x = (m[k] for k in ("indent", "max", "sum", "m", "s", "x"))
        exp = "tl_math.exp" if m["fast"] == "True" else "libdevice.exp"
        if not re.search(rf"^from .* import .*\b{exp.split('.')[0]}\b", source, re.M):
            return m[0]  # the kernel module must import it (Inductor's header does)
        up, e = f"{new_max}_up", f"{new_max}_e"
        # an infinite or NaN maximum makes the exponent NaN, as the two-exponential form's
        # exp(inf - inf) does; a maximum of -inf adds 1 as it does (its scales are both 1)
        return "\n".join([
            f"{pad}{new_max} = triton_helpers.maximum({old_max}, {x})",
            f"{pad}{up} = {x} > {old_max}",
            f"{pad}{e} = {exp}(tl.where({up}, {old_max} - {x}, {x} - {old_max}) + ({new_max} - {new_max}))",
            f"{pad}{new_sum} = tl.where({new_max} == float('-inf'), {old_sum} + 1.0, "
            f"tl.where({up}, {old_sum} * {e} + 1.0, {old_sum} + {e}))",
        ])

    new = _COMBINE.sub(inline, source)
    return new if new != source else None


_DIVISION = re.compile(r"^(?P<pad>[ \t]*)(?P<out>tmp\d+) = \(?(?P<num>\w+) / (?P<den>[A-Za-z_]\w*)\)?[ \t]*$")
_ASSIGNED = re.compile(r"^[ \t]*(?P<names>\w+(?:\s*,\s*\w+)*)\s*=[^=]")


def _assigned(line: str) -> set[str]:
    """The names a line assigns (``a = ...``, ``a, b = ...``); none for anything else."""
    m = _ASSIGNED.match(line)
    return {n.strip() for n in m["names"].split(",")} if m else set()


def multiply_by_hoisted_reciprocal(source: str) -> str | None:
    """Divisions inside a reduction loop by a value fixed before it (a softmax's row sum, a
    norm): the reciprocal is taken once before the loop and the loop multiplies. Triton's ``/``
    on floats is the IEEE-rounded division, several instructions an element; the loops it sits
    in (a looped softmax's second pass) are bound by instructions, not memory, on the H200.
    ``x * (1 / y)`` is within about an ulp of ``x / y``, and alike for 0, inf and NaN; a divisor
    below 2**-126 would give inf where the division is finite (never a row sum of exponentials,
    which is at least 1). The gates judge the rounding like any candidate's."""
    lines = source.split("\n")
    inserts: dict[int, list[str]] = {}  # before each loop: the reciprocals its divisions now use
    for start, end, indent in _loops(lines):
        in_loop = set().union(*(_assigned(ln) for ln in lines[start + 1:end]))
        before = set().union(*(_assigned(ln) for ln in lines[:start]))
        hoisted: set[str] = set()
        for i in range(start + 1, end):
            m = _DIVISION.match(lines[i])
            if m is None or m["den"] in in_loop or m["den"] not in before or f"{m['den']}_rcp" in source:
                continue
            if m["den"] not in hoisted:
                inserts.setdefault(start, []).append(f"{' ' * indent}{m['den']}_rcp = 1.0 / {m['den']}")
                hoisted.add(m["den"])
            lines[i] = f"{m['pad']}{m['out']} = ({m['num']} * {m['den']}_rcp)"
    if not inserts:  # every rewritten division has its reciprocal inserted
        return None
    for start in sorted(inserts, reverse=True):  # from the last loop back: earlier indices hold
        lines[start:start] = inserts[start]
    return "\n".join(lines)


_DEF = re.compile(r"^(?P<pad>[ \t]*)(?P<name>_?tmp\d+) = (?P<expr>.+?)[ \t]*$")
_NAME = re.compile(r"\b_?tmp\d+\b")
# A load of values: its mask (``None`` where the sizes need none: on the H200 a 1024-wide causal
# softmax's score load was ``tl.load(in_out_ptr0 + (...), None)``), hint and ``other`` as Inductor writes them.
_VALUE_LOAD = re.compile(r"^tl\.load\((?P<where>[^,]+), (?P<mask>[^,=]+?)"
                         r"(?P<rest>(?:, eviction_policy='\w+')?(?:, other=[^)]+)?\))(?P<cast>\.to\(tl\.\w+\))?$")
_WRITES = re.compile(r"tl\.(store|atomic_\w+|debug_barrier)\(")
_IMPURE = re.compile(r"tl\.(load|store|atomic|rand|sum|max|min|reduce|cumsum|cumprod|associative_scan)|"
                     r"triton_helpers\.(max2|min2|welford|online_softmax)|device_assert")


def _where_args(expr: str) -> list[str] | None:
    """The three arguments of ``tl.where(a, b, c)`` when ``expr`` is exactly that call."""
    if not expr.startswith("tl.where(") or not expr.endswith(")"):
        return None
    args, depth, start = [], 0, len("tl.where(")
    for i in range(start, len(expr) - 1):
        if expr[i] in "([":
            depth += 1
        elif expr[i] in ")]":
            depth -= 1
            if depth < 0:
                return None
        elif expr[i] == "," and depth == 0:
            args.append(expr[start:i].strip())
            start = i + 1
    args.append(expr[start:len(expr) - 1].strip())
    return args if len(args) == 3 and depth == 0 else None


def _skip_one_discarded_load(lines: list[str], done: set[str]) -> list[str] | None:
    """One load whose every use ends in a ``tl.where`` branch that a condition independent of it
    discards, loaded only where that branch is taken (see :func:`skip_discarded_loads`)."""
    defs = {m["name"]: (i, m) for i, line in enumerate(lines) if (m := _DEF.match(line))}
    assigned = [m["name"] for line in lines if (m := _DEF.match(line))]
    uses: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        rhs = line.split(" = ", 1)[1] if _DEF.match(line) else line
        for name in set(_NAME.findall(rhs)):
            uses.setdefault(name, []).append(i)
    for name, (at, m) in defs.items():
        load = _VALUE_LOAD.match(m["expr"])
        if load is None or name in done or assigned.count(name) != 1:  # a loop's accumulator is assigned again
            continue
        if load["where"].count("(") != load["where"].count(")"):
            continue  # an address with a comma of its own, misread as the mask's: not a load we know
        pad = m["pad"]
        chain, order, frontier = {name}, [at], [name]  # the load and the values computed from it alone
        where_at: int | None = None
        ok = True
        while frontier and ok:
            current = frontier.pop()
            for i in uses.get(current, []):
                d = _DEF.match(lines[i])
                if d is None or d["pad"] != pad or i <= at:
                    ok = False
                    break
                args = _where_args(d["expr"])
                if args is not None and current in _NAME.findall(args[1] + " " + args[2]) \
                        and current not in _NAME.findall(args[0]):
                    if where_at not in (None, i):
                        ok = False
                        break
                    where_at = i
                    continue
                if _IMPURE.search(d["expr"]):
                    ok = False
                    break
                if d["name"] not in chain:
                    chain.add(d["name"])
                    order.append(i)
                    frontier.append(d["name"])
        if not ok or where_at is None:
            continue
        w = _DEF.match(lines[where_at])
        assert w is not None
        cond, if_true, if_false = _where_args(w["expr"]) or ["", "", ""]
        # Every value computed from the load must end in the where: one that goes elsewhere (or
        # nowhere) would see the lanes the new mask does not read.
        reaching = chain & set(_NAME.findall(if_true + " " + if_false))
        computed = {lines[i].split(" = ", 1)[0].strip(): lines[i].split(" = ", 1)[1] for i in order}
        grown = True
        while grown:
            more = {n for out, expr in computed.items() if out in reaching for n in _NAME.findall(expr) if n in chain}
            grown = not more <= reaching
            reaching |= more
        if reaching != chain:
            continue
        in_true = bool(chain & set(_NAME.findall(if_true)))
        in_false = bool(chain & set(_NAME.findall(if_false)))
        if in_true == in_false or not re.fullmatch(r"_?tmp\d+", cond) or cond in chain:
            continue  # both branches need the value, or the condition is not a plain value of its own
        if cond not in defs or defs[cond][0] >= where_at:
            continue
        # The block from the load to the where: one level (no loop or block ends between them)
        between = lines[at:where_at + 1]
        if any(ln.strip() and (len(ln) - len(ln.lstrip())) < len(pad) for ln in between):
            continue
        if any(_LOOP.match(ln) for ln in between):
            continue
        if any(_WRITES.search(ln) for ln in between):
            continue  # a store passed on the way down could be what the load reads (an in_out_ptr)
        keep = cond if in_true else f"~{cond}"
        if f"({keep})" in load["mask"]:
            continue  # masked so already
        mask = f"({keep})" if load["mask"] == "None" else f"({load['mask']}) & ({keep})"
        rest = load["rest"] if "other=" in load["rest"] else load["rest"][:-1] + ", other=0.0)"
        new_load = f"{pad}{name} = tl.load({load['where']}, {mask}{rest}{load['cast'] or ''}"
        moved = [new_load] + [lines[i] for i in sorted(order) if i != at]
        leaving = set(order)
        out = [ln for i, ln in enumerate(lines) if i not in leaving]
        insert = out.index(lines[where_at])
        out[insert:insert] = moved
        done.add(name)
        return out
    return None


def skip_discarded_loads(source: str) -> str | None:
    """Loads whose values a mask throws away are not read: where every use of a load ends in one
    branch of a ``tl.where`` whose condition does not depend on it (a causal or padding mask's
    ``masked_fill``: ``tl.where(masked, -inf, scores * scale)``), the load is moved down to the
    ``where`` and masked with its condition, so the lanes it discards read nothing (``other``
    instead). A causal attention mask discards half of the scores: the kernel reads a quarter
    less (the masked half of the reads) and writes as before. The values computed from the load
    move down with it; every lane the ``where`` keeps gets the same bits as before."""
    lines = source.split("\n")
    done: set[str] = set()
    changed = False
    while (new := _skip_one_discarded_load(lines, done)) is not None:
        lines, changed = new, True
    return "\n".join(lines) if changed else None


ALIGN = 8  # elements: a 16-byte vector of bf16 (two of fp32), the widest load a thread issues
_ROW_LENGTH = re.compile(r"^[ \t]+r0_numel = (?P<n>\d+)[ \t]*$", re.M)
_ROW_ACCESS = re.compile(r"(?P<ptr>\b(?:in_out_ptr|in_ptr|out_ptr)\d+) \+ \((?P<r>r0_\d+) \+ (?P<base>[^()]*)\)")
_ROW_LOAD = re.compile(r"^(?P<pad>[ \t]+)(?P<var>tmp\d+) = tl\.load\((?P<where>[^,]+), (?P<mask>[\w &]+)(?P<rest>,.*|\).*)$")
_ROW_STORE = re.compile(r"^(?P<pad>[ \t]+)tl\.store\((?P<where>[^,]+), (?P<value>\w+), (?P<mask>[\w &]+)\)[ \t]*$")
_FULL_MASK = {"r0_mask": "None", "r0_mask & xmask": "xmask", "xmask & r0_mask": "xmask"}
# Kernels whose result depends on which lane holds which element, masked ones included: a looped
# scan combines every lane of a chunk in order (the shifted first chunk's masked lanes, holding
# ``other``, would enter every prefix: a cumulative product of zeros), a sort orders them.
_LANE_ORDER = re.compile(r"associative_scan|_scan\w*\(|tl\.sort\(|tl\.(?:cumsum|cumprod)\(|\bflip\(")


def _row_base(lines: list[str], loops: list[tuple[int, int, int]]) -> str | None:
    """The row offset (``50257*x0``) most of the whole-row loops' loads and stores add to the
    row's index, where every name in it is set before the first loop; None: none such."""
    counts: dict[str, int] = {}
    for start, end, _ in loops:
        aliases = {ln.split(" = ")[0].strip() for ln in lines[start + 1:end] if ln.strip().endswith(" = r0_index")}
        for line in lines[start + 1:end]:
            for m in _ROW_ACCESS.finditer(line):
                if m["r"] in aliases and "r0_" not in m["base"] and re.search(r"\bx", m["base"]):
                    counts[m["base"]] = counts.get(m["base"], 0) + 1
    if not counts:
        return None
    base = max(counts, key=counts.__getitem__)
    before = "\n".join(lines[:loops[0][0]])
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", base))
    if any(not re.search(rf"^[ \t]+{name} = ", before, re.M) for name in names):
        return None
    return base


def _aligned_access(line: str, aliases: set[str], base: str) -> list[str] | None:
    """A load or store of the row at ``base`` as two: unmasked (but for ``xmask``) at the aligned
    address where the whole chunk is inside the row, masked elsewhere; None: not such a line."""
    m = _ROW_LOAD.match(line) or _ROW_STORE.match(line)
    if m is None or m["mask"] not in _FULL_MASK:
        return None
    access = _ROW_ACCESS.fullmatch(m["where"])
    if access is None or access["r"] not in aliases or access["base"] != base:
        return None
    where, pad = f"{access['ptr']} + (_kbase + _krow)", m["pad"]
    full = _FULL_MASK[m["mask"]]
    if "var" in m.groupdict():
        rest = m["rest"] if full != "None" else re.sub(r",\s*other=(?:float\([^)]*\)|[^,)]+)", "", m["rest"])
        whole = f"{m['var']} = tl.load({where}, {full}{rest}"
        part = f"{m['var']} = tl.load({where}, {m['mask']}{m['rest']}"
    else:
        whole = f"tl.store({where}, {m['value']}, {full})"
        part = f"tl.store({where}, {m['value']}, {m['mask']})"
    return [f"{pad}if _kfull:", f"{pad}    {whole}", f"{pad}else:", f"{pad}    {part}"]


def aligned_row_loads(source: str) -> str | None:
    """Looped reductions over rows whose length is not a multiple of 8 (a 50257-word vocabulary,
    a 5123-wide layer norm): Inductor reads ``in_ptr0 + (r0_1 + 50257*x0)`` under the mask
    ``r0_index < 50257``, and neither the address (an odd row offset) nor the mask (an odd bound)
    lets Triton prove that eight neighbouring elements are aligned and all valid, so every thread
    loads its elements one at a time: the H200's bf16 kernels of such rows ran at 23-31% of the
    copy roofline, their fp32 twins (twice the bytes a load) at 44-55%. Here each row's chunks
    start at its offset rounded down to a multiple of 8 (``(base // 8) * 8``), the row's index
    being the chunk's less that shift, and a chunk wholly inside the row (every one but the
    first and the last) loads and stores without the row's mask: 16-byte vectors. Each lane
    holds other elements than before, so sums round differently; the gates judge that."""
    m = _ROW_LENGTH.search(source)
    if m is None or int(m["n"]) % ALIGN == 0 or "_kfull" in source or _LANE_ORDER.search(source):
        return None
    lines = source.split("\n")
    loops = [(i, j, ind) for i, j, ind in _loops(lines) if lines[i].strip() == _WHOLE_ROW]
    base = _row_base(lines, loops) if loops else None
    if base is None:
        return None
    out, changed, at = list(lines), False, 0
    for start, end, indent in loops:
        pad, inner = " " * indent, None
        body: list[str] = []
        aliases = {ln.split(" = ")[0].strip() for ln in lines[start + 1:end] if ln.strip().endswith(" = r0_index")}
        for line in lines[start + 1:end]:
            text = line.strip()
            if text == "r0_index = r0_offset + r0_base":
                inner = line[:len(line) - len(line.lstrip())]
                body += [f"{inner}_krow = r0_offset + r0_base", f"{inner}r0_index = _krow - _kshift"]
            elif text == "r0_mask = r0_index < r0_numel":
                body += [f"{inner}r0_mask = (r0_index >= 0) & (r0_index < r0_numel)",
                         f"{inner}_kfull = (r0_offset >= {ALIGN}) & (r0_offset + R0_BLOCK <= r0_numel)"]
            elif inner is not None and (split := _aligned_access(line, aliases, base)) is not None:
                body += split
            else:
                body.append(line)
        if not any(ln.strip() == "if _kfull:" for ln in body):
            continue  # a loop that does not read or write the row: left as it is
        if sum(ln.strip().startswith("r0_mask = (r0_index >= 0)") for ln in body) != 1:
            return None  # a loop without Inductor's index lines: its lanes' masks are not the row's
        header = f"{pad}for r0_offset in tl.range(0, r0_numel + {ALIGN - 1}, R0_BLOCK):"
        # Rounded down by // and *, which Triton's alignment analysis follows (a tl.multiple_of
        # hint on this [XBLOCK, 1] tensor crashed Triton 3.6's compiler on the H200).
        prelude = [] if changed else [f"{pad}_kbase = (({base}) // {ALIGN}) * {ALIGN}",
                                      f"{pad}_kshift = ({base}) - _kbase"]
        at_start = start + at
        out[at_start:at_start + (end - start)] = [*prelude, header, *body]
        at += len(prelude) + 1 + len(body) - (end - start)
        changed = True
    return "\n".join(out) if changed else None


TRANSFORMS: tuple[Callable[[str], str | None], ...] = (
    pipelined_reduction_loop(2),
    pipelined_reduction_loop(3),
    shifted_sums_for_welford,
    fold_shifted_sum_loop,
    one_exp_online_softmax,
    multiply_by_hoisted_reciprocal,
    skip_discarded_loads,
    flip_eviction,
    drop_eviction_hints,
    aligned_row_loads,  # last: it rewrites the loop header the others look for
)


STACKED = "stacked_transforms"
# Transformations after which the kernel's fastest launch config is another: on the H200 the
# bf16 cross-entropy kernel with aligned rows was 10% faster at XBLOCK=2, R0_BLOCK=1024 and 6% slower at
# the compiler's best config. The tuner searches their configs as it does a strategy rewrite's.
OWN_LAUNCH_SPACE = frozenset({aligned_row_loads.__name__})
# Transformations that are alternatives to each other: a stack takes the first of each group it
# is given (dropping the hints after flipping them is dropping them alone).
_EXCLUSIVE = {"pipelined_loop_2": "pipelining", "pipelined_loop_3": "pipelining",
              "flip_eviction": "eviction", "drop_eviction_hints": "eviction"}


def stack(source: str, names: list[str]) -> tuple[str, list[str]]:
    """``source`` with the named transformations applied one on another, in the order given;
    of alternatives (two pipelining depths, the two eviction rewrites) only the first, and one
    that no longer applies to what the earlier ones made is skipped. Returns the source and
    the names that applied."""
    by_name = {t.__name__: t for t in TRANSFORMS}
    names = sorted(names, key=lambda name: name == aligned_row_loads.__name__)  # last: see TRANSFORMS
    applied: list[str] = []
    taken: set[str] = set()
    for name in names:
        group = _EXCLUSIVE.get(name, name)
        if group in taken:
            continue
        new = by_name[name](source) if name in by_name else None
        if new is not None and new != source:
            source, applied = new, [*applied, name]
            taken.add(group)
    return source, applied


def applicable(source: str) -> list[tuple[str, str]]:
    """(name, new source) for every transformation that applies to ``source``."""
    out = []
    for transform in TRANSFORMS:
        new = transform(source)
        if new is not None and new != source:
            out.append((transform.__name__, new))
    return out
