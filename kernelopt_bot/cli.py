"""The ``kernelopt`` command line: the engine's terminal front door.

Exit codes: 0 success, 2 bad input (target, pack, flags), 1 internal error.

Order matters on a machine without a GPU: Triton must be imported in interpreter mode, and much
of the engine (Inductor's config, the harness, the gates) imports it. So every command first
checks what it can without torch (a missing target file is reported at once), then calls
:func:`_start`, which picks the device and turns interpreter mode on, and only then imports the
rest. Progress goes to stderr (:mod:`kernelopt_bot.progress`); stdout keeps the result.
"""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.capture.settings import COMPILE_MODES
from kernelopt_bot.errors import KerneloptError
from kernelopt_bot.target_kinds import KINDS

F = TypeVar("F", bound=Callable[..., Any])

DEVICE = click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None,
                      help="Where the model runs (default: cuda if available, else the CPU interpreter).")
TRAIN = click.option("--train", is_flag=True,
                     help="A training step: forward, loss (the file's get_loss(model, outputs), else a weighted sum "
                          "of the outputs) and backward; backward kernels are searched too and gate 3 checks the "
                          "loss and every gradient.")
DTYPE = click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32",
                     show_default=True, help="Precision of the model and its floating-point inputs.")

# --debug and --verbose: accepted before the command (`kernelopt --debug bench ...`) and after it.
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


def _fail(message: str, code: int) -> None:
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
            _fail(message, exc.exit_code)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            if _FLAGS["debug"]:
                traceback.print_exc()
            hint = "" if _FLAGS["debug"] else " (run again with --debug for the traceback)"
            _fail(f"internal error: {type(exc).__name__}: {exc}{hint}", 1)

    return wrapper  # type: ignore[return-value]


HELP_SETTINGS = {"help_option_names": ["-h", "--help"]}


@click.group(context_settings=HELP_SETTINGS)
@click.version_option(package_name="kernelopt-bot")
@output_flags
def main() -> None:
    """Make torch.compile'd models faster with verified Triton kernel replacements."""
    from kernelopt_bot.harness.isolation import protect_this_process

    protect_this_process()  # children of the same user cannot read this process's memory or environ


def _check_target_spec(target: str) -> None:
    """Bad input that needs neither torch nor the target's code: a missing file, a malformed spec."""
    from kernelopt_bot.errors import BadInputError

    if target.endswith(".py"):
        if not Path(target).is_file():
            raise BadInputError(f"{target}: no such file")
    elif ":" not in target:
        raise BadInputError(f"target {target!r} is neither a .py file nor package.module:factory")


def _start(target: str, device: str | None, *, interpreter: bool = True) -> str:
    """Check ``target`` without torch, then pick the device; on the CPU turn interpreter mode on
    before anything imports triton (``interpreter=False``: this process runs no kernel)."""
    _check_target_spec(target)
    from kernelopt_bot.device import prepare_device, resolve_device

    chosen = resolve_device(device)
    if interpreter:
        prepare_device(chosen)
    return chosen


def _progress(**kwargs: Any) -> Any:
    from kernelopt_bot.progress import Progress

    return Progress(verbose=_FLAGS["verbose"], **kwargs)


def _console() -> Any:
    from rich.console import Console

    # Off a terminal (CI logs, pipes) rich would wrap at 80 columns and cut kernel names.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _fmt(value: float | None, spec: str = ".3f", missing: str = "not measured") -> str:
    return missing if value is None else format(value, spec)


@main.command()
@click.argument("target")
@DEVICE
@DTYPE
@TRAIN
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@output_flags
@handle_errors
def inspect(target: str, device: str | None, dtype: str, train: bool, as_json: bool) -> None:
    """Compile TARGET and list its Triton kernels and preserved vendor calls."""
    device = _start(target, device)
    from kernelopt_bot.target_kinds import target_kind

    if target_kind(target) == "triton":
        _inspect_launcher(target, device, dtype, as_json)
        return
    if target_kind(target) == "helion":
        _inspect_helion(target, device, dtype, as_json)
        return
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.profiling import profile
    from kernelopt_bot.targets import load_target

    with _progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype, train=train)
        progress.step("compiling and capturing")
        cap = capture(tgt)
        progress.step("profiling")
        prof = profile(cap)
    art = cap.artifact
    if as_json:
        kernels = []
        for k in art.kernels:
            kp = prof.kernel(k.graph, k.name)
            kernels.append({
                "name": k.name, "graph": k.graph, "qualified_name": k.qualified_name,
                "kind": k.kind, "phase": art.graphs[k.graph].phase, "sha256": k.sha256, "key": k.key,
                "source": k.source,
                "time_ms": kp.time_ms if kp else None, "share": kp.share if kp else None,
                "calls": kp.calls if kp else 0, "bytes_moved": kp.bytes_moved if kp else None,
                "achieved_gbps": kp.achieved_gbps if kp else None,
                "roofline_fraction": kp.roofline_fraction if kp else None,
                "bound": kp.bound if kp else None,
                "signature": k.signature, "size_hints": k.size_hints,
                "launches": [{"args": s.args, "kwargs": s.kwargs} for s in k.launches],
            })
        doc = {
            "target": target, "device": tgt.device, "dtype": art.dtype, "versions": art.versions,
            "graphs": len(art.graphs), "model_ms": prof.model_ms, "vendor_ms": prof.vendor_ms,
            "copy_gbps": prof.roofline.copy_gbps if prof.roofline else None,
            "kernels": kernels,
            "extern_calls": [{"op": c.op, "kind": c.kind, "graph": c.graph, "preserved": c.preserved}
                             for c in art.extern_calls],
        }
        click.echo(json.dumps(doc, default=str))
        return
    _print_inspect(tgt.label, art, prof)


