"""``kernelopt config ...``: the bot's ``.kernelopt.yml`` before a PR depends on it.

``check`` reads a config the way the bot does (every key validated, file entries looked up under
the repository) and lists the runs it would make, so a typo fails on the author's machine with the
line it is on instead of on the GPU runner. ``keys`` prints every key with its type, default and
meaning: the table the README holds, generated from the same models that validate the file.
Nothing here needs torch.
"""

from __future__ import annotations

from pathlib import Path

import click

from kernelopt_bot.cli import options


@click.group("config")
def config() -> None:
    """Check a .kernelopt.yml, or list every key it may hold."""


@config.command("check")
@click.argument("path", default=".kernelopt.yml", type=click.Path(dir_okay=False))
@click.option("--repo-root", default=None, type=click.Path(file_okay=False),
              help="Where file entries are looked up (default: the config file's folder).")
@options.output_flags
@options.handle_errors
def check(path: str, repo_root: str | None) -> None:
    """Validate PATH (default .kernelopt.yml) and list the runs it makes: exit 2 with the reason
    (and its line) when the file is not valid."""
    from kernelopt_bot.config import load_config

    cfg = load_config(path, root=Path(repo_root) if repo_root else None)
    runs = sum(len(t.dtypes) for t in cfg.targets)
    click.echo(f"{path}: valid; {len(cfg.targets)} target(s), {runs} run(s) per sweep")
    for t in cfg.targets:
        kind = t.kind or "inferred kind"
        mode = ", training step" if t.mode == "train" else ""
        click.echo(f"  {t.name}: {t.entry} ({kind}{mode}) in {', '.join(t.dtypes)}")


@config.command("keys")
@options.output_flags
@options.handle_errors
def keys() -> None:
    """Every key of .kernelopt.yml: what it takes, its default and what it does (Markdown)."""
    from kernelopt_bot.config import reference_table

    click.echo(reference_table())
