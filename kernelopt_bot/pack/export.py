"""Export a pack's config-only entries as Inductor's own ``autotune_lookup_table``.

Stock PyTorch can pin one launch config per generated Triton kernel without kernelopt:
``torch._inductor.config.autotune_lookup_table`` maps a hash to a flat config. It arrived in
mid-2025; the code below is the same in torch 2.13 (installed here) and in the older copies seen
in public mirrors. A torch without it rejects the activation line (config modules refuse unknown
names with ``AttributeError``), so an exported table never fails silently. ``CachingAutotuner.__init__`` calls
``triton_heuristics.lookup_autotune_config(size_hints, fn)``, which

* only looks when the table is non-empty and ``"_fused_"`` occurs in the jit function's source
  (Inductor names fused kernels ``triton_<kind>_fused_<ops>_<n>``);
* keys on ``sha256(str(size_hints) + src)`` where ``src`` is the ``@triton.jit`` function from its
  ``def`` line on (no decorators), whitespace-stripped, with ``def <name>(`` cut to ``(`` so the
  kernel's number suffix does not matter (``generate_lookup_hash_from_source_code``);
* builds ``Config({k: v for k in value if "BLOCK" in k}, num_warps=value["num_warps"],
  num_stages=value["num_stages"])`` and uses it as the kernel's only config, ahead of the on-disk
  autotune cache. With parallel compile the parent computes the same hash (``size_hints=`` text
  of the module, text after ``@triton.jit``) and ships the matching row to the worker.

Under ``TRITON_INTERPRET=1`` a non-empty table makes stock Inductor raise ``AttributeError``:
triton's ``InterpretedFunction`` has no ``src`` (torch 2.13, triton 3.9; tests add it).

So Inductor's table can carry a launch config whose constexprs are all ``*BLOCK*``; it cannot
carry a new kernel body, and it checks no guard (GPU, torch, triton, launch sizes): those stay
with kernelopt's runtime. The key needs the *original* kernel's source, which a pack does not
hold, so it is recorded when an entry is created (:attr:`PackEntry.lookup_key`).

Standard library only, like the rest of ``pack``: exporting a pack needs no torch.
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry
from kernelopt_bot.pack.keys import KernelSourceError, parse_kernel

# Inductor applies its table only to kernels whose jit source contains this.
FUSED_MARK = "_fused_"
_DEF_LINE = re.compile(r"^def\s+\w+\s*\(", re.MULTILINE)  # triton's JITFunction.src starts here
_DEF_NAME = re.compile(r"^def [^(]+\(")  # what Inductor cuts to "(" (triton_name_sub)


def inductor_lookup_key(source: str) -> str:
    """The key Inductor's ``autotune_lookup_table`` uses for the kernel in ``source`` (a kernel
    module as Inductor generated it): ``generate_lookup_hash_from_source_code(str(size_hints),
    fn.src)`` recomputed without torch."""
    fn, decorator = parse_kernel(source)
    size_hints = decorator.size_hints if decorator is not None else None
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    lines = source.splitlines(keepends=True)[first - 1 : fn.end_lineno]
    src = textwrap.dedent("".join(lines))
    start = _DEF_LINE.search(src)
    if start is None:  # pragma: no cover - ast found a FunctionDef, so a def line exists
        raise KernelSourceError("no def line in the jit function")
    src = src[start.start() :]
    unnamed = _DEF_NAME.sub("(", src.strip(), count=1)
    return hashlib.sha256((str(size_hints) + unnamed).encode("utf-8")).hexdigest()


def lookup_key_or_none(source: str) -> str | None:
    """:func:`inductor_lookup_key`, or ``None`` for a source Inductor would not key (recording the
    key at pack creation must never fail a verified entry)."""
    try:
        return inductor_lookup_key(source)
    except KernelSourceError:
        return None


def lookup_value(config: LaunchConfig) -> dict[str, int]:
    """A launch config the way Inductor's table holds it: block sizes, warps and stages, flat."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def not_exportable(entry: PackEntry) -> str | None:
    """Why Inductor's table cannot carry this entry, or ``None`` when it can."""
    if entry.source is not None:
        return "replaces the kernel source; Inductor's table pins launch configs only"
    if entry.config is None:  # pragma: no cover - PackEntry refuses an entry with neither
        return "has no launch config"
    if entry.lookup_key is None:
        return ("the pack records no Inductor lookup key for it (packs published by the bot, or "
                "written before keys were recorded); re-create it with `kernelopt optimize` or `kernelopt pin`")
    if FUSED_MARK not in entry.kernel_name:
        return f"Inductor consults its table only for kernels named *{FUSED_MARK}*"
    dropped = sorted(k for k in entry.config.kwargs if "BLOCK" not in k)
    if dropped:
        return f"Inductor's table keeps only *BLOCK* constexprs; {dropped} would be lost"
    return None


@dataclass
class InductorExport:
    """What :func:`inductor_table` made of a pack."""

    table: dict[str, dict[str, int]] = field(default_factory=dict)
    exported: list[PackEntry] = field(default_factory=list)
    kept: list[tuple[PackEntry, str]] = field(default_factory=list)  # (entry, why it stays in the pack)

    def dumps(self) -> str:
        return json.dumps(self.table, indent=2, sort_keys=True) + "\n"


def inductor_table(pack: KernelPack) -> InductorExport:
    """Split a pack into Inductor table rows and the entries only kernelopt's runtime can apply."""
    result = InductorExport()
    for key in sorted(pack.entries):
        entry = pack.entries[key]
        reason = not_exportable(entry)
        if reason is not None:
            result.kept.append((entry, reason))
            continue
        assert entry.lookup_key is not None and entry.config is not None
        result.table[entry.lookup_key] = lookup_value(entry.config)
        result.exported.append(entry)
    return result


def activation_lines(table_path: str | Path) -> str:
    """The stock-PyTorch lines that load an exported table; run before ``torch.compile`` compiles."""
    return (
        "import json, pathlib\n"
        "import torch._inductor.config\n"
        f"torch._inductor.config.autotune_lookup_table = json.loads(pathlib.Path({str(table_path)!r}).read_text())"
    )