def _inspect_launcher(target: str, device: str, dtype: str, as_json: bool) -> None:
    """``inspect`` for a standalone-kernel target: run its launcher once and list the launches."""
    from rich.table import Table

    from kernelopt_bot.launchers import capture_launches, load_launcher

    with _progress() as progress:
        progress.step(f"loading {target}")
        launcher = load_launcher(target, device, dtype)
        progress.step("running the launcher and recording its kernel launches")
        launches = capture_launches(launcher)
    if as_json:
        click.echo(json.dumps({"target": target, "kind": "triton", "device": launcher.device, "dtype": dtype,
                               "reference": launcher.reference is not None,
                               "launches": [launch.to_json() for launch in launches]}, default=str))
        return
    table = Table(title=escape(f"{launcher.name} [{launcher.device}, {dtype}]: {len(launches)} Triton kernel launch(es)"))
    for col in ("kernel", "where", "grid", "constexprs", "options", "autotune"):
        table.add_column(col)
    for launch in launches:
        where = f"{Path(launch.file).name}:{launch.line}" if launch.file else "-"
        tuned = ("-" if launch.autotune_configs is None
                 else f"{len(launch.autotune_configs)} configs; ran {json.dumps(launch.chosen)}")
        table.add_row(escape(launch.name), escape(where), str(launch.grid), escape(json.dumps(launch.constexprs)),
                      escape(json.dumps(launch.options)), escape(tuned))
    _console().print(table)


def _inspect_helion(target: str, device: str, dtype: str, as_json: bool) -> None:
    """``inspect`` for a Helion target: its kernel, the config it runs (pinned or Helion's
    default), and the neighbours a search starts from."""
    from kernelopt_bot.helion_targets import load_helion, neighbour_configs

    with _progress() as progress:
        progress.step(f"loading {target}")
        helion_target = load_helion(target, device, dtype)
        original = helion_target.original_config()
        neighbours = neighbour_configs(helion_target, original)
    doc = {"target": target, "kind": "helion", "device": helion_target.device, "dtype": dtype,
           "kernel": helion_target.kernel_name, "reference": helion_target.reference is not None,
           "pinned": helion_target.pinned, "config": original, "neighbours": len(neighbours)}
    if as_json:
        click.echo(json.dumps(doc, default=str))
        return
    console = _console()
    console.print(escape(f"{helion_target.name} [{helion_target.device}, {dtype}]: Helion kernel "
                         f"{helion_target.kernel_name}, {'pinned' if helion_target.pinned else 'not pinned'}"))
    console.print(escape(f"runs with: {json.dumps(original)}"))
    console.print(f"{len(neighbours)} neighbouring configs for a search")


