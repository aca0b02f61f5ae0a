"""Strategy rewrites taken from the compiler itself: the same computation, generated another way.

A launch config cannot change how a kernel walks its data. Inductor turns a reduction over rows
longer than 1024 elements into a *looped* reduction (``triton_red_``): it reads each row once per
pass (a layer norm followed by a softmax reads it four times and writes it three). When the row
fits on chip, a *persistent* reduction (``triton_per_``) reads it once, keeps it in registers and
computes the mean and variance in two exact passes over registers instead of Welford's running
update. Inductor can generate that kernel; its heuristic just stops at 1024. So the engine
compiles the model once more with that threshold raised (:class:`WideRowsChoices`, Inductor's
own extension point ``inductor_choices_class``), takes the persistent kernel's body, and grafts
it into the original kernel's module: same name, parameters, decorator and mutation contract,
with ``R0_BLOCK`` (the row padded to a power of two, a constant in the persistent body) pinned by
the candidate's launch config. Every graft is an ordinary candidate for the gates.

Only static row lengths qualify (the persistent body has the length baked in), and the pinned
config is the one that runs (``pack.runtime.pin_config_source`` turns off Inductor's R0_BLOCK
halving, which would skip part of a persistent row).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from kernelopt_bot.capture.artifact import TritonKernel

PERSISTENT_REWRITE = "one_pass_persistent"
# Longest row (elements) tried in registers: 64 KB of fp32 for one program's row. 32768 (a
# 32000-word vocabulary) was measured on an H100 (12-07b call3, against 16384 on the same machine):
# the KL divergence was 1.519x either way, and the softmax entropy fell from 1.329x to 1.274x,
# its one-pass candidates taking two of the kernel's three gate slots from a better looped config.
MAX_ROW = 16384
_FIXED_RBLOCK = re.compile(r"^\s*R0_BLOCK\s*:\s*tl\.constexpr\s*=\s*(\d+)\s*$", re.M)
_NAME_CORE = re.compile(r"^triton_(?:red|per)_(?P<core>.+?)_\d+$")


@dataclass(frozen=True)
class Rewrite:
    """A rewritten kernel: ``source`` is the original kernel's module with a new body; every
    launch config it runs with must carry ``fixed`` (constexprs the new body depends on)."""

    name: str
    source: str
    fixed: dict[str, int] = field(default_factory=dict)
    donor: TritonKernel | None = None  # the compiler's kernel the body came from (its config space)


def row_length(kernel: TritonKernel, args: tuple[Any, ...]) -> int | None:
    """The recorded ``r0_numel`` of a looped reduction, or None (not one, or not recorded)."""
    if "r0_numel" not in kernel.params or "R0_BLOCK" not in kernel.params:
        return None
    index = kernel.params.index("r0_numel")
    value = args[index] if index < len(args) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def wants_persistent(kernel: TritonKernel, args: tuple[Any, ...]) -> bool:
    """A looped reduction whose rows would fit on chip."""
    length = row_length(kernel, args)
    return kernel.name.startswith("triton_red_") and length is not None and 1 < length <= MAX_ROW


_WIDE_ROWS_CHOICES: list[type] = []


def __getattr__(name: str) -> Any:
    """``WideRowsChoices`` by name, as pickle looks a class up: Inductor pickles the choices class
    into its compile cache's key, and a class it cannot find by name made it skip the cache (and
    warn with a traceback) on every compile of the rewrite."""
    if name == "WideRowsChoices":
        return wide_rows_choices()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def wide_rows_choices() -> type:
    """Inductor's heuristic choices with persistent reductions up to :data:`MAX_ROW` elements
    (rows reduced along the inner dimension, statically known lengths); every other choice is
    Inductor's own. Defined on first use (it imports Inductor), once, and findable by name."""
    if _WIDE_ROWS_CHOICES:
        return _WIDE_ROWS_CHOICES[0]
    from torch._inductor.choices import InductorChoices
    from torch._inductor.runtime.hints import ReductionHint
    from torch._inductor.virtualized import V

    class WideRowsChoices(InductorChoices):
        @classmethod
        def uuid(cls) -> str:  # Inductor's compile cache keys on it
            return f"kernelopt-wide-rows-{MAX_ROW}"

        @staticmethod
        def should_use_persistent_reduction(features: Any, cooperative_reduction: bool) -> bool:
            default = InductorChoices.should_use_persistent_reduction(features, cooperative_reduction)
            if default or cooperative_reduction or features.get_reduction_hint() != ReductionHint.INNER:
                return default
            return bool(V.graph.sizevars.statically_known_leq(features.reduction_numel, MAX_ROW))

    WideRowsChoices.__qualname__ = "WideRowsChoices"
    _WIDE_ROWS_CHOICES.append(WideRowsChoices)
    return WideRowsChoices


