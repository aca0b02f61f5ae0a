"""``kernelopt bench``: a result measured against what it replaces, end to end.

A model target: torch.compile's build of it against the same build with a pack installed. A
kernel target (a launcher or Helion file): the file as it is against a copy of its folder with a
patch applied. Either way each arm runs in its own process and the timed rounds interleave them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kernelopt_bot.cli import options, render
from kernelopt_bot.errors import BadInputError, KerneloptError

if TYPE_CHECKING:
    from kernelopt_bot.harness.bench import BenchResult


@click.command()
@click.argument("target")
@click.option("--pack", "pack_path", default=None, type=click.Path(dir_okay=False),
              help="KernelPack JSON to install in the packed arm (a module target).")
@click.option("--patch", "patch_path", default=None, type=click.Path(dir_okay=False),
              help="patch.diff of a kernel target (a launcher or Helion file): timed applied to a copy of the "
                   "target's folder, against the folder as it is.")
@options.DEVICE
@options.DTYPE
@click.option("--rounds", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--reps", default=20, show_default=True, type=click.IntRange(1, 10000),
              help="Timed calls per arm per round.")
@options.COMPILE_MODE
@options.INDUCTOR_CONFIG
@options.TRAIN
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a summary.")
@options.output_flags
@options.handle_errors
def bench(target: str, pack_path: str | None, patch_path: str | None, device: str | None, dtype: str, rounds: int,
          reps: int, mode: str | None, config_items: tuple[str, ...], train: bool, as_json: bool) -> None:
    """torch.compile baseline against TARGET with PACK installed, end to end; or a kernel target
    against itself with PATCH applied."""
    from kernelopt_bot.target_kinds import target_kind

    if (pack_path is None) == (patch_path is None):
        raise BadInputError("give one of --pack (a module target) or --patch (a kernel target)")
    kind = target_kind(target)
    if (patch_path is not None) != (kind != "module"):
        raise BadInputError(f"{target} is a {kind} target: "
                            + ("--patch is for kernel targets; give --pack" if kind == "module"
                               else "its result is a patch; give --patch"))
    if train and kind != "module":
        raise BadInputError(f"{target} is a {kind} target: --train is for a module's training step")
    device = options.start(target, device)
    if patch_path is not None:
        result = _bench_patch(target, patch_path, device, dtype, rounds, reps)
        if as_json:
            click.echo(json.dumps(result.to_json()))
        else:
            render.bench_patch(result)
        return
    from kernelopt_bot.capture.settings import check_config, parse_config_items
    from kernelopt_bot.harness.bench import bench as run_bench
    from kernelopt_bot.targets import load_target

    config = check_config(parse_config_items(config_items), "--inductor-config")
    pack = options.load_pack(str(pack_path))
    with options.make_progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype, train=train)  # bad targets fail here, with exit code 2
        progress.step("compiling the baseline and packed arms" + (f", then {rounds} timed rounds"
                                                                    if device == "cuda" else ""))
        with _packed_arm_fails_as_bad_input(f"{pack_path} does not run with {target}"):
            result = run_bench(target, pack, device=tgt.device, dtype=dtype, rounds=rounds, reps=reps,
                               mode=mode, config=config, train=train, say=progress.detail)
    if as_json:
        click.echo(json.dumps(result.to_json()))
    else:
        render.bench_pack(tgt.label, str(pack_path), len(pack), result)


@contextmanager
def _packed_arm_fails_as_bad_input(what: str) -> Iterator[None]:
    """An error raised in the packed arm alone is the user's pack or patch: the baselines
    compiled and ran, and only the pack (or patch) differs in that arm. Said as ``WHAT: reason``.
    Out of memory is the device's size, not the pack's fault (exit 1, said as such)."""
    from kernelopt_bot.harness.arm_process import ArmRaised
    from kernelopt_bot.harness.failures import is_out_of_memory

    try:
        yield
    except ArmRaised as exc:
        if exc.label != "packed":
            raise
        if is_out_of_memory(exc.reason):
            raise KerneloptError(f"the GPU ran out of memory for the packed arm beside the baseline "
                                 f"(the device's size, not a fault of the pack): {exc.reason}") from exc
        raise BadInputError(f"{what}: {exc.reason}") from exc


def _bench_patch(target: str, patch_path: str, device: str, dtype: str, rounds: int, reps: int) -> BenchResult:
    """``bench --patch``: the patch applied (``git apply``) to a copy of the target's folder, the
    two files timed against each other in their own processes."""
    import shutil
    import subprocess
    import tempfile

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
        with options.make_progress() as progress:
            progress.step(f"starting {target} as it is and patched" + (f", then {rounds} timed rounds"
                                                                        if device == "cuda" else ""))
            with _packed_arm_fails_as_bad_input(f"{target} with {patch_path} applied does not run"):
                return bench_patch(str(Path(target).resolve()), str(copy / Path(target).name), device=device,
                                   dtype=dtype, rounds=rounds, reps=reps)
