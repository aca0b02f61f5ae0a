"""How ``kernelopt`` shows what a command found: rich tables and lines on stdout.

Commands compute (the engine's results, or :mod:`kernelopt_bot.cli.reports`) and call one
function here; nothing here runs the engine or decides an exit code. Progress and errors go to stderr
elsewhere (:mod:`kernelopt_bot.progress`, :func:`kernelopt_bot.cli.options.fail`), so stdout
keeps only the result. Text from a target or a kernel is escaped, so rich does not read markup
in it. rich's console and tables are imported when first used, as the engine is.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from kernelopt_bot.cli.reports import HelionReport, LaunchesReport

if TYPE_CHECKING:
    from rich.console import Console

    from kernelopt_bot.cli.reports import InspectReport, LatestRun, RunDetail, RunList, VerifyReport
    from kernelopt_bot.harness.bench import BenchResult
    from kernelopt_bot.pack.format import LaunchConfig
    from kernelopt_bot.result import Recommendation, RunResult
    from kernelopt_bot.suite import SuiteResult


def _console() -> Console:
    from rich.console import Console

    # Off a terminal (CI logs, pipes) rich would wrap at 80 columns and cut kernel names.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _fmt(value: float | None, spec: str = ".3f", missing: str = "not measured") -> str:
    return missing if value is None else format(value, spec)


def log_line(message: str) -> None:
    """One line of a long command's own log (the suite's, as each problem finishes)."""
    _console().print(escape(message))


# inspect


def inspected(report: InspectReport | LaunchesReport | HelionReport) -> None:
    """What ``inspect`` found, in the form of the target's kind."""
    if isinstance(report, LaunchesReport):
        _kernel_launches(report)
    elif isinstance(report, HelionReport):
        _helion_kernel(report)
    else:
        _model_kernels(report)


def _model_kernels(report: InspectReport) -> None:
    """A model's kernels with their profile; the vendor calls kept; the model's time."""
    from rich.table import Table

    from kernelopt_bot.progress import plain_names

    art, prof = report.artifact, report.profile
    console = _console()
    title = escape(f"{report.label}: {len(art.kernels)} Triton kernels in {len(art.graphs)} graph(s)")
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
    elif not art.graphs:
        console.print("nothing compiled: torch.compile captured no graph (Dynamo did not trace the "
                      "model, an nn.LSTM say), so it runs eagerly and has no kernel to search")
    elif not art.kernels:
        console.print("nothing to compute: the compiled graph only views or reshapes its inputs, or its "
                      "tensors are empty (no Triton kernel, no library call)")
    else:
        console.print("vendor / fallback calls: none (every op became a Triton kernel)")
    if prof.measured:
        roof = f", copy roofline {prof.roofline.copy_gbps:.0f} GB/s" if prof.roofline else ""
        console.print(f"model {prof.model_ms:.4f} ms, vendor bucket {_fmt(prof.vendor_ms, '.4f')} ms{roof}")
    else:
        console.print("times: not measured (no CUDA device; kernels ran in the Triton interpreter)")


def _kernel_launches(report: LaunchesReport) -> None:
    """A launcher's kernel launches: where each is, its grid, constexprs, options, autotuning."""
    from rich.table import Table

    table = Table(title=escape(f"{report.name} [{report.device}, {report.dtype}]: "
                               f"{len(report.launches)} Triton kernel launch(es)"))
    for col in ("kernel", "where", "grid", "constexprs", "options", "autotune"):
        table.add_column(col)
    for launch in report.launches:
        where = f"{Path(launch.file).name}:{launch.line}" if launch.file else "-"
        tuned = ("-" if launch.autotune_configs is None
                 else f"{len(launch.autotune_configs)} configs; ran {json.dumps(launch.chosen)}")
        table.add_row(escape(launch.name), escape(where), str(launch.grid), escape(json.dumps(launch.constexprs)),
                      escape(json.dumps(launch.options)), escape(tuned))
    _console().print(table)


def _helion_kernel(report: HelionReport) -> None:
    """A Helion kernel, the config it runs, and its neighbours' count."""
    console = _console()
    console.print(escape(f"{report.name} [{report.device}, {report.dtype}]: Helion kernel "
                         f"{report.kernel}, {'pinned' if report.pinned else 'not pinned'}"))
    console.print(escape(f"runs with: {json.dumps(report.config)}"))
    console.print(f"{report.neighbours} neighbouring configs for a search")


# bench


def _timing(console: Console, result: BenchResult, before: str, after: str) -> None:
    """The times of a bench's two arms, or why there are none, and how far their outputs differ."""
    if result.measured:
        console.print(f"{before} {result.baseline_ms:.4f} ms, {after} {result.packed_ms:.4f} ms (medians), "
                      f"speedup {result.speedup:.3f}x (median of the passes' paired ratios), noise floor "
                      f"{_fmt(result.noise_floor, '.2%')} ({len(result.rounds)} rounds)")
        if result.host_speedup is not None and result.baseline_host_ms and result.packed_host_ms:
            console.print(f"host-inclusive latency of a call: {result.baseline_host_ms:.4f} ms -> "
                          f"{result.packed_host_ms:.4f} ms, {result.host_speedup:.3f}x, noise floor "
                          f"{_fmt(result.host_noise_floor, '.2%')}")
    else:
        console.print(escape(f"times: {result.reason}"))
    console.print(f"max |{before} - {after}| on fresh inputs: {result.max_abs_diff:.3g}")


