"""The ``kernelopt`` command line: the engine's terminal front door.

Exit codes: 0 success, 2 bad input (target, pack, flags), 1 internal error.

This module is the ``main`` group and registers every command; each lives with its family:
:mod:`~kernelopt_bot.cli.inspect_command`, :mod:`~kernelopt_bot.cli.bench_command`,
:mod:`~kernelopt_bot.cli.optimize_command`, :mod:`~kernelopt_bot.cli.modes_command`,
:mod:`~kernelopt_bot.cli.suite_commands` (``suite``, ``suite-merge``),
:mod:`~kernelopt_bot.cli.verify_commands` (``verify``, ``pin``) and
:mod:`~kernelopt_bot.cli.store_commands` (``store ...``); ``bot``, ``sweep`` and ``export`` come
from :mod:`kernelopt_bot.github.cli` and :mod:`kernelopt_bot.cli.export_command`. A command computes;
:mod:`~kernelopt_bot.cli.render` shows the result (tables, console lines) and
:mod:`~kernelopt_bot.cli.reports` holds what a command prints as JSON (``to_json``). What they
share (options, start-up, error handling) is :mod:`~kernelopt_bot.cli.options`. The modules are
not named as their commands: the package's ``inspect``, ``bench``, ... are the commands.

Order matters on a machine without a GPU: Triton must be imported in interpreter mode first
(:func:`kernelopt_bot.cli.options.start`), so every command imports the engine inside its body
and importing this package imports neither torch nor triton. Progress goes to stderr
(:mod:`kernelopt_bot.progress`); stdout keeps the result.
"""

from __future__ import annotations

import click

from kernelopt_bot.cli.bench_command import bench
from kernelopt_bot.cli.config_commands import config
from kernelopt_bot.cli.export_command import export
from kernelopt_bot.cli.inspect_command import inspect
from kernelopt_bot.cli.modes_command import modes
from kernelopt_bot.cli.optimize_command import optimize
from kernelopt_bot.cli.options import output_flags
from kernelopt_bot.cli.store_commands import store
from kernelopt_bot.cli.suite_commands import suite, suite_merge
from kernelopt_bot.cli.verify_commands import pin, verify
from kernelopt_bot.github.cli import bot, sweep

__all__ = ["bench", "bot", "config", "export", "inspect", "main", "modes", "optimize", "pin", "store", "suite",
           "suite_merge", "sweep", "verify"]

HELP_SETTINGS = {"help_option_names": ["-h", "--help"]}


@click.group(context_settings=HELP_SETTINGS)
@click.version_option(package_name="kernelopt-bot")
@output_flags
def main() -> None:
    """Make torch.compile'd models faster with verified Triton kernel replacements."""
    from kernelopt_bot.harness.isolation import protect_this_process

    protect_this_process()  # children of the same user cannot read this process's memory or environ


for _command in (inspect, bench, optimize, modes, suite, suite_merge, verify, pin, bot, sweep, export, store, config):
    main.add_command(_command)


def _help_everywhere(group: click.Group) -> None:
    """``-h`` on every command, set on the command itself: click builds (and keeps) a command's
    help option from the first context it is invoked in, so a command first run on its own
    (``bot``, by the Action's tests) would otherwise know only ``--help`` for the process's life."""
    for command in group.commands.values():
        command.context_settings = {**command.context_settings, **HELP_SETTINGS}
        if isinstance(command, click.Group):
            _help_everywhere(command)


_help_everywhere(main)