def _print_inspect(label: str, art: Any, prof: Any) -> None:
    from rich.table import Table

    from kernelopt_bot.progress import plain_names

    console = _console()
    title = escape(f"{label}: {len(art.kernels)} Triton kernels in {len(art.graphs)} graph(s)")
    table = Table(title=title)
    for col in ("kernel", "kind", "calls", "time ms", "share", "GB/s", "roofline", "bound", "key"):
        table.add_column(col)
    for k in art.kernels:
        kp = prof.kernel(k.graph, k.name)
        table.add_row(
            escape(plain_names(k.qualified_name)), k.kind, str(kp.calls if kp else 0),
            _fmt(kp.time_ms if kp else None, ".4f"),
            _fmt(kp.share if kp else None, ".1%", "-"),
            _fmt(kp.achieved_gbps if kp else None, ".0f", "-"),
            _fmt(kp.roofline_fraction if kp else None, ".0%", "-"),
            (kp.bound if kp else None) or "-", k.key[:12],
        )
    console.print(table)
    if art.extern_calls:
        ext = Table(title="Vendor / fallback calls (preserved)")
        ext.add_column("op")
        ext.add_column("kind")
        ext.add_column("graph")
        for c in art.extern_calls:
            ext.add_row(c.op, c.kind, str(c.graph))
        console.print(ext)
    else:
        console.print("vendor / fallback calls: none (every op became a Triton kernel)")
    if prof.measured:
        roof = f", copy roofline {prof.roofline.copy_gbps:.0f} GB/s" if prof.roofline else ""
        console.print(f"model {prof.model_ms:.4f} ms, vendor bucket {_fmt(prof.vendor_ms, '.4f')} ms{roof}")
    else:
        console.print("times: not measured (no CUDA device; kernels ran in the Triton interpreter)")


def _load_pack(path: str) -> Any:
    from kernelopt_bot.errors import BadInputError
    from kernelopt_bot.pack.format import KernelPack, PackError

    try:
        return KernelPack.load(path)
    except PackError as exc:
        message = str(exc)
        raise BadInputError(message if path in message else f"pack {path}: {message}") from exc


COMPILE_MODE = click.option(
    "--mode", default=None, type=click.Choice(COMPILE_MODES),
    help="torch.compile mode the model is used with: the baseline and every arm compile so "
         "(default: Inductor's default).")
INDUCTOR_CONFIG = click.option(
    "--inductor-config", "config_items", multiple=True, metavar="KEY=VALUE",
    help="Inductor config the model is used with, e.g. coordinate_descent_tuning=true (repeatable).")


@main.command()
@click.argument("target")
@click.option("--pack", "pack_path", default=None, type=click.Path(dir_okay=False),
              help="KernelPack JSON to install in the packed arm (a module target).")
@click.option("--patch", "patch_path", default=None, type=click.Path(dir_okay=False),
              help="patch.diff of a kernel target (a launcher or Helion file): timed applied to a copy of the "
                   "target's folder, against the folder as it is.")
@DEVICE
@DTYPE
@click.option("--rounds", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--reps", default=20, show_default=True, type=click.IntRange(1, 10000),
              help="Timed calls per arm per round.")
@COMPILE_MODE
@INDUCTOR_CONFIG
@TRAIN
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a summary.")
@output_flags
@handle_errors
def bench(target: str, pack_path: str | None, patch_path: str | None, device: str | None, dtype: str, rounds: int,
          reps: int, mode: str | None, config_items: tuple[str, ...], train: bool, as_json: bool) -> None:
    """torch.compile baseline against TARGET with PACK installed, end to end; or a kernel target
    against itself with PATCH applied."""
    from kernelopt_bot.errors import BadInputError
    from kernelopt_bot.target_kinds import target_kind

    if (pack_path is None) == (patch_path is None):
        raise BadInputError("give one of --pack (a module target) or --patch (a kernel target)")
    kind = target_kind(target)
    if (patch_path is not None) != (kind != "module"):
        raise BadInputError(f"{target} is a {kind} target: "
                            + ("--patch is for kernel targets; give --pack" if kind == "module"
                               else "its result is a patch; give --patch"))
    device = _start(target, device)
    if patch_path is not None:
        _bench_patch(target, patch_path, device, dtype, rounds, reps, as_json)
        return
    from kernelopt_bot.capture.settings import check_config, parse_config_items
    from kernelopt_bot.harness.arm_process import ArmRaised
    from kernelopt_bot.harness.bench import bench as run_bench
    from kernelopt_bot.targets import load_target

    config = check_config(parse_config_items(config_items), "--inductor-config")
    pack = _load_pack(str(pack_path))
    with _progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype, train=train)  # bad targets fail here, with exit code 2
        progress.step("compiling the baseline and packed arms" + (f", then {rounds} timed rounds"
                                                                    if device == "cuda" else ""))
        try:
            result = run_bench(target, pack, device=tgt.device, dtype=dtype, rounds=rounds, reps=reps,
                               mode=mode, config=config, train=train)
        except ArmRaised as exc:
            if exc.label != "packed":
                raise
            # The baselines compiled and ran; only the pack differs in this arm.
            raise BadInputError(f"{pack_path} does not run with {target}: {exc.reason}") from exc
    if as_json:
        click.echo(json.dumps(result.to_json()))
        return
    console = _console()
    console.print(escape(f"{tgt.label} with {pack_path}: {len(pack)} entr{'y' if len(pack) == 1 else 'ies'}, applied to "
                         f"{', '.join(result.applied) or 'no kernel'}"))
    for skipped in result.skipped:  # "kernel: why its guard does not match this machine"
        name, _, why = skipped.partition(": ")
        console.print(escape(f"  not applied to {name}: the entry is for another machine ({why})"))
    unmatched = len(pack) - len(set(result.applied)) - len({s.partition(": ")[0] for s in result.skipped})
    if unmatched > 0:
        console.print(f"  {unmatched} entr{'y matches' if unmatched == 1 else 'ies match'} no kernel this "
                      "target compiles to here (another model, shape, dtype or Inductor version?)")
    if result.measured:
        console.print(f"baseline {result.baseline_ms:.4f} ms, packed {result.packed_ms:.4f} ms, "
                      f"speedup {result.speedup:.3f}x, noise floor {_fmt(result.noise_floor, '.2%')} "
                      f"({len(result.rounds)} rounds)")
    else:
        console.print(escape(f"times: {result.reason}"))
    console.print(f"max |baseline - packed| on fresh inputs: {result.max_abs_diff:.3g}")