def bench_pack(label: str, pack_path: str, entries: int, result: BenchResult) -> None:
    """``bench --pack``: which kernels the pack's entries reached (and why others did not), then
    the baseline against the packed model."""
    console = _console()
    console.print(escape(f"{label} with {pack_path}: {entries} entr{'y' if entries == 1 else 'ies'}, applied to "
                         f"{', '.join(result.applied) or 'no kernel'}"))
    for skipped in result.skipped:  # "kernel: why its guard does not match this machine"
        name, _, why = skipped.partition(": ")
        console.print(escape(f"  not applied to {name}: the entry is for another machine ({why})"))
    unmatched = entries - len(set(result.applied)) - len({s.partition(": ")[0] for s in result.skipped})
    if unmatched > 0:
        console.print(f"  {unmatched} entr{'y matches' if unmatched == 1 else 'ies match'} no kernel this "
                      "target compiles to here (another model, shape, dtype or Inductor version?)")
    _arm_starts(console, result)
    _timing(console, result, "baseline", "packed")


def _arm_starts(console: Console, result: BenchResult) -> None:
    """Arms that compiled the model cold and were restarted from the compiler's cache (so every
    arm starts alike: ``ModelArms.warm_load``), any that could not be and were timed as they
    compiled, and any whose autotuning settled a kernel on another config than the baseline's."""
    from kernelopt_bot.harness.arm_process import how_started

    restarted = [label for label, start in result.arm_starts.items() if how_started(start) == "replaced"]
    if restarted:
        console.print(escape(f"  {', '.join(restarted)}: compiled the model cold, then restarted from the "
                             "compiler's cache, so every arm starts alike"))
    for label, start in result.arm_starts.items():
        if isinstance(start.get("warm_load"), str):
            console.print(escape(f"  {label}: timed as it compiled ({start['warm_load']})"))
        unlike = start.get("configs_unlike_baseline") or []
        if unlike:  # its own autotuning picked otherwise: part of the gap is that, not the rounds' noise
            count = start.get("configs_unlike_count")
            count = count if isinstance(count, int) and count >= len(unlike) else len(unlike)
            shown = ", ".join(unlike[:3]) + (f" and {count - 3} more" if count > 3 else "")
            console.print(escape(f"  {label}: its compile autotuned {count} kernel(s) to other launch "
                                 f"configs than the baseline's ({shown})"))


def bench_patch(result: BenchResult) -> None:
    """``bench --patch``: the kernel target as it is against its patched copy."""
    _timing(_console(), result, "as it is", "patched")


# optimize and modes


def run_result(result: RunResult, out: Path) -> None:
    """An optimize run: each kernel's verdict, the end-to-end result, the compiler options
    measured, and what was written."""
    from rich.table import Table

    from kernelopt_bot.progress import plain_names

    console = _console()
    if result.nothing_to_search:
        console.print(escape(f"{result.name} [{result.device}, {result.dtype}]: {result.status}. {result.nothing_to_search}"))
    else:
        table = Table(title=escape(f"{result.name} [{result.device}, {result.dtype}]: {result.status}"))
        for col in ("kernel", "kind", "share", "candidates", "verdict", "speedup"):
            table.add_column(col)
        for k in result.kernels:
            table.add_row(escape(plain_names(k.name)), k.kind, _fmt(k.share, ".1%", "-"), str(k.candidates),
                          escape(k.status), _fmt(k.speedup, ".3f", "-"))
        console.print(table)
    if result.measured:
        console.print(escape(f"end to end: {result.baseline_ms:.4f} ms -> {result.optimized_ms:.4f} ms (medians), "
                             f"speedup {result.speedup:.3f}x over {result.baseline_label} (median of the "
                             f"passes' paired ratios; {result.pack_entries} kernels replaced)"))
        if result.latency_ms.get("baseline"):
            host_speedup = result.latency_ms.get("speedup")
            console.print(f"host-inclusive latency of a call: {result.latency_ms['baseline']:.4f} ms -> "
                          f"{result.latency_ms['optimized']:.4f} ms"
                          + (f", {host_speedup:.3f}x" if isinstance(host_speedup, (int, float)) else ""))
    else:
        console.print("end to end: not measured (no CUDA device)" if result.device != "cuda"
                      else "end to end: nothing verified, so nothing was measured against the original")
    for rec in result.recommendations:
        _recommendation(console, rec)
    written = "patch.diff" if getattr(result, "patch_path", None) else "pack.json"
    console.print(escape(f"wrote {out}/report.md, result.json, {written}, run.log"))