def graft_persistent(original: TritonKernel, donor: TritonKernel) -> Rewrite | None:
    """The original looped kernel's module with the donor's persistent body, or None where the
    two do not line up (other parameters, no fixed R0_BLOCK in the donor)."""
    if "R0_BLOCK" not in original.params or [p for p in original.params if p != "R0_BLOCK"] != donor.params:
        return None
    body = _function_body(donor.source, donor.name)
    target = _function_body(original.source, original.name)
    if body is None or target is None:
        return None
    donor_lines = donor.source.splitlines()[body[0]:body[1]]
    text = "\n".join(donor_lines)
    match = _FIXED_RBLOCK.search(text)
    if match is None:
        return None
    rblock = int(match.group(1))
    text = _FIXED_RBLOCK.sub("", text, count=1)
    text = "\n".join(line for line in text.splitlines() if line.strip() or line == "")
    lines = original.source.splitlines()
    grafted = "\n".join([*lines[:target[0]], *[ln for ln in text.splitlines() if ln.strip()], *lines[target[1]:]])
    return Rewrite(PERSISTENT_REWRITE, grafted + "\n", {"R0_BLOCK": rblock}, donor)


def _function_body(source: str, name: str) -> tuple[int, int] | None:
    """(first, end) line indices (0-based, end exclusive) of function ``name``'s body."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name and node.body:
            return node.body[0].lineno - 1, int(node.end_lineno or node.body[-1].lineno)
    return None


def match_donors(originals: list[TritonKernel], donors: list[TritonKernel]) -> dict[str, TritonKernel]:
    """Each original looped kernel's persistent twin from the other compile: same graph, same
    fused operations (the name between ``triton_red_``/``triton_per_`` and the index), the same
    pointer parameters, and the same problem (the ``xnumel``/``r0_numel`` the bodies fix).

    The sizes are what make it a twin: a split reduction's two stages share a name's core and a
    signature (on the H200, an amax over 65536 rows grafted its second stage, 5123 outputs of
    32-wide rows, into its first, 163936 outputs of 2048-wide rows: 31 of every 32 outputs went
    unwritten, and gate 2 rejected three candidates that never had a chance)."""
    out: dict[str, TritonKernel] = {}
    by_core: dict[tuple[int, str], list[TritonKernel]] = {}
    for donor in donors:
        m = _NAME_CORE.match(donor.name)
        if m and donor.name.startswith("triton_per_"):
            by_core.setdefault((donor.graph, m["core"]), []).append(donor)
    taken: set[int] = set()
    for kernel in originals:
        m = _NAME_CORE.match(kernel.name)
        sizes = fixed_sizes(kernel.source, kernel.name)
        if not m or "xnumel" not in sizes or "r0_numel" not in sizes:
            continue
        params = [p for p in kernel.params if p != "R0_BLOCK"]
        for twin in by_core.get((kernel.graph, m["core"]), []):
            if id(twin) not in taken and twin.params == params and fixed_sizes(twin.source, twin.name) == sizes:
                out[kernel.name] = twin
                taken.add(id(twin))
                break
    return out


_FIXED_NUMEL = re.compile(r"^\s+(?P<name>[xyz]numel|r\d_numel)\s*=\s*(?P<value>\d+)\s*$", re.M)


def fixed_sizes(source: str, name: str) -> dict[str, int]:
    """The sizes a kernel's body fixes (``xnumel = 163936``, ``r0_numel = 2048``: Inductor writes
    them for static shapes, over the parameters of the same names), from kernel ``name``'s body."""
    body = _function_body(source, name)
    if body is None:
        return {}
    text = "\n".join(source.splitlines()[body[0]:body[1]])
    return {m["name"]: int(m["value"]) for m in _FIXED_NUMEL.finditer(text)}


def qualifying(capture: Any) -> list[TritonKernel]:
    """The captured looped reductions whose rows fit on chip."""
    return [k for k in capture.artifact.kernels
            if (k.graph, k.name) in capture.recordings and wants_persistent(k, capture.recording(k.graph, k.name).args)]


def persistent_rewrites(capture: Any, mode: str | None = None) -> dict[tuple[int, str], Rewrite]:
    """For each looped reduction of ``capture`` whose rows fit on chip, its one-pass persistent
    rewrite (compiled once more, this time with :func:`wide_rows_choices`); empty when none
    qualifies, and no compile is spent then. Runs in the engine, beside the capture."""
    import torch
    from torch._inductor import config as inductor_config
    from torch._inductor.virtualized import V

    from kernelopt_bot.capture.recorder import capture as capture_again

    wanted = qualifying(capture)
    if not wanted:
        return {}
    from torch._functorch import config as functorch_config

    choices = wide_rows_choices()
    # Inductor builds its choices handler once per thread, on the first compile (the capture's),
    # and keeps it: the handler is set, not only the config. And the compile caches do not key on
    # the choices (torch 2.13): with them on, this compile was the capture's own, read back from
    # the cache (no persistent twin), or would have left its kernels for the next plain compile.
    with inductor_config.patch(inductor_choices_class=choices, fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False), V.set_choices_handler(choices()):
        other = capture_again(capture.target, record=False, mode=mode)
    donors = list(other.artifact.kernels)
    del other
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    twins = match_donors(wanted, donors)
    out: dict[tuple[int, str], Rewrite] = {}
    for kernel in wanted:
        donor = twins.get(kernel.name)
        rewrite = graft_persistent(kernel, donor) if donor is not None else None
        if rewrite is not None:
            out[(kernel.graph, kernel.name)] = rewrite
    return out