def _bench_patch(target: str, patch_path: str, device: str, dtype: str, rounds: int, reps: int,
                 as_json: bool) -> None:
    """``bench --patch``: the patch applied (``git apply``) to a copy of the target's folder, the
    two files timed against each other in their own processes."""
    import shutil
    import subprocess
    import tempfile

    from kernelopt_bot.errors import BadInputError
    from kernelopt_bot.harness.arm_process import ArmRaised
    from kernelopt_bot.harness.bench import bench_patch

    folder = Path(target).resolve().parent
    patch = Path(patch_path).resolve()
    if not patch.is_file():
        raise BadInputError(f"{patch_path}: no such file")
    with tempfile.TemporaryDirectory(prefix="kernelopt-patched-") as tmp:
        copy = Path(tmp) / folder.name
        shutil.copytree(folder, copy, symlinks=True,
                        ignore=shutil.ignore_patterns(".git", "kernelopt-out", "__pycache__", ".venv*"))
        applied = subprocess.run(["git", "apply", str(patch)], cwd=copy, capture_output=True, text=True)
        if applied.returncode != 0:
            raise BadInputError(f"{patch_path} does not apply to {folder}: {applied.stderr.strip()[:500]}")
        with _progress() as progress:
            progress.step(f"starting {target} as it is and patched" + (f", then {rounds} timed rounds"
                                                                        if device == "cuda" else ""))
            try:
                result = bench_patch(str(Path(target).resolve()), str(copy / Path(target).name), device=device,
                                     dtype=dtype, rounds=rounds, reps=reps)
            except ArmRaised as exc:
                if exc.label != "packed":
                    raise
                raise BadInputError(f"{target} with {patch_path} applied does not run: {exc.reason}") from exc
    if as_json:
        click.echo(json.dumps(result.to_json()))
        return
    console = _console()
    if result.measured:
        console.print(f"as it is {result.baseline_ms:.4f} ms, patched {result.packed_ms:.4f} ms, "
                      f"speedup {result.speedup:.3f}x, noise floor {_fmt(result.noise_floor, '.2%')} "
                      f"({len(result.rounds)} rounds)")
    else:
        console.print(escape(f"times: {result.reason}"))
    console.print(f"max |as it is - patched| on fresh inputs: {result.max_abs_diff:.3g}")


def _parse_budget(items: tuple[str, ...]) -> dict[str, Any]:
    """``--budget N`` (candidates) or ``--budget KEY=VALUE`` (see plan.DEFAULT_BUDGET)."""
    from kernelopt_bot.errors import BadInputError
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


@main.command()
@click.argument("target")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where report.md, result.json, pack.json and run.log go (default: kernelopt-out/<target>).")
@DEVICE
@DTYPE
@click.option("--budget", "budget_items", multiple=True, metavar="N|KEY=VALUE",
              help="Candidates to verify (N), or KEY=VALUE: candidates, kernels, candidates_per_kernel, "
                   "wall_seconds, gpu_seconds, tokens, cost, compile_options, rounds (repeatable).")
@click.option("--gamma", default=DEFAULT_GAMMA, show_default=True, type=click.FloatRange(min=1.0),
              help="Required end-to-end speedup for a replacement.")
@click.option("--llm-base-url", default=None, envvar="KERNELOPT_LLM_BASE_URL",
              help="OpenAI-compatible endpoint for the LLM agents (key from KERNELOPT_LLM_API_KEY or OPENAI_API_KEY).")
@click.option("--llm-model", default=None, envvar="KERNELOPT_LLM_MODEL", help="Model name for the LLM agents.")
@click.option("--llm-api-key-env", default=None, metavar="NAME",
              help="The environment variable that holds the LLM key (before KERNELOPT_LLM_API_KEY and "
                   "OPENAI_API_KEY), as a config's llm.api_key_env names it.")
