"""``kernelopt verify`` and ``pin``: one kernel of a target, by hand.

``verify`` runs one candidate for the kernel through the four gates, as the search would;
``pin`` writes a pack entry for it without them (a config alone is checked by gate 1), for
``bench`` to measure. Both compile the target to find the kernel its ``--kernel`` names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.cli import options, render
from kernelopt_bot.cli.reports import VerifyReport
from kernelopt_bot.errors import BadInputError

if TYPE_CHECKING:
    from kernelopt_bot.capture.artifact import Artifact, TritonKernel
    from kernelopt_bot.pack.format import LaunchConfig


def _kernel(artifact: Artifact, name: str) -> TritonKernel:
    """The kernel ``--kernel`` names; a name the target does not compile to is bad input."""
    try:
        return artifact.kernel(name)
    except KeyError as exc:
        raise BadInputError(str(exc.args[0])) from exc


@click.command()
@click.argument("target")
@click.option("--kernel", "kernel_name", required=True, help="Kernel name (or g<graph>:name).")
@click.option("--candidate", "candidate_path", required=True, type=click.Path(dir_okay=False),
              help="Triton kernel source, or a JSON launch config.")
@options.DEVICE
@options.DTYPE
@click.option("--gamma", default=DEFAULT_GAMMA, show_default=True, type=click.FloatRange(min=1.0),
              help="Required end-to-end speedup.")
@click.option("--f64-factor", default=10.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Gate 3: allowed error against float64, as a multiple of the compiler's.")
@click.option("--timeout", "timeout_s", default=300.0, show_default=True, type=click.FloatRange(min=1.0),
              help="Wall-clock limit for each sandboxed candidate run (seconds).")
@click.option("--allow-inline-asm", is_flag=True, help="Let gate 1 accept inline assembly.")
@options.TRAIN
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@options.output_flags
@options.handle_errors
def verify(target: str, kernel_name: str, candidate_path: str, device: str | None, dtype: str, gamma: float,
           f64_factor: float, timeout_s: float, allow_inline_asm: bool, train: bool, as_json: bool) -> None:
    """Run one candidate for one kernel of TARGET through the four gates.

    Exit code 0 whenever the cascade ran, whatever the verdict; 2 on bad input.
    """
    if not Path(candidate_path).is_file():
        raise BadInputError(f"{candidate_path}: no such file")
    device = options.start(target, device)
    from kernelopt_bot.candidate import Candidate, CandidateError
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.progress import plain_names
    from kernelopt_bot.targets import load_target
    from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
    from kernelopt_bot.verify.sandbox import SandboxLimits

    try:
        candidate = Candidate.from_file(candidate_path)
    except CandidateError as exc:
        raise BadInputError(str(exc)) from exc
    with options.make_progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype, train=train)
        progress.step("compiling and capturing")
        cap = capture(tgt)
        kernel = _kernel(cap.artifact, kernel_name)
        verify_options = VerifyOptions(gamma=gamma, f64_factor=f64_factor, allow_inline_asm=allow_inline_asm,
                                       sandbox=SandboxLimits(timeout_s=timeout_s))
        progress.step(f"verifying {candidate.label} for {plain_names(kernel.qualified_name)}: gate 1 (static), gate 2 (the "
                      "kernel alone, sandboxed), gates 3-4 (the whole model)")
        with Cascade(cap, verify_options) as cascade:
            verdict = cascade.verify(kernel, candidate)
        for step, seconds in verdict.seconds.items():
            progress.detail(f"  {step} {seconds:.2f} s")
    report = VerifyReport(verdict)
    if as_json:
        click.echo(json.dumps(report.to_json(), default=str))
    else:
        render.verdict(report)


def _launch_config(text: str) -> LaunchConfig:
    """``--config``: flat or a pack's form (:meth:`LaunchConfig.from_user_json`)."""
    from kernelopt_bot.pack.format import LaunchConfig, PackError

    try:
        return LaunchConfig.from_user_json(json.loads(text))
    except json.JSONDecodeError as exc:
        raise BadInputError(f"--config is not JSON: {exc}") from exc
    except PackError as exc:
        raise BadInputError(f"--config: {exc}") from exc


@click.command()
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
@options.DEVICE
@options.DTYPE
@options.TRAIN
@options.output_flags
@options.handle_errors
def pin(target: str, kernel_name: str, config_json: str | None, source_file: str | None,
        out_path: str, merge: bool, device: str | None, dtype: str, train: bool) -> None:
    """Write a pack entry for one kernel of TARGET by hand (a config, a source, or both).

    The entry is guarded to this machine's torch, triton and GPU. A config for the compiler's
    own kernel must pass gate 1 (block sizes the kernel takes, powers of two, within the device's
    limits); nothing else is verified here: `kernelopt bench` measures it.
    """
    if config_json is None and source_file is None:
        raise BadInputError("give --config, --source, or both")
    config = _launch_config(config_json) if config_json else None
    device = options.start(target, device)
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.pack.export import lookup_key_or_none
    from kernelopt_bot.pack.format import KernelPack, PackEntry
    from kernelopt_bot.pack.runtime import running_environment
    from kernelopt_bot.targets import load_target
    from kernelopt_bot.verify.static import check_config

    with options.make_progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype, train=train)
        progress.step("compiling and capturing")
        cap = capture(tgt, record=False)
    kernel = _kernel(cap.artifact, kernel_name)
    if config is not None and source_file is None:  # a new source brings its own constexprs
        gate = check_config(kernel, config)
        if not gate.passed:
            raise BadInputError(f"--config: {gate.reason}")
    pack = options.load_pack(out_path) if merge and Path(out_path).is_file() else KernelPack(target=target)
    pack.created_by = "kernelopt pin"
    pack.add(PackEntry(
        key=kernel.key, kernel_name=kernel.name,
        source=Path(source_file).read_text() if source_file else None, config=config,
        guard=running_environment(tgt.device), note="pinned by hand (unverified)",
        lookup_key=lookup_key_or_none(kernel.source),
    ))
    pack.save(out_path)
    render.pinned(out_path, kernel.qualified_name, config)
