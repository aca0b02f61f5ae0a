"""``kernelopt inspect``: what a target is made of, before anything is searched.

A model is compiled and profiled (its Triton kernels, their share of the time, the vendor calls
kept); a standalone-kernel target's launcher runs once and its launches are recorded; a Helion
target shows the config it runs. Each kind gives its own report (:mod:`kernelopt_bot.cli.reports`).
"""

from __future__ import annotations

import json

import click

from kernelopt_bot.cli import options, render
from kernelopt_bot.cli.reports import HelionReport, InspectReport, LaunchesReport


@click.command()
@click.argument("target")
@options.DEVICE
@options.DTYPE
@options.TRAIN
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@options.output_flags
@options.handle_errors
def inspect(target: str, device: str | None, dtype: str, train: bool, as_json: bool) -> None:
    """Compile TARGET and list its Triton kernels and preserved vendor calls."""
    device = options.start(target, device)
    from kernelopt_bot.target_kinds import target_kind

    report: InspectReport | LaunchesReport | HelionReport
    if target_kind(target) == "triton":
        report = _inspect_launcher(target, device, dtype)
    elif target_kind(target) == "helion":
        report = _inspect_helion(target, device, dtype)
    else:
        report = _inspect_model(target, device, dtype, train)
    if as_json:
        click.echo(json.dumps(report.to_json(), default=str))
    else:
        render.inspected(report)


def _inspect_model(target: str, device: str, dtype: str, train: bool) -> InspectReport:
    """Compile and capture the model, then profile its kernels (timed only on CUDA)."""
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.profiling import profile
    from kernelopt_bot.targets import load_target

    with options.make_progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype, train=train)
        progress.step("compiling and capturing")
        cap = capture(tgt)
        progress.step("profiling")
        prof = profile(cap)
    return InspectReport(target=target, label=tgt.label, device=tgt.device, artifact=cap.artifact, profile=prof)


def _inspect_launcher(target: str, device: str, dtype: str) -> LaunchesReport:
    """A standalone-kernel target: run its launcher once and record the launches."""
    from kernelopt_bot.launchers import capture_launches, load_launcher

    with options.make_progress() as progress:
        progress.step(f"loading {target}")
        launcher = load_launcher(target, device, dtype)
        progress.step("running the launcher and recording its kernel launches")
        launches = capture_launches(launcher)
    return LaunchesReport(target=target, name=launcher.name, device=launcher.device, dtype=dtype,
                          reference=launcher.reference is not None, launches=launches)


def _inspect_helion(target: str, device: str, dtype: str) -> HelionReport:
    """A Helion target: its kernel, the config it runs (pinned or Helion's default), and the
    neighbours a search starts from."""
    from kernelopt_bot.helion_targets import load_helion, neighbour_configs

    with options.make_progress() as progress:
        progress.step(f"loading {target}")
        helion_target = load_helion(target, device, dtype)
        original = helion_target.original_config()
        neighbours = neighbour_configs(helion_target, original)
    return HelionReport(target=target, name=helion_target.name, device=helion_target.device, dtype=dtype,
                        kernel=helion_target.kernel_name, reference=helion_target.reference is not None,
                        pinned=helion_target.pinned, config=original, neighbours=len(neighbours))