@click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False),
              help="SQLite store (default .kernelopt/kernelopt.db or $KERNELOPT_DB).")
@COMPILE_MODE
@INDUCTOR_CONFIG
@click.option("--kind", type=click.Choice(KINDS), default=None,
              help="The kind of target a config says TARGET is; a target of another kind is bad input "
                   "(exit 2) and nothing runs.")
@click.option("--shown-as", default=None, metavar="TARGET",
              help="TARGET as its user names it (relative to their repository, say), for the report's "
                   "command to reproduce the run (default: TARGET).")
@click.option("--isolation", type=click.Choice(["auto", "namespace", "none"]), default="auto", show_default=True,
              envvar="KERNELOPT_ISOLATION",
              help="How the target's code and every candidate are isolated: auto (bwrap, else unshare namespaces, "
                   "else none with a warning), namespace (fail if no namespace tool works), none.")
@TRAIN
@click.option("--untimed-patch", is_flag=True,
              help="Kernel targets without a GPU: write patch.diff with the first config that passes gates 1-3, "
                   "marked as not timed (to see the patch a GPU run would deliver).")
@output_flags
@handle_errors
def optimize(target: str, out_dir: str | None, device: str | None, dtype: str, budget_items: tuple[str, ...],
             gamma: float, llm_base_url: str | None, llm_model: str | None, llm_api_key_env: str | None,
             store_path: str | None, mode: str | None, config_items: tuple[str, ...], kind: str | None,
             shown_as: str | None, isolation: str, train: bool, untimed_patch: bool) -> None:
    """Capture, profile, search, verify, pack and benchmark TARGET; write a report.

    The target is loaded only in an isolated engine process that holds no secret. Exit code 0
    when the run completed, whatever it found; 2 on bad input (the target included); 1 if the
    run failed.
    """
    import os

    from kernelopt_bot.capture.settings import CompileSettings

    budget = _parse_budget(budget_items)
    # Keys are checked in the engine, which imports Inductor (a bad one: exit 2 there).
    settings = CompileSettings.from_cli(mode, config_items)
    _start(target, device, interpreter=False)  # the engine loads the target and runs every kernel
    from kernelopt_bot.folders import make_dirs
    from kernelopt_bot.harness.isolation import ISOLATION_ENV, choose_isolation
    from kernelopt_bot.pipeline import run_pipeline, target_name
    from kernelopt_bot.plan import DEFAULT_BUDGET

    os.environ[ISOLATION_ENV] = isolation  # the engine and every child it starts
    method = choose_isolation(isolation).method  # --isolation namespace without namespaces stops here
    out = Path(out_dir) if out_dir else Path("kernelopt-out") / target_name(target)
    llm = {"base_url": llm_base_url, "model": llm_model, "api_key_env": llm_api_key_env} if llm_base_url else None
    plan = {**DEFAULT_BUDGET, **budget}
    make_dirs(out)
    with _progress(planned=plan["candidates"], deadline_s=plan["wall_seconds"],
                   log_path=out / "run.log") as progress:
        progress.note(f"isolation: {method}")
        result = run_pipeline(target, device=device, dtype=dtype, out_dir=out, budget=budget, gamma=gamma,
                              llm=llm, store_path=store_path, log=progress.relay, compile_settings=settings,
                              untimed_patch=untimed_patch, shown_as=shown_as, kind=kind, train=train)
    if result.status != "ok" and result.error_kind == "bad input":
        # nothing ran: the one-line reason is the whole answer (report.md and result.json say it too)
        _fail(str(result.error), 2)
    _print_result(_console(), result, out)
    if result.status != "ok":
        _fail(f"run failed: {result.error}", 1)


def _print_result(console: Any, result: Any, out: Path) -> None:
    from rich.table import Table

    from kernelopt_bot.progress import plain_names

    table = Table(title=escape(f"{result.name} [{result.device}, {result.dtype}]: {result.status}"))
    for col in ("kernel", "kind", "share", "candidates", "verdict", "speedup"):
        table.add_column(col)
    for k in result.kernels:
        table.add_row(escape(plain_names(k.name)), k.kind, _fmt(k.share, ".1%", "-"), str(k.candidates),
                      escape(k.status), _fmt(k.speedup, ".3f", "-"))
    console.print(table)
    if result.measured:
        console.print(escape(f"end to end: {result.baseline_ms:.4f} ms -> {result.optimized_ms:.4f} ms, "
                             f"speedup {result.speedup:.3f}x over {result.baseline_label} "
                             f"({result.pack_entries} kernels replaced)"))
        if result.latency_ms.get("baseline"):
            console.print(f"host-inclusive latency of a call: {result.latency_ms['baseline']:.4f} ms -> "
                          f"{result.latency_ms['optimized']:.4f} ms")
    else:
        console.print("end to end: not measured (no CUDA device)" if result.device != "cuda"
                      else "end to end: nothing verified, so nothing was measured against the original")
    for rec in result.recommendations:
        _print_recommendation(console, rec)
    written = "patch.diff" if getattr(result, "patch_path", None) else "pack.json"
    console.print(escape(f"wrote {out}/report.md, result.json, {written}, run.log"))


