"""``kernelopt export PACK --format inductor``: a pack's pinned configs for stock PyTorch.

Writes the config-only entries of a pack as a JSON ``torch._inductor.config.autotune_lookup_table``
(see :mod:`kernelopt_bot.pack.export`) and prints the three lines that load it, so a user who
only pins launch configs needs no kernelopt import in production. Entries the table cannot
express (new kernel source, no recorded lookup key, ...) stay in the pack; each is named with the
reason. Needs no torch: the keys were recorded when the pack was made.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kernelopt_bot.errors import BadInputError, KerneloptError
from kernelopt_bot.pack.format import Guard


def default_out(pack_path: Path) -> Path:
    """``pack.json`` -> ``pack.inductor.json``, next to the pack."""
    return pack_path.with_name(f"{pack_path.stem}.inductor.json")


def _guard_text(guard: Guard) -> str:
    """An entry's guard in words: what Inductor's table, unlike a pack, does not check."""
    parts = [f"{name} {value}" for name, value in (("device", guard.gpu), ("torch", guard.torch),
                                                    ("triton", guard.triton)) if value]
    return ", ".join(parts) or "any machine"


@click.command()
@click.argument("pack_path", metavar="PACK", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["inductor"]), default="inductor", show_default=True,
              help="inductor: torch._inductor.config.autotune_lookup_table as JSON (config-only entries).")
@click.option("--out", "out_path", default=None, type=click.Path(dir_okay=False),
              help="Where to write the table (default: PACK with .inductor.json).")
def export(pack_path: str, fmt: str, out_path: str | None) -> None:
    """Write PACK's pinned launch configs as Inductor's own lookup table (no kernelopt import needed)."""
    try:
        _export(Path(pack_path), fmt, Path(out_path) if out_path else None)
    except KerneloptError as exc:  # exit codes as README "Exit codes": 2 bad input
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)


def _export(pack_path: Path, fmt: str, out_path: Path | None) -> None:
    from kernelopt_bot.pack.export import activation_lines, inductor_table
    from kernelopt_bot.pack.format import KernelPack, PackError

    try:
        pack = KernelPack.load(pack_path)
    except PackError as exc:
        raise BadInputError(str(exc)) from exc
    out = out_path or default_out(pack_path)
    if out.resolve() == pack_path.resolve():
        raise BadInputError(f"--out {out} is the pack itself")
    result = inductor_table(pack)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result.dumps())
    except OSError as exc:
        raise BadInputError(f"cannot write {out}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {out}: {len(result.exported)} of {len(pack)} pack entries as Inductor's "
               f"autotune_lookup_table ({fmt})")
    for entry in result.exported:
        assert entry.config is not None
        click.echo(f"  {entry.kernel_name}: {entry.config.describe()} (pack guard: {_guard_text(entry.guard)}; "
                   "Inductor's table does not check it)")
    if result.kept:
        click.echo(f"kept in {pack_path} only (load it with kernelopt_bot.pack.runtime.install):")
        for entry, reason in result.kept:
            click.echo(f"  {entry.kernel_name}: {reason}")
    if result.table:
        click.echo("Activate with stock PyTorch, before torch.compile compiles (no kernelopt import):")
        for line in activation_lines(out).splitlines():
            click.echo(f"  {line}")
        click.echo("Inductor's coordinate-descent tuning (mode=\"max-autotune\") starts from a pinned config "
                   "and may move away from it.")