def recommendations(recs: list[Recommendation]) -> None:
    """``modes``: each compiler option against the default compile."""
    console = _console()
    for rec in recs:
        _recommendation(console, rec)


def _recommendation(console: Console, rec: Recommendation) -> None:
    estimate = f" of an estimated {rec.compile_estimate_s:.0f} s" if rec.compile_estimate_s is not None else ""
    spent = ([f"compiled in {rec.compile_s:.0f} s{estimate}"] if rec.compile_s is not None else []) + (
        [f"checked and timed in {rec.timed_s:.0f} s"] if rec.timed_s is not None else [])
    compiled = f" ({', '.join(spent)})" if spent else ""
    console.print(escape(f"option {rec.option}: {_fmt(rec.speedup, '.3f', '-')}x "
                         f"{'(verified)' if rec.verified else ''} {rec.detail}{compiled}"))


# suite


def suite_levels(result: SuiteResult, out_dir: str) -> None:
    """Each level's geometric-mean speedups, and where the report went."""
    from kernelopt_bot.suite import packs_note

    console = _console()
    for level, row in result.levels().items():
        console.print(f"level {level}: {row['problems']} problems, geomean vs default "
                      f"{_fmt(row['geomean_vs_default'], '.3f', 'not measured')}, vs max-autotune-no-cudagraphs "
                      f"{_fmt(row['geomean_vs_max_autotune_no_cudagraphs'], '.3f', 'not measured')}, the pack on "
                      f"max-autotune-nc {_fmt(row['geomean_pack_on_max_autotune_no_cudagraphs'], '.3f', 'not measured')}"
                      f"{packs_note(row)}, best verified "
                      f"(option, pack or both) {_fmt(row['geomean_best_verified'], '.3f', 'not measured')}")
    console.print(escape(f"wrote {out_dir}/suite.md and suite.json"))


def suite_merged(problems: int, out_dir: str) -> None:
    click.echo(f"merged {problems} problems into {out_dir}/suite.md")


# verify and pin


def verdict(report: VerifyReport) -> None:
    """Each gate's result and reason."""
    from rich.table import Table

    v = report.verdict
    table = Table(title=escape(f"{v.kernel} <- {v.candidate}: {v.status}"))
    table.add_column("gate")
    table.add_column("result")
    table.add_column("reason")
    for g in v.gates:
        table.add_row(g.name, {True: "pass", False: "FAIL", None: "-"}[g.passed], escape(g.reason))
    _console().print(table)


def pinned(out_path: str, kernel: str, config: LaunchConfig | None) -> None:
    click.echo(f"wrote {out_path}: {kernel} -> {config.describe() if config else 'new source'}")


# store: its tables are 160 wide, on a terminal or off one


def _store_table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=escape(title))
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console(width=160).print(table)


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _num(value: Any, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def store_runs(report: RunList) -> None:
    runs = report.runs
    _store_table(f"{len(runs)} run(s)", ("id", "target", "device", "dtype", "status", "finished", "speedup", "seconds"),
                 [[str(r["id"]), r["target"], r["device"], r["dtype"], r["status"], _when(r["finished_at"]),
                   _num(r["speedup"], ".3f"), _num(r["seconds"], ".0f")] for r in runs])


def store_run(report: RunDetail) -> None:
    run_id, kernels, candidates = report.run_id, report.kernels, report.candidates
    _store_table(f"run {run_id}: {len(kernels)} kernel(s)", ("kernel", "kind", "share", "time ms"),
                 [[k["name"], k["kind"], _num(k["share"], ".1%"), _num(k["time_ms"], ".4f")] for k in kernels])
    _store_table(f"run {run_id}: {len(candidates)} candidate(s)", ("kernel", "agent", "candidate", "verdict"),
                 [[c["kernel_key"][:12], c["agent"], c["label"], c["verdict"].get("status", "-")] for c in candidates])


def store_latest(report: LatestRun) -> None:
    """A target's newest result in a few plain lines: its status, speedup and kernels."""
    r = report.result
    click.echo(f"{r.target} [{r.device}, {r.dtype}]: {r.status}, speedup {_num(r.speedup, '.3f')}")
    for k in r.kernels:
        click.echo(f"  {k.name}: {k.status} {k.detail or ''}".rstrip())


def store_cache(history: list[dict[str, Any]]) -> None:
    _store_table(f"{len(history)} cache write(s)", ("kernel", "gpu", "torch", "triton", "kind", "speedup", "when", "why"),
                 [[h["kernel_key"][:12], h["gpu"], h["torch"], h["triton"], h["kind"], _num(h["speedup"], ".3f"),
                   _when(h["created_at"]), h["reason"][:60]] for h in history])


def store_dropped(rows: int) -> None:
    click.echo(f"dropped {rows} cache row(s)")


def store_exported(out_path: str, runs: int, cache_rows: int) -> None:
    click.echo(f"wrote {out_path}: {runs} run(s), {cache_rows} cache row(s)")


def store_imported(in_path: str, changed: int) -> None:
    click.echo(f"imported {in_path}: {changed} row(s) added or changed")