def _print_recommendation(console: Any, rec: Any) -> None:
    console.print(escape(f"option {rec.option}: {_fmt(rec.speedup, '.3f', '-')}x "
                         f"{'(verified)' if rec.verified else ''} {rec.detail}"))


@main.command()
@click.argument("target")
@DEVICE
@DTYPE
@click.option("--option", "option_labels", multiple=True, metavar="LABEL",
              help="Only these options (repeatable), e.g. 'mode=max-autotune-no-cudagraphs' (default: all).")
@click.option("--rounds", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--gamma", default=DEFAULT_GAMMA, show_default=True, type=click.FloatRange(min=1.0))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list instead of a summary.")
@output_flags
@handle_errors
def modes(target: str, device: str | None, dtype: str, option_labels: tuple[str, ...], rounds: int, gamma: float,
          as_json: bool) -> None:
    """Measure the compiler's own options against its default compile, end to end (no search).

    Each option compiles in its own process and passes gate 3 (same outputs) before it is timed
    against the default with the interleaved harness; without CUDA nothing is measured.
    """
    device = _start(target, device)
    from kernelopt_bot.errors import BadInputError
    from kernelopt_bot.harness.model_arms import ModelArms
    from kernelopt_bot.search.compile_options import COMPILE_OPTIONS, recommend
    from kernelopt_bot.targets import dtype_name, load_target

    known = {o.label: o for o in COMPILE_OPTIONS}
    unknown = [label for label in option_labels if label not in known]
    if unknown:
        raise BadInputError(f"unknown option {unknown[0]!r} (known: {', '.join(known)})")
    chosen = tuple(known[label] for label in option_labels) or COMPILE_OPTIONS
    with _progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype)
        progress.step(f"compiling the default and {len(chosen)} option(s), each in its own process")
        with ModelArms(tgt.spec, tgt.device, dtype_name(tgt.dtype)) as model_arms:
            recs = recommend(model_arms, tgt, gamma=gamma, rounds=rounds, options=chosen)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in recs]))
        return
    console = _console()
    for rec in recs:
        _print_recommendation(console, rec)


@main.command()
@click.argument("suite_dir", type=click.Path(file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--shard", default="1/1", show_default=True, help="Run only shard I of N (I/N, 1-based).")
@DEVICE
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["fp32", "bf16", "fp16"]),
              help="Only these dtypes (default: each problem's dtypes from suite.json).")
@click.option("--only", "only", multiple=True, metavar="PATTERN",
              help="Only problems whose path or slug matches this shell pattern (repeatable), "
                   "e.g. 'level1/*' or 'l2_*_bf16'.")
