"""``kernelopt modes``: the compiler's own options (a torch.compile mode, an Inductor setting)
measured against its default compile, with no kernel search; ``optimize`` runs the same
measurement within its budget."""

from __future__ import annotations

import json

import click

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.cli import options, render
from kernelopt_bot.errors import BadInputError


@click.command()
@click.argument("target")
@options.DEVICE
@options.DTYPE
@click.option("--option", "option_labels", multiple=True, metavar="LABEL",
              help="Only these options (repeatable), e.g. 'mode=max-autotune-no-cudagraphs' (default: all).")
@click.option("--rounds", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--gamma", default=DEFAULT_GAMMA, show_default=True, type=click.FloatRange(min=1.0))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list instead of a summary.")
@options.output_flags
@options.handle_errors
def modes(target: str, device: str | None, dtype: str, option_labels: tuple[str, ...], rounds: int, gamma: float,
          as_json: bool) -> None:
    """Measure the compiler's own options against its default compile, end to end (no search).

    Each option compiles in its own process and passes gate 3 (same outputs) before it is timed
    against the default with the interleaved harness; without CUDA nothing is measured.
    """
    device = options.start(target, device)
    from kernelopt_bot.compile_options import COMPILE_OPTIONS, recommend
    from kernelopt_bot.harness.model_arms import ModelArms
    from kernelopt_bot.targets import dtype_name, load_target

    known = {o.label: o for o in COMPILE_OPTIONS}
    unknown = [label for label in option_labels if label not in known]
    if unknown:
        raise BadInputError(f"unknown option {unknown[0]!r} (known: {', '.join(known)})")
    chosen = tuple(known[label] for label in option_labels) or COMPILE_OPTIONS
    with options.make_progress() as progress:
        progress.step(f"loading {target}")
        tgt = load_target(target, device, dtype)
        progress.step(f"compiling the default and {len(chosen)} option(s), each in its own process")
        # On a GPU every arm starts alike (a cold compile is replaced by a cache load, as the
        # baselines load what the first compile stored): a cold arm against loaded ones leans.
        with ModelArms(tgt.spec, tgt.device, dtype_name(tgt.dtype), warm_load=tgt.device == "cuda") as model_arms:
            recs = recommend(model_arms, tgt, gamma=gamma, rounds=rounds, options=chosen)
    if as_json:
        click.echo(json.dumps([r.to_json() for r in recs]))
    else:
        render.recommendations(recs)
