"""``kernelopt suite`` and ``suite-merge``: ``optimize`` over a benchmark suite, and the shards'
results as one report.

Each problem runs as its own ``kernelopt optimize`` process (:mod:`kernelopt_bot.suite`), so a
problem that crashes or hangs costs only itself. This process runs no kernel (it never calls
``start``): it chooses the GPUs, runs the problems and reports each level.
"""

from __future__ import annotations

from pathlib import Path

import click

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.cli import options, render
from kernelopt_bot.errors import BadInputError


@click.command()
@click.argument("suite_dir", type=click.Path(file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--shard", default="1/1", show_default=True, help="Run only shard I of N (I/N, 1-based).")
@options.DEVICE
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
@click.option("--skip-measured", "skip_measured", multiple=True, type=click.Path(), metavar="PATH",
              help="Leave out the problems an earlier run measured (its suite.json or folder, a shard's or a "
                   "merge's; repeatable): a sweep over several GPU jobs goes on where the last stopped, and "
                   "--shard splits what is left.")
@click.option("--reference/--no-reference", default=True, show_default=True,
              help="Measure max-autotune-no-cudagraphs for the 'vs max-autotune' column when optimize's "
                   "budget did not (one more compile and benchmark per problem).")
@options.COMPILE_MODE
@options.INDUCTOR_CONFIG
@options.output_flags
@options.handle_errors
def suite(suite_dir: str, out_dir: str, shard: str, device: str | None, dtypes: tuple[str, ...],
          only: tuple[str, ...], budget_items: tuple[str, ...], gamma: float, timeout_s: float,
          gpus: str | None, skip_measured: tuple[str, ...], reference: bool, mode: str | None,
          config_items: tuple[str, ...]) -> None:
    """Run `kernelopt optimize` on every problem of SUITE_DIR, each in its own process."""
    from kernelopt_bot.capture.settings import CompileSettings
    from kernelopt_bot.gpu_pool import cuda_device_count, select_gpus
    from kernelopt_bot.shards import Shard
    from kernelopt_bot.suite import measured_slugs, run_suite

    _check_timeout(timeout_s, options.parse_budget(budget_items))  # validate before starting anything
    if gpus is not None and device == "cpu":
        raise BadInputError("--gpus runs on CUDA devices; not with --device cpu")
    selected = None if gpus is None else select_gpus(gpus, cuda_device_count())
    settings = CompileSettings.from_cli(mode, config_items)
    skip = set().union(*(measured_slugs(Path(p), settings) for p in skip_measured))
    if skip_measured:
        render.log_line(f"leaving out {len(skip)} problem(s) measured in {', '.join(skip_measured)}")
    result = run_suite(Path(suite_dir), Path(out_dir), shard=Shard.parse(shard), device=device,
                       dtypes=dtypes or None, budget=list(budget_items), gamma=gamma, timeout_s=timeout_s,
                       log=render.log_line, gpus=selected, only=only or None,
                       reference=reference, skip=skip, compile_settings=settings)
    render.suite_levels(result, out_dir)


def _check_timeout(timeout_s: float, budget: dict[str, object]) -> None:
    """A per-problem deadline shorter than the run's own would kill runs that keep their budget
    (on the H200 a ``--timeout 115`` beside the 110 s default killed a level-3 run in its final
    benchmark, and lost the candidate it had verified): refused before anything starts."""
    from kernelopt_bot.pipeline import WALL_MARGIN_S
    from kernelopt_bot.plan import RunPlan

    wall = RunPlan.parse(budget).wall_seconds
    need = None if wall is None else wall + WALL_MARGIN_S + PROCESS_EXIT_S
    if need is not None and timeout_s < need:
        raise BadInputError(f"--timeout {timeout_s:g} is shorter than a run may take: optimize ends within its "
                            f"wall budget ({wall:g} s) plus {WALL_MARGIN_S:g} s; give at least {need:g} s, "
                            "or a smaller --budget wall_seconds=")


PROCESS_EXIT_S = 5.0  # an optimize process's writing and exit after its run


@click.command("suite-merge")
@click.argument("shard_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@options.output_flags
@options.handle_errors
def suite_merge(shard_dirs: tuple[str, ...], out_dir: str) -> None:
    """Merge the results of suite shards into one report."""
    from kernelopt_bot.suite import merge, write_report

    merged = merge([Path(d) for d in shard_dirs])
    write_report(merged, Path(out_dir))
    render.suite_merged(len(merged.problems), out_dir)
