"""What every ``kernelopt`` command shares: its common options, how it starts, how it fails.

Exit codes: 0 success, 2 bad input (target, pack, flags), 1 internal error. :func:`handle_errors`
turns every failure into one line on stderr and that code.

Order matters on a machine without a GPU: Triton must be imported in interpreter mode, and much
of the engine (Inductor's config, the harness, the gates) imports it. So every command first
checks what it can without torch (a missing target file is reported at once), then calls
:func:`start`, which picks the device and turns interpreter mode on, and only then imports the
rest. This module, like the whole package at import time, imports neither torch nor triton.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from kernelopt_bot.capture.settings import COMPILE_MODES
from kernelopt_bot.errors import BadInputError, KerneloptError

if TYPE_CHECKING:
    from kernelopt_bot.pack.format import KernelPack
    from kernelopt_bot.progress import Progress

F = TypeVar("F", bound=Callable[..., Any])

DEVICE = click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None,
                      help="Where the model runs (default: cuda if available, else the CPU interpreter).")
TRAIN = click.option("--train", is_flag=True,
                     help="A training step: forward, loss (the file's get_loss(model, outputs), else a weighted sum "
                          "of the outputs) and backward; backward kernels are searched too and gate 3 checks the "
                          "loss and every gradient.")
DTYPE = click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32",
                     show_default=True, help="Precision of the model and its floating-point inputs.")
COMPILE_MODE = click.option(
    "--mode", default=None, type=click.Choice(COMPILE_MODES),
    help="torch.compile mode the model is used with: the baseline and every arm compile so "
         "(default: Inductor's default).")
INDUCTOR_CONFIG = click.option(
    "--inductor-config", "config_items", multiple=True, metavar="KEY=VALUE",
    help="Inductor config the model is used with, e.g. coordinate_descent_tuning=true (repeatable).")

# --debug and --verbose: accepted before the command (`kernelopt --debug bench ...`) and after it,
# so they are kept here for the process rather than passed to the command.
_FLAGS = {"debug": False, "verbose": False}


def _set_flag(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and param.name:
        _FLAGS[param.name] = True


def output_flags(fn: F) -> F:
    """The ``--verbose`` and ``--debug`` options of every command."""
    fn = click.option("--debug", is_flag=True, expose_value=False, callback=_set_flag,
                      help="On an internal error, print its traceback.")(fn)
    return click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_set_flag,
                        help="Show internal steps and their seconds as they happen.")(fn)


def fail(message: str, code: int) -> NoReturn:
    """End the command as every failure ends: ``error: MESSAGE`` on stderr, exit ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def handle_errors(fn: F) -> F:
    """One line on stderr and the documented exit code for every failure (``--debug``: and the
    traceback of an internal one)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from kernelopt_bot.harness.arm_process import ArmRaised

        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KerneloptError as exc:
            if _FLAGS["debug"] and exc.exit_code == 1:
                traceback.print_exc()
            message = f"{exc.label}: {exc.reason}" if isinstance(exc, ArmRaised) and not _FLAGS["debug"] else str(exc)
            fail(message, exc.exit_code)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            if _FLAGS["debug"]:
                traceback.print_exc()
            hint = "" if _FLAGS["debug"] else " (run again with --debug for the traceback)"
            fail(f"internal error: {type(exc).__name__}: {exc}{hint}", 1)

    return wrapper  # type: ignore[return-value]


def _check_target_spec(target: str) -> None:
    """Bad input that needs neither torch nor the target's code: a missing file, a malformed spec."""
    if target.endswith(".py"):
        if not Path(target).is_file():
            raise BadInputError(f"{target}: no such file")
    elif ":" not in target:
        raise BadInputError(f"target {target!r} is neither a .py file nor package.module:factory")


def start(target: str, device: str | None, *, interpreter: bool = True) -> str:
    """Check ``target`` without torch, then pick the device; on the CPU turn interpreter mode on
    before anything imports triton (``interpreter=False``: this process runs no kernel)."""
    _check_target_spec(target)
    from kernelopt_bot.device import prepare_device, resolve_device

    chosen = resolve_device(device)
    if interpreter:
        prepare_device(chosen)
    return chosen


def make_progress(**kwargs: Any) -> Progress:
    """The command's live progress on stderr, as verbose as ``--verbose`` asked."""
    from kernelopt_bot.progress import Progress

    return Progress(verbose=_FLAGS["verbose"], **kwargs)


def parse_budget(items: tuple[str, ...]) -> dict[str, Any]:
    """``--budget N`` (candidates) or ``--budget KEY=VALUE`` (see plan.DEFAULT_BUDGET)."""
    from kernelopt_bot.plan import DEFAULT_BUDGET

    budget: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            key, raw = "candidates", item
        if key not in DEFAULT_BUDGET:
            raise BadInputError(f"--budget {item!r}: unknown key {key!r} (known: {', '.join(DEFAULT_BUDGET)})")
        words = {"true": True, "false": False, "null": None, "none": None}  # True/False/None as typed too
        try:
            value = words[raw.strip().lower()] if raw.strip().lower() in words else json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"--budget {item!r}: value is not a number or true/false") from exc
        if not (value is None or isinstance(value, (int, float, bool))) or (
                isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0):
            raise BadInputError(f"--budget {item!r}: value must be a non-negative number, true/false or null")
        budget[key] = value
    return budget


def load_pack(path: str) -> KernelPack:
    """The pack at ``path``; one that cannot be read is bad input, named in the message."""
    from kernelopt_bot.pack.format import KernelPack, PackError

    try:
        return KernelPack.load(path)
    except PackError as exc:
        message = str(exc)
        raise BadInputError(message if path in message else f"pack {path}: {message}") from exc