@click.option("--budget", "budget_items", multiple=True, metavar="N|KEY=VALUE", help="As for optimize.")
@click.option("--gamma", default=DEFAULT_GAMMA, show_default=True, type=click.FloatRange(min=1.0))
@click.option("--timeout", "timeout_s", default=900.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Deadline for each problem (seconds).")
@click.option("--gpus", default=None, metavar="all|N|I,J,...",
              help="Run problems on several GPUs at once, one per GPU: all, the first N, or these "
                   "indices (default: one problem at a time on the default device).")
@click.option("--reference/--no-reference", default=True, show_default=True,
              help="Measure max-autotune-no-cudagraphs for the 'vs max-autotune' column when optimize's "
                   "budget did not (one more compile and benchmark per problem).")
@COMPILE_MODE
@INDUCTOR_CONFIG
@output_flags
@handle_errors
def suite(suite_dir: str, out_dir: str, shard: str, device: str | None, dtypes: tuple[str, ...],
          only: tuple[str, ...], budget_items: tuple[str, ...], gamma: float, timeout_s: float,
          gpus: str | None, reference: bool, mode: str | None, config_items: tuple[str, ...]) -> None:
    """Run `kernelopt optimize` on every problem of SUITE_DIR, each in its own process."""
    from kernelopt_bot.capture.settings import CompileSettings
    from kernelopt_bot.errors import BadInputError
    from kernelopt_bot.gpu_pool import cuda_device_count, select_gpus
    from kernelopt_bot.shards import Shard
    from kernelopt_bot.suite import run_suite

    _parse_budget(budget_items)  # validate before starting anything
    if gpus is not None and device == "cpu":
        raise BadInputError("--gpus runs on CUDA devices; not with --device cpu")
    selected = None if gpus is None else select_gpus(gpus, cuda_device_count())
    console = _console()
    result = run_suite(Path(suite_dir), Path(out_dir), shard=Shard.parse(shard), device=device,
                       dtypes=dtypes or None, budget=list(budget_items), gamma=gamma, timeout_s=timeout_s,
                       log=lambda m: console.print(escape(m)), gpus=selected, only=only or None,
                       reference=reference,
                       compile_settings=CompileSettings.from_cli(mode, config_items))
    for level, row in result.levels().items():
        console.print(f"level {level}: {row['problems']} problems, geomean vs default "
                      f"{_fmt(row['geomean_vs_default'], '.3f', 'not measured')}, vs max-autotune-no-cudagraphs "
                      f"{_fmt(row['geomean_vs_max_autotune_no_cudagraphs'], '.3f', 'not measured')}")
    console.print(escape(f"wrote {out_dir}/suite.md and suite.json"))


@main.command("suite-merge")
@click.argument("shard_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@output_flags
@handle_errors
def suite_merge(shard_dirs: tuple[str, ...], out_dir: str) -> None:
    """Merge the results of suite shards into one report."""
    from kernelopt_bot.suite import merge, write_report

    merged = merge([Path(d) for d in shard_dirs])
    write_report(merged, Path(out_dir))
    click.echo(f"merged {len(merged.problems)} problems into {out_dir}/suite.md")


@main.command()
@click.argument("target")
@click.option("--kernel", "kernel_name", required=True, help="Kernel name (or g<graph>:name).")
@click.option("--candidate", "candidate_path", required=True, type=click.Path(dir_okay=False),
              help="Triton kernel source, or a JSON launch config.")
@DEVICE
@DTYPE
@click.option("--gamma", default=DEFAULT_GAMMA, show_default=True, type=click.FloatRange(min=1.0),
              help="Required end-to-end speedup.")
@click.option("--f64-factor", default=10.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Gate 3: allowed error against float64, as a multiple of the compiler's.")
@click.option("--timeout", "timeout_s", default=300.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Wall-clock limit for each sandboxed candidate run (seconds).")
@click.option("--allow-inline-asm", is_flag=True, help="Let gate 1 accept inline assembly.")
@TRAIN
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@output_flags
@handle_errors
def verify(target: str, kernel_name: str, candidate_path: str, device: str | None, dtype: str, gamma: float,
           f64_factor: float, timeout_s: float, allow_inline_asm: bool, train: bool, as_json: bool) -> None:
    """Run one candidate for one kernel of TARGET through the four gates.

    Exit code 0 whenever the cascade ran, whatever the verdict; 2 on bad input.
    """
    from kernelopt_bot.errors import BadInputError

    if not Path(candidate_path).is_file():
        raise BadInputError(f"{candidate_path}: no such file")
    device = _start(target, device)
    from kernelopt_bot.candidate import Candidate, CandidateError
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.targets import load_target
    from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
    from kernelopt_bot.verify.sandbox import SandboxLimits

    try:
        candidate = Candidate.from_file(candidate_path)
    except CandidateError as exc:
        raise BadInputError(str(exc)) from exc
    with _progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype, train=train)
        progress.step("compiling and capturing")
        cap = capture(tgt)
        try:
            kernel = cap.artifact.kernel(kernel_name)
        except KeyError as exc:
            raise BadInputError(str(exc.args[0])) from exc
        options = VerifyOptions(gamma=gamma, f64_factor=f64_factor, allow_inline_asm=allow_inline_asm,
                                sandbox=SandboxLimits(timeout_s=timeout_s))
        from kernelopt_bot.progress import plain_names

        progress.step(f"verifying {candidate.label} for {plain_names(kernel.qualified_name)}: gate 1 (static), gate 2 (the "
                      "kernel alone, sandboxed), gates 3-4 (the whole model)")
        with Cascade(cap, options) as cascade:
            verdict = cascade.verify(kernel, candidate)
        for step, seconds in verdict.seconds.items():
            progress.detail(f"  {step} {seconds:.2f} s")
    if as_json:
        click.echo(json.dumps({
            "kernel": verdict.kernel, "candidate": verdict.candidate, "accepted": verdict.accepted,
            "status": verdict.status,
            "gates": [{"name": g.name, "passed": g.passed, "reason": g.reason, "numbers": g.numbers}
                      for g in verdict.gates],
        }, default=str))
        return
    from rich.table import Table

    table = Table(title=escape(f"{verdict.kernel} <- {verdict.candidate}: {verdict.status}"))
    table.add_column("gate")
    table.add_column("result")
    table.add_column("reason")
    for g in verdict.gates:
        table.add_row(g.name, {True: "pass", False: "FAIL", None: "-"}[g.passed], escape(g.reason))
    _console().print(table)


def _launch_config(text: str) -> Any:
    """``--config``: flat or a pack's form (:meth:`LaunchConfig.from_user_json`)."""
    from kernelopt_bot.errors import BadInputError
    from kernelopt_bot.pack.format import LaunchConfig, PackError

    try:
        return LaunchConfig.from_user_json(json.loads(text))
    except json.JSONDecodeError as exc:
        raise BadInputError(f"--config is not JSON: {exc}") from exc
    except PackError as exc:
        raise BadInputError(f"--config: {exc}") from exc


@main.command()
@click.argument("target")
@click.option("--kernel", "kernel_name", required=True, help="Kernel name (or g<graph>:name).")
@click.option("--config", "config_json", default=None,
              help='Launch config to pin, e.g. \'{"XBLOCK": 64, "num_warps": 4}\' (block sizes, num_warps, '
                   'num_stages; or the pack\'s form \'{"kwargs": {"XBLOCK": 64}, "num_warps": 4}\').')
@click.option("--source", "source_file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Replacement kernel source (a full Triton kernel module).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@click.option("--merge/--no-merge", default=True, show_default=True,
              help="Add to OUT if it already is a pack.")
@DEVICE
@DTYPE
@output_flags
@handle_errors
def pin(target: str, kernel_name: str, config_json: str | None, source_file: str | None,
        out_path: str, merge: bool, device: str | None, dtype: str) -> None:
    """Write a pack entry for one kernel of TARGET by hand (a config, a source, or both).

    The entry is guarded to this machine's torch, triton and GPU. A config for the compiler's
    own kernel must pass gate 1 (block sizes the kernel takes, powers of two, within the device's
    limits); nothing else is verified here: `kernelopt bench` measures it.
    """
    from kernelopt_bot.errors import BadInputError

    if config_json is None and source_file is None:
        raise BadInputError("give --config, --source, or both")
    config = _launch_config(config_json) if config_json else None
    device = _start(target, device)
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.pack.export import lookup_key_or_none
    from kernelopt_bot.pack.format import KernelPack, PackEntry
    from kernelopt_bot.pack.runtime import running_environment
    from kernelopt_bot.targets import load_target
    from kernelopt_bot.verify.static import check_config

    with _progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype)
        progress.step("compiling and capturing")
        cap = capture(tgt, record=False)
    try:
        kernel = cap.artifact.kernel(kernel_name)
    except KeyError as exc:
        raise BadInputError(str(exc.args[0])) from exc
    if config is not None and source_file is None:  # a new source brings its own constexprs
        gate = check_config(kernel, config)
        if not gate.passed:
            raise BadInputError(f"--config: {gate.reason}")
    pack = _load_pack(out_path) if merge and Path(out_path).is_file() else KernelPack(target=target)
    pack.created_by = "kernelopt pin"
    pack.add(PackEntry(
        key=kernel.key, kernel_name=kernel.name,
        source=Path(source_file).read_text() if source_file else None, config=config,
        guard=running_environment(tgt.device), note="pinned by hand (unverified)",
        lookup_key=lookup_key_or_none(kernel.source),
    ))
    pack.save(out_path)
    click.echo(f"wrote {out_path}: {kernel.qualified_name} -> "
               f"{config.describe() if config else 'new source'}")


from kernelopt_bot.export_cli import export  # noqa: E402 - `kernelopt export`
from kernelopt_bot.github.cli import bot, sweep  # noqa: E402 - the GitHub front door's commands
from kernelopt_bot.store_cli import store  # noqa: E402 - `kernelopt store ...`

main.add_command(bot)
main.add_command(sweep)
main.add_command(export)
main.add_command(store)


def _help_everywhere(group: click.Group) -> None:
    """``-h`` on every command, set on the command itself: click builds (and keeps) a command's
    help option from the first context it is invoked in, so a command first run on its own
    (``bot``, by the Action's tests) would otherwise know only ``--help`` for the process's life."""
    for command in group.commands.values():
        command.context_settings = {**command.context_settings, **HELP_SETTINGS}
        if isinstance(command, click.Group):
            _help_everywhere(command)


_help_everywhere(main)

if __name__ == "__main__":  # pragma: no cover
    main()
