"""``kernelopt optimize``: the whole run on one target, from capture to report.

This process holds the user's secrets (the LLM key) and loads nothing of the target: the engine
does, in an isolated process (:mod:`kernelopt_bot.pipeline`), which is why :func:`start` leaves
interpreter mode off here.
"""

from __future__ import annotations

from pathlib import Path

import click

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.cli import options, render
from kernelopt_bot.target_kinds import KINDS


@click.command()
@click.argument("target")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where report.md, result.json, pack.json and run.log go (default: kernelopt-out/<target>).")
@options.DEVICE
@options.DTYPE
@click.option("--budget", "budget_items", multiple=True, metavar="N|KEY=VALUE",
              help="Candidates to verify (N), or KEY=VALUE: candidates, kernels, candidates_per_kernel, "
                   "wall_seconds, gpu_seconds, tokens, cost, compile_options, rounds, gpu_memory_factor "
                   "(repeatable).")
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
@options.COMPILE_MODE
@options.INDUCTOR_CONFIG
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
@options.TRAIN
@click.option("--untimed-patch", is_flag=True,
              help="Kernel targets without a GPU: write patch.diff with the first config that passes gates 1-3, "
                   "marked as not timed (to see the patch a GPU run would deliver).")
@options.output_flags
@options.handle_errors
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

    budget = options.parse_budget(budget_items)
    # Keys are checked in the engine, which imports Inductor (a bad one: exit 2 there).
    settings = CompileSettings.from_cli(mode, config_items)
    options.start(target, device, interpreter=False)  # the engine loads the target and runs every kernel
    from kernelopt_bot.folders import make_dirs
    from kernelopt_bot.harness.isolation import ISOLATION_ENV, choose_isolation
    from kernelopt_bot.pipeline import run_pipeline, target_name
    from kernelopt_bot.plan import DEFAULT_BUDGET

    os.environ[ISOLATION_ENV] = isolation  # the engine and every child it starts
    method = choose_isolation(isolation).method  # --isolation namespace without namespaces stops here
    out = Path(out_dir) if out_dir else Path("kernelopt-out") / target_name(target)
    if llm_api_key_env is not None:
        from kernelopt_bot.errors import BadInputError
        from kernelopt_bot.harness.isolation import key_name_problem

        problem = key_name_problem(llm_api_key_env)  # every isolated child drops such names: the key stays here
        if problem:
            raise BadInputError(f"--llm-api-key-env: {problem}")
    llm = {"base_url": llm_base_url, "model": llm_model, "api_key_env": llm_api_key_env} if llm_base_url else None
    plan = {**DEFAULT_BUDGET, **budget}
    make_dirs(out)
    with options.make_progress(planned=plan["candidates"], deadline_s=plan["wall_seconds"],
                       log_path=out / "run.log") as progress:
        progress.note(f"isolation: {method}")
        result = run_pipeline(target, device=device, dtype=dtype, out_dir=out, budget=budget, gamma=gamma,
                              llm=llm, store_path=store_path, log=progress.relay, compile_settings=settings,
                              untimed_patch=untimed_patch, shown_as=shown_as, kind=kind, train=train)
    if result.status != "ok" and result.error_kind == "bad input":
        # nothing ran: the one-line reason is the whole answer (report.md and result.json say it too)
        options.fail(str(result.error), 2)
    render.run_result(result, out)
    if result.status != "ok":
        options.fail(f"run failed: {result.error}", 1)
