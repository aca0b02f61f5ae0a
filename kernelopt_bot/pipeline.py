"""The pipeline, once per target: capture -> profile -> search -> gates -> pack -> bench -> report.

Every front door (``kernelopt optimize``, the suite, the PR bot, the nightly sweep) calls
:func:`run_pipeline`, which runs the pipeline in an isolated engine process that holds no secret
(the target is someone else's code). It never raises for a bad or failing target: the RunResult says
``status="failed"`` with a one-line error, and ``report.md``, ``result.json`` and an empty
``pack.json`` are still written, so a sweep goes on and a PR comment can say what happened.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kernelopt_bot import __version__
from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.capture.settings import CompileSettings, check_config, target_settings
from kernelopt_bot.device import resolve_device
from kernelopt_bot.errors import BadInputError, KerneloptError
from kernelopt_bot.final_bench import benchmark_pack, empty_pack_need_s, final_need_s, final_pack_arm
from kernelopt_bot.folders import make_dirs
from kernelopt_bot.harness.failures import poisoned_in
from kernelopt_bot.harness.isolation import Channel
from kernelopt_bot.harness.work_watch import NO_WATCH, StartWatch, WorkWatch, no_start_watch
from kernelopt_bot.pack.format import KernelPack
from kernelopt_bot.plan import DEFAULT_BUDGET, RunPlan
from kernelopt_bot.result import RunResult
from kernelopt_bot.schedule import (
    OptionSteps,
    arms_end_by,
    final_reserve_s,
    held_back,
    launch_bound,
    options_first,
)
from kernelopt_bot.target_kinds import target_kind

# The wall budget is a deadline for the whole run, from the moment run_pipeline is called: no
# candidate, compiler option or final benchmark starts that its estimate says cannot finish, and
# their waits end at the deadline. What may still run past it: closing the model arms, writing
# result.json and report.md, and a step that took longer than its estimate. The run ends within
# ``wall_seconds + WALL_MARGIN_S`` (tests/test_wall_budget.py holds a CPU run to it).
WALL_MARGIN_S = 10.0
# The work key under which the engine's load and first run of the target are watched (_start_watch).
TARGET_START_WORK = "target start"


def reproduce_command(target: str, device: str | None, dtype: str, budget: dict[str, Any],
                      gamma: float, llm: dict[str, Any] | None,
                      compile_settings: CompileSettings | None = None, untimed_patch: bool = False,
                      train: bool = False) -> str:
    """The ``kernelopt optimize`` command line that repeats this run, as a user types it: budget
    values in the form ``--budget`` parses (JSON: ``true``/``false``/``null``, numbers)."""
    parts = ["kernelopt", "optimize", target, "--dtype", dtype]
    if device:
        parts += ["--device", device]
    if untimed_patch:
        parts += ["--untimed-patch"]
    if train:
        parts += ["--train"]
    if compile_settings is not None:
        parts += compile_settings.cli_args()
    for key, value in budget.items():
        if value != DEFAULT_BUDGET.get(key):
            parts += ["--budget", f"{key}={json.dumps(value)}"]
    if gamma != DEFAULT_GAMMA:
        parts += ["--gamma", str(gamma)]
    if llm and llm.get("base_url"):
        parts += ["--llm-base-url", str(llm["base_url"])]
        if llm.get("model"):
            parts += ["--llm-model", str(llm["model"])]
    return shlex.join(parts)


EARLIER = "previous"  # where a failed run moves the files of an earlier run whose pack had entries
EARLIER_FILES = ("pack.json", "result.json", "report.md")


def _write(out_dir: Path, result: RunResult, pack: KernelPack) -> None:
    from kernelopt_bot.report import render_report

    make_dirs(out_dir)
    if result.status == "failed" and not len(pack):
        kept = _keep_earlier_pack(out_dir)
        if kept:
            result.error = f"{result.error or 'failed'} (the earlier run's pack, {kept}, was kept in {EARLIER}/)"
    pack.save(out_dir / "pack.json")
    result.pack_path = str(out_dir / "pack.json")
    result.save(out_dir / "result.json")
    (out_dir / "report.md").write_text(render_report(result))


def _keep_earlier_pack(out_dir: Path) -> str | None:
    """Move an earlier run's files out of a failed run's way where its pack has entries, and say
    what it held: a failed run writes an empty ``pack.json``, and run again after a model file broke,
    it replaced the pack a GPU run had verified. A folder whose pack is empty or unreadable has
    nothing to keep (None)."""
    try:
        entries = len(KernelPack.load(out_dir / "pack.json"))
    except (OSError, ValueError, KerneloptError):
        return None
    if not entries:
        return None
    keep = make_dirs(out_dir / EARLIER)
    for name in EARLIER_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.replace(out_dir / name, keep / name)
    return f"{entries} entr{'y' if entries == 1 else 'ies'}"


ENGINE_ENTRY = "kernelopt_bot.pipeline.engine_main"


def engine_deadline_s(wall_seconds: float | None) -> float | None:
    """How long the parent waits for the engine at most: twice the wall budget plus 15 minutes for
    an arm's compile on a GPU, a net under what the budget does not bound (a gate or a step
    already running at the deadline; the target's start is bounded by the budget itself:
    ``_start_watch``); ``None`` (no wall budget) waits as long as the run takes."""
    return None if wall_seconds is None else 2.0 * float(wall_seconds) + 900.0


def run_pipeline(target: str, *, device: str | None = None, dtype: str = "fp32", out_dir: Path,
                 budget: dict[str, Any] | None = None, gamma: float = DEFAULT_GAMMA,
                 llm: dict[str, Any] | None = None, store_path: str | Path | None = None,
                 log: Callable[[str], None] = lambda _m: None, shown_as: str | None = None,
                 compile_settings: CompileSettings | None = None, untimed_patch: bool = False,
                 kind: str | None = None, train: bool = False, import_root: Path | None = None) -> RunResult:
    """Run the whole pipeline on one target in an isolated engine process and write report.md,
    result.json and pack.json.

    The target is model code someone else wrote (a PR's, say): it is loaded only in the engine,
    a child with no secret in its environment, in its own namespaces where the machine allows
    (:mod:`kernelopt_bot.harness.isolation`). This process keeps the LLM key (the engine reaches
    the endpoint through :class:`~kernelopt_bot.search.llm.proxy.LLMProxy`), relays the engine's
    log lines to ``log`` and reads its :class:`RunResult` back; an engine that crashes or outlives
    :func:`engine_deadline_s` is killed with everything it started and the run is failed.

    ``shown_as``: the target as its user names it (a path relative to their repository, say), for
    the command to reproduce the run; default ``target``. ``compile_settings``: how the user
    compiles the model (:mod:`kernelopt_bot.capture.settings`); every compile of the run uses them
    and the baseline is that compile. ``untimed_patch``: a kernel target on a machine without a
    GPU still gets a patch of the configs that pass gates 1-3, marked as not timed. ``kind``: the
    kind of target (module, triton, helion) a caller's config says it is; another kind fails the
    run as bad input before anything starts. ``train``: a module target is optimized as a training
    step (forward and backward kernels; gate 3 checks the loss and every gradient). ``import_root``:
    where a ``pkg.mod:factory`` target imports from (a repository): put on the engine's import path
    only, never this process's, which may hold a key (a repository's ``yaml.py`` must not shadow
    what it imports)."""
    from kernelopt_bot.harness.isolation import choose_isolation, protect_this_process

    protect_this_process()
    start = time.time()
    out_dir = Path(out_dir)
    settings = compile_settings or CompileSettings()
    reproduce = reproduce_command(shown_as or target, device, dtype, budget or {}, gamma, llm, settings, untimed_patch,
                                  train)
    if kind is not None and (found := target_kind(target)) != kind:
        return _failed(target, device, dtype, out_dir, start, f"{shown_as or target} is a {found} target, not the "
                       f"{kind} target the config says", reproduce, error_kind="bad input")
    try:
        plan = RunPlan.parse(budget, gamma)
        isolation = choose_isolation()
    except KerneloptError as exc:
        return _failed(target, device, dtype, out_dir, start, str(exc), reproduce,
                       error_kind="bad input" if isinstance(exc, BadInputError) else "")
    # The engine gets the checked plan as data and rebuilds it (RunPlan.parse of its own to_json).
    request = {"target": target, "device": device, "dtype": dtype, "out_dir": str(out_dir),
               "budget": plan.to_json(), "gamma": plan.gamma, "compile": settings.to_json(),
               "started": start,  # the wall budget counts from here: the engine's start is part of the run
               "store_path": None if store_path is None else str(store_path),
               "reproduce": reproduce, "isolation": isolation.method, "untimed_patch": untimed_patch,
               "train": train, "import_root": None if import_root is None else str(import_root)}
    with _engine_llm(llm, plan, log) as (engine_llm, folders, llm_problem):
        request["llm"], request["llm_problem"] = engine_llm, llm_problem
        return _run_engine(request, isolation, folders, engine_deadline_s(plan.wall_seconds), log, start)


def _run_engine(request: dict[str, Any], isolation: Any, folders: list[str], deadline_s: float | None,
                log: Callable[[str], None], start: float) -> RunResult:
    from kernelopt_bot.harness.isolation import ISOLATION_ENV, NESTED, spawn_isolated
    from kernelopt_bot.harness.supervisor import supervise

    out_dir = make_dirs(request["out_dir"])
    writable = [str(out_dir.resolve()), *folders]
    if request["store_path"] is not None:
        writable.append(str(Path(request["store_path"]).resolve().parent))
    failed = functools.partial(_failed, request["target"], request["device"], request["dtype"], out_dir, start,
                               reproduce=request["reproduce"], isolation=isolation.method)
    # Chosen once per run: an engine without namespaces gives its children none either.
    mode = "none" if isolation.method == "none" else NESTED

    def start_engine(engine_request: dict[str, Any]) -> Any:
        return spawn_isolated(ENGINE_ENTRY, engine_request, writable=writable, isolation=isolation,
                              extra_env={ISOLATION_ENV: mode}, name="kernelopt-engine")

    outcome = supervise(start_engine, request, deadline_s, log)
    if outcome.result_json is None:
        return failed(outcome.error or "the engine process ended without a result")
    try:
        return RunResult.from_json(json.loads(outcome.result_json))
    except (TypeError, ValueError) as exc:
        return failed(f"the engine process sent an unreadable result ({type(exc).__name__}: {exc})")


def _failed(target: str, device: str | None, dtype: str, out_dir: Path, start: float, error: str,
            reproduce: str = "", isolation: str = "", error_kind: str = "") -> RunResult:
    """A failed run decided by this process (bad options, a dead engine), written like any other."""
    result = RunResult(target=target, name=target_name(target), device=device or "auto", dtype=dtype, status="failed",
                       error=error, reproduce=reproduce, isolation=isolation, error_kind=error_kind)
    result.seconds = time.time() - start
    _write(out_dir, result, KernelPack(target=target, created_by="kernelopt optimize"))
    return result


def target_name(target: str) -> str:
    """The name a run goes by: the file's stem, or the factory's name of ``pkg.mod:factory``."""
    return Path(target).stem if target.endswith(".py") else target.rpartition(":")[2]


@contextlib.contextmanager
def _engine_llm(llm: dict[str, Any] | None, plan: RunPlan, log: Callable[[str], None]
                ) -> Iterator[tuple[dict[str, Any] | None, list[str], str | None]]:
    """The engine's ``llm`` options, the folders it must reach, and why the agents cannot run
    (``None`` if they can): the key stays here, behind a proxy on a Unix socket; bad settings mean
    the timed tuner only, as inside the engine, and the result says so."""
    if not llm or not llm.get("base_url"):
        yield None, [], None
        return
    from kernelopt_bot.errors import BadInputError
    from kernelopt_bot.search.llm.config import LLMSettings
    from kernelopt_bot.search.llm.proxy import LLMProxy

    try:
        settings = LLMSettings.from_env(base_url=llm.get("base_url"), model=llm.get("model"),
                                        api_key_env=llm.get("api_key_env"))
    except BadInputError as exc:
        log(f"warning: LLM agents disabled ({exc}); using the timed tuner only")
        yield None, [], str(exc)
        return
    # A backstop only: the engine's budget stops first. Each candidate costs a handful of calls
    # (plan, code, repairs, summary), each retried at most max_retries times.
    calls = 8 * ((plan.candidates or 0) + plan.kernels + 1) * (settings.max_retries + 1)
    with LLMProxy(settings, max_tokens=plan.tokens, max_requests=calls) as proxy:
        yield proxy.engine_settings(), [proxy.folder], None


def engine_main(conn: Channel, request: dict[str, Any]) -> None:
    """The engine process: run the pipeline here, send each log line and then the result. Its
    risky work is announced to the parent (:class:`WorkWatch`); after a poisoned device it says
    so and exits, and the parent starts another (:mod:`kernelopt_bot.harness.supervisor`)."""
    from kernelopt_bot.harness.isolation import protect_this_process

    protect_this_process()
    lock = threading.Lock()

    def send(message: tuple[str, Any]) -> None:
        with lock:
            conn.send(message)

    def log(message: str) -> None:
        send(("log", message))

    if request.get("import_root") and request["import_root"] not in sys.path:
        sys.path.insert(0, request["import_root"])  # the target's repository, for pkg.mod:factory entries
    try:
        device = resolve_device(request["device"])
    except KerneloptError:
        device = "cpu"  # the pipeline reports the bad device; nothing runs on one
    work_watch = WorkWatch(send, device, request.get("quarantine"))
    try:
        result = _run_pipeline_here(request["target"], device=request["device"], dtype=request["dtype"],
                                    out_dir=Path(request["out_dir"]), budget=request["budget"], gamma=request["gamma"],
                                    llm=request["llm"], store_path=request["store_path"], log=log,
                                    reproduce=request["reproduce"], isolation=request["isolation"],
                                    llm_problem=request.get("llm_problem"), started=request.get("started"),
                                    compile_settings=request.get("compile"), work_watch=work_watch,
                                    restarts=request.get("restarts"), untimed_patch=bool(request.get("untimed_patch")),
                                    train=bool(request.get("train")))
    except BaseException as exc:  # this process's device is unusable: the parent starts another
        poisoned = poisoned_in(exc)
        if poisoned is None:
            raise
        send(("poisoned", {"key": poisoned.key, "label": poisoned.label, "reason": poisoned.reason}))
        conn.close()
        os._exit(4)
    with lock:  # JSON text: what result.json holds, nothing the parent would have to rebuild
        conn.send(("done", json.dumps(result.to_json(), default=str)))
    conn.close()


def _run_pipeline_here(target: str, *, device: str | None, dtype: str, out_dir: Path,
                       budget: dict[str, Any] | None, gamma: float, llm: dict[str, Any] | None,
                       store_path: str | Path | None, log: Callable[[str], None], reproduce: str,
                       isolation: str, llm_problem: str | None = None, started: float | None = None,
                       compile_settings: dict[str, Any] | None = None, work_watch: WorkWatch = NO_WATCH,
                       restarts: list[dict[str, Any]] | None = None, untimed_patch: bool = False,
                       train: bool = False) -> RunResult:
    """The pipeline in this process (the engine's): never raises for a bad or failing target.
    ``llm_problem``: why the parent could not give the engine the LLM endpoint it was asked for;
    ``started``: when the run began in the parent (``time.time()``), where the wall budget starts;
    ``restarts``: the engines before this one that went down, and in what work (the supervisor's)."""
    start = time.time() if started is None else min(float(started), time.time())
    result = RunResult(target=target, name=target_name(target), device=device or "auto", dtype=dtype,
                       reproduce=reproduce, isolation=isolation, train=train)
    if llm_problem:
        result.llm_status, result.llm_error = "unavailable", llm_problem
    pack = KernelPack(target=target, created_by="kernelopt optimize")
    if started is not None:  # the engine process's start, counted in the wall budget like every step
        result.phases["starting the engine"] = round(time.time() - start, 2)
    if restarts:
        result.processes["engine_restarts"] = list(restarts)
        for downed in restarts:
            log(f"    an earlier engine went down in {downed.get('label')} ({downed.get('reason')}); that work is skipped")
    phase_log = _PhaseLog(result.phases, log, start)
    try:
        plan = RunPlan.parse(budget, gamma)
        result.budget = plan.to_json()
        settings = CompileSettings.from_json(compile_settings)
        result.compile = settings.to_json()
        kind = target_kind(target)
        # The target's start within the wall budget; not for an engine that replaces one that went
        # down: its start already fit once, and its result keeps the record of that restart.
        start_watch = (no_start_watch if restarts
                       else _start_watch(work_watch, plan, time.time() - start, resolve_device(device)))
        if kind != "module" and train:
            raise BadInputError(f"{target}: --train optimizes a module's training step; a {kind} kernel target "
                                "runs as its launcher calls it")
        if kind != "module":  # a standalone Triton or Helion kernel: a patch to its source, no pack
            from kernelopt_bot.helion_run import run_helion_target
            from kernelopt_bot.launcher_run import run_launcher_target

            run_kernel_target = run_launcher_target if kind == "triton" else run_helion_target
            patch = run_kernel_target(target, device, dtype, gamma=plan.gamma, rounds=plan.rounds,
                                        candidates_per_kernel=plan.candidates_per_kernel, result=result,
                                        out_dir=out_dir, log=phase_log, work_watch=work_watch,
                                        ends_at=None if plan.wall_seconds is None else start + plan.wall_seconds,
                                        untimed_patch=untimed_patch, start_watch=start_watch)
            result.patch_path = None if patch is None else str(patch)
        else:
            from kernelopt_bot.harness.device_watch import DeviceMemoryWatch
            from kernelopt_bot.harness.model_arms import CONTEXT_MB

            watch = DeviceMemoryWatch(resolve_device(device), phase=lambda: phase_log.clock.current,
                                      processes=_gpu_processes, context_mb=CONTEXT_MB)
            try:
                with watch:
                    pack = _run(target, device, dtype, plan, settings, llm, store_path, result, phase_log,
                                time.time() - start, work_watch, train, watch, start_watch)
            finally:
                _record_device_peaks(result, watch)
    except Exception as exc:  # one target's failure never kills a sweep
        poisoned = poisoned_in(exc)
        if poisoned is not None:  # cleanup on the poisoned device raised over it: the engine must go
            raise poisoned from exc
        result.status = "failed"
        if isinstance(exc, KerneloptError):
            result.error = str(exc)
            result.error_kind = "bad input" if isinstance(exc, BadInputError) else ""
        else:
            tail = traceback.format_exc().strip().splitlines()[-1]
            result.error = f"internal error: {type(exc).__name__}: {exc} [{tail[:200]}]"
    phase_log.clock.stop()
    result.processes = {**_process_counts(result.device), **result.processes}
    log(_processes_line(result.processes))
    result.seconds = time.time() - start
    _write(out_dir, result, pack)
    return result


def _gpu_processes() -> int:
    """The run's processes that hold a CUDA context now: the engine and its running children,
    the compile process aside (it compiles for the GPU without touching it)."""
    from kernelopt_bot.harness.compile_pool import PROCESS_NAME as COMPILE_PROCESS
    from kernelopt_bot.harness.isolation import processes_alive

    return 1 + processes_alive(excluding=(COMPILE_PROCESS,))


def _record_device_peaks(result: RunResult, watch: Any) -> None:
    """The device-wide peak of the run and of each phase (MiB), and how many of the run's
    processes were on the GPU at the peak, into ``result.processes``."""
    result.processes["device_peak_mb"] = None if watch.peak_mb is None else round(watch.peak_mb, 1)
    result.processes["device_peak_processes"] = watch.processes_at_peak
    if watch.peak_beyond_mb is not None:
        result.processes["context_mb"] = round(watch.context_mb, 1)
        result.processes["context_measured"] = watch.context_measured
        result.processes["beyond_contexts_mb"] = round(watch.peak_beyond_mb, 1)
        result.processes["beyond_contexts_processes"] = watch.processes_at_peak_beyond
        result.processes["beyond_contexts_phase"] = watch.phase_at_peak_beyond
    if watch.peaks_by_phase:
        result.processes["device_peak_mb_by_phase"] = {k: round(v, 1) for k, v in watch.peaks_by_phase.items()}
    if watch.engine_peaks_by_phase:
        result.processes["engine_peak_mb_by_phase"] = {k: round(v, 1) for k, v in watch.engine_peaks_by_phase.items()}


def _process_counts(device: str) -> dict[str, Any]:
    """What the run cost in processes and memory: the engine itself (this process, started by the
    parent for the run) plus every isolated child it started, and the engine's peak GPU memory
    (``torch.cuda.max_memory_allocated``; the model arms' own memory is theirs, not counted).
    ``long_lived``: the processes that serve the whole run (the engine, the compile process, the
    baseline arms), started again only after a failure; the others each do one job in a fresh
    process: an arm that makes one measurement (a compiler option, the final benchmark), a
    sandbox that runs one untrusted candidate's gate 2 or timing job."""
    from kernelopt_bot.harness.arm_process import arm_process_name
    from kernelopt_bot.harness.compile_pool import PROCESS_NAME as COMPILE_PROCESS
    from kernelopt_bot.harness.isolation import processes_started_by_name
    from kernelopt_bot.harness.model_arms import BASELINE_LABELS
    from kernelopt_bot.verify.sandbox import SANDBOX_PROCESS

    peak: float | None = None
    if device == "cuda":
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            peak = round(torch.cuda.max_memory_allocated() / (1 << 20), 1)
    by_name = processes_started_by_name()
    serving = (COMPILE_PROCESS, *map(arm_process_name, BASELINE_LABELS))
    return {"started": 1 + sum(by_name.values()), "sandboxes": by_name.get(SANDBOX_PROCESS, 0),
            "long_lived": 1 + sum(by_name.get(name, 0) for name in serving), "peak_gpu_mb": peak}


def _processes_line(processes: dict[str, Any]) -> str:
    """optimize.log's line on what the run cost in processes and GPU memory."""

    def mib(key: str) -> str:
        value = processes.get(key)
        return "not measured" if value is None else f"{value:.0f} MiB"

    line = (f"    processes started: {processes['started']} (the engine and its children; "
            f"{processes['sandboxes']} sandbox(es))")
    if processes.get("long_lived") is not None:
        line += (f", {processes['long_lived']} serving the whole run and "
                 f"{processes['started'] - processes['long_lived']} for one job each")
    line += f"; peak GPU memory: {mib('peak_gpu_mb')} in the engine"
    if processes.get("device_peak_mb") is not None:
        line += f", {mib('device_peak_mb')} on the device (every process)"
        model_mb, at_peak = processes.get("model_gpu_mb"), processes.get("device_peak_processes")
        if model_mb:
            line += f"; the compiled model alone holds {mib('model_gpu_mb')} ({processes['device_peak_mb'] / model_mb:.1f}x)"
        if at_peak:
            line += f"; {at_peak} process(es) on the GPU at that peak"
        beyond, context = processes.get("beyond_contexts_mb"), processes.get("context_mb")
        if beyond is not None and context is not None:
            # The part of a small model's peak that no plan of ours cuts is the processes' CUDA
            # contexts (the MLP's 17x on the H100, 12-06); the context is measured in the engine
            # (at most CONTEXT_MB), and what is beyond them is counted at every reading, so a phase
            # with fewer processes but more memory is not hidden by the overall peak's.
            how = "measured in the engine" if processes.get("context_measured") else "estimated"
            line += (f"; beyond the CUDA contexts of the processes alive at each reading ({context:.0f} MiB each, "
                     f"{how}), at most {max(0.0, beyond):.0f} MiB"
                     + (f" ({max(0.0, beyond) / model_mb:.1f}x the model)" if model_mb else "")
                     + f", with {processes.get('beyond_contexts_processes')} process(es) on the GPU"
                     + (f" ({processes['beyond_contexts_phase']})" if processes.get("beyond_contexts_phase") else ""))

    by_phase = processes.get("device_peak_mb_by_phase") or {}
    engine = processes.get("engine_peak_mb_by_phase") or {}
    if by_phase:
        line += "\n    device peak by phase (the engine's own in brackets): " + ", ".join(
            f"{phase} {mb:.0f} MiB" + (f" ({engine[phase]:.0f})" if phase in engine else "")
            for phase, mb in by_phase.items())
    return line


class _PhaseLog:
    """The pipeline's log: a top-level step message (no leading spaces) starts a phase of the run's
    :class:`StepClock` (``phases`` in result.json: where a slow run's minutes went); every message
    goes on to ``log``, a step's prefixed with the seconds since the run started."""

    def __init__(self, phases: dict[str, float], log: Callable[[str], None], start: float) -> None:
        from kernelopt_bot.harness.timing import StepClock

        self.clock = StepClock(phases)
        self._log, self._start = log, start

    def __call__(self, message: str) -> None:
        if message.startswith((" ", "warning")):  # a detail of the current step
            self._log(message)
            return
        self.clock.begin(message.split(" (")[0])
        self._log(f"[{time.time() - self._start:4.0f} s] {message}")


def _start_watch(work_watch: WorkWatch, plan: RunPlan, elapsed: float, device: str) -> StartWatch:
    """The target's load and first run (a model's eager check, compile, capture and profile; a
    kernel file's load and launcher run), watched as work the run cannot go on without: each
    step may take what is left of the whole wall budget (no limit without one). Past the
    deadline the supervisor kills the engine and the run fails at the deadline, saying so: on
    the CPU a large model's kernels run in the Triton interpreter for many minutes, and a run
    held there kept a sweep's runner past its budget (it waited 2 x budget + 15 minutes). Each
    step is named as the error names it: ``watching("compiling and capturing the model",
    kernels=True)``; ``kernels``: the step runs the target's Triton kernels (on the CPU, in the
    interpreter, which smaller shapes speed up)."""
    ends_at = None if plan.wall_seconds is None else time.monotonic() + float(plan.wall_seconds) - elapsed

    def watching(what: str, *, kernels: bool = False) -> contextlib.AbstractContextManager[None]:
        left = None if ends_at is None else max(0.0, ends_at - time.monotonic())
        why = None if plan.wall_seconds is None else (
            f"the wall budget ({plan.wall_seconds:g} s) ran out while {what} (the engine was killed): the "
            "target takes longer than the whole budget to start here, so nothing was searched; give it more "
            "time (--budget wall_seconds=N, or budget: {wall_seconds: N} in .kernelopt.yml)"
            + (" or smaller shapes (on the CPU its kernels run in the Triton interpreter)"
               if kernels and device == "cpu" else ""))
        return work_watch.watching(TARGET_START_WORK, what, left, ends_run=why)

    return watching


def _run(target: str, device: str | None, dtype: str, plan: RunPlan, settings: CompileSettings,
         llm: dict[str, Any] | None,
         store_path: str | Path | None, result: RunResult, log: Callable[[str], None], elapsed: float,
         work_watch: WorkWatch = NO_WATCH, train: bool = False, watch: Any = None,
         start_watch: StartWatch = no_start_watch) -> KernelPack:
    """The module pipeline: capture, profile, search, the compiler's options, the final benchmark.
    ``watch``: the run's :class:`~kernelopt_bot.harness.device_watch.DeviceMemoryWatch`, already
    sampling (its peak goes into the store's record of the run); ``start_watch``: around the
    target's load and capture (:func:`_start_watch`)."""
    import torch

    from kernelopt_bot.capture.recorder import capture, versions
    from kernelopt_bot.compile_options import bench_need_s, calls_templates, template_tune_s
    from kernelopt_bot.harness.arm_process import compile_seconds
    from kernelopt_bot.harness.compile_pool import start_pool
    from kernelopt_bot.harness.kernel_service import compile_threads
    from kernelopt_bot.pack.runtime import running_environment
    from kernelopt_bot.profiling import profile
    from kernelopt_bot.search.budget import TimerWithinDeadline
    from kernelopt_bot.search.orchestrator import Orchestrator, SearchLimits
    from kernelopt_bot.search.tuner import TimedTuner
    from kernelopt_bot.store import Store
    from kernelopt_bot.targets import load_target
    from kernelopt_bot.verify.cascade import Cascade

    # The wall budget covers the whole run: the search stops early enough to leave the final
    # benchmark its time on a GPU (it compiles the packed model once more and times it).
    reserve = final_reserve_s(resolve_device(device), train)
    budget = plan.budget(elapsed_before=elapsed, reserve_s=reserve)
    log("loading the target" + (" (a training step)" if train else ""))
    with start_watch("loading the model and running it eagerly"):
        tgt = load_target(target, device, dtype, train=train)
    result.device = tgt.device
    own = target_settings(tgt.torch_compile, target)
    if settings.is_default and own is not None and not own.is_default:
        settings = own  # the target's file says how it is compiled; no flag said otherwise
        result.compile = settings.to_json()
        log(f"    compiled as the target's TORCH_COMPILE says: {settings.label}")
    # The compile process for the search's variants starts now: its start overlaps the capture.
    pool = start_pool(tgt.device, compile_threads())
    try:  # the compile process is the Cascade's to close; until it exists, ours
        log("compiling and capturing")
        if settings.config:  # this process's compiles, for its lifetime (as in every arm)
            torch._inductor.config.patch(check_config(settings.config)).__enter__()
        with start_watch("compiling and capturing the model", kernels=True):
            cap = capture(tgt, mode=settings.mode)
            arm_mb_hint = _arm_mb_hint() if tgt.device == "cuda" else None
            result.graphs, result.library_calls = len(cap.artifact.graphs), len(cap.artifact.extern_calls)
            log("profiling")
            prof = profile(cap)
        if tgt.device == "cuda":
            # The profile was the capture's inputs' one use (arms and gates make their own):
            # on a large model they are a copy of its activations the search would hold.
            cap.inputs = ()
            # What the profile cached (its L2 flush buffer, its timing's blocks) goes back to the
            # device: the run's memory budget counts what this process reserves.
            torch.cuda.empty_cache()
        if tgt.device == "cuda" and prof.measured:
            fitted = plan.for_model(prof.model_ms, train=train)
            if fitted.rounds != plan.rounds:
                log(f"    {fitted.rounds} timed rounds a comparison, not {plan.rounds}: "
                    f"the model takes {prof.model_ms:.1f} ms a call")
                plan = fitted
        env = running_environment(tgt.device)
        result.versions = {**versions(), "kernelopt": __version__}
        result.hardware = {"gpu": env.gpu, "compute_capability": env.compute_capability,
                           "copy_gbps": round(prof.roofline.copy_gbps, 1) if prof.roofline else None}
        rewrites = _strategy_rewrites(cap, settings, log)
        llm_search, llm_problem = _llm_search(llm, log)
        store = Store(store_path) if store_path is not None else Store()
        run_id = store.runs.start(target, tgt.device, dtype, result.hardware, result.versions, plan.to_json())
    except BaseException:
        if pool is not None:
            pool.close()
        raise
    try:
        with Cascade(cap, plan.verify_options(), compile_settings=settings, work_watch=work_watch,
                            compile_pool=pool) as cascade:
            if tgt.device == "cuda":
                cascade.model_arms.arm_mb_hint = arm_mb_hint
                # what the arms were planned by until the baseline said (beside model_gpu_mb)
                result.processes["arm_mb_planned"] = None if arm_mb_hint is None else round(arm_mb_hint, 1)
                cascade.model_arms.memory_factor = plan.gpu_memory_factor
                cascade.model_arms.warm_load = launch_bound(prof)
                if cascade.model_arms.warm_load:
                    log("    launch-bound: a model arm that compiled cold is replaced by one that loads "
                        "the compiled model from the cache, as the others do")
                if cascade.model_arms.one_baseline:
                    log(f"    a large model (~{cascade.model_arms.arm_mb_hint / 1024:.0f} GiB an arm): one baseline arm, "
                        "timed twice a round for the noise floor, and at most two model arms at once")
            # The tuner ranks variants by kernel-level time, which only a GPU gives.
            # The timer keeps a tuner candidate's gates before the deadline (the orchestrator's
            # estimate; it is asked only while the orchestrator runs the search).
            strategies = [TimedTuner(TimerWithinDeadline(
                cascade.time_variants, budget.wall_s_left, log=log,
                reserve=lambda: orchestrator.candidate_estimate_s(trusted=True)) if tgt.device == "cuda" else None)]
            orchestrator = Orchestrator(
                cap, prof, cascade, budget, strategies=strategies, feedback=llm_search,
                store=store, run_id=run_id, log=log,
                limits=SearchLimits(max_kernels=plan.kernels, candidates_per_kernel=plan.candidates_per_kernel),
                rewrites=rewrites,
            )
            extern_ops = [c.op for c in cap.artifact.extern_calls]
            model_ms = prof.model_ms if prof.measured else None  # plans how long an option's timing takes
            final_s = bench_need_s(model_ms, plan.rounds, split_step=tgt.train)  # and the final benchmark's
            steps = OptionSteps(
                cascade.model_arms, tgt, budget, plan.gamma, plan.rounds, reserve,
                compile_s=result.phases.get("compiling and capturing", 0.0),
                template_s=template_tune_s(extern_ops, dtype), model_ms=model_ms,
                candidate_s=lambda trusted: orchestrator.candidate_estimate_s(trusted=trusted), log=log,
                enabled=plan.compile_options and tgt.device == "cuda")
            to_search = orchestrator.worth_searching()
            hold_mb = (_search_hold_mb(cap, to_search, cascade.model_arms.arm_mb_hint or 0.0)
                       if tgt.device == "cuda" else 0.0)
            # Not where the GPU does not hold the model arms beside this process's capture and its
            # search (a large model): the options then wait for the search to give its memory back.
            first = (options_first(prof, to_search, calls_templates(extern_ops))
                     if steps.enabled and cascade.model_arms.baselines_fit(hold_mb, within_budget=False) else None)
            # Gates 3-4 and the final benchmark need the baseline arms; they compile while the
            # tuner times variants instead of after it, where the GPU and the run's memory budget
            # hold them beside this process at its search's peak. Where the options go first, they
            # start with them (as the budget holds them) and serve the search too.
            if tgt.device == "cuda" and first is None and not cascade.model_arms.prestart(beside_mb=hold_mb):
                which = "one baseline arm compiles beside the search, the other starts after it" \
                    if cascade.model_arms.compiling() else "the baseline arms start after the search"
                log(f"    {which}: " + ("the GPU does not hold them beside it" if plan.gpu_memory_factor is None else
                                       f"the GPU, or the run's memory budget ({plan.gpu_memory_factor:g}x the model), "
                                       "does not hold both beside it"))
            if first is not None:
                # With nothing to search the pack stays empty: the final benchmark then times the
                # baseline alone, and the rest of its reserve may time an option.
                result.recommendations = steps.before_search(first, final_s, None if to_search else functools.partial(
                    empty_pack_need_s, model_ms, plan.rounds, reserve, tgt.train))
            log("searching")
            with held_back(budget, steps.search_holdback_s(final_s)):
                result.kernels, pack = orchestrator.run()
            _record_llm_status(result, llm_search, llm_problem, budget)
            release_start = time.monotonic()
            cascade.release_search_memory()
            release_s = time.monotonic() - release_start
            if release_s > 1.0:
                log(f"    the search's GPU memory released in {release_s:.1f} s")
            # The final benchmark's arm compiles beside the compiler's options' arms.
            with final_pack_arm(cascade.model_arms, tgt, pack, result, budget, reserve) as final_arm:
                if steps.enabled:
                    result.recommendations = steps.after_search(result.recommendations, functools.partial(
                        final_need_s, pack, result, final_arm, model_ms, plan.rounds, reserve, tgt.train))
                    if _try_option_configs(orchestrator, cascade, result, pack, log) and final_arm is not None:
                        final_arm.close()  # it compiled the pack as it was: the benchmark starts its own
                        final_arm = None
                log("end-to-end benchmark")
                left = budget.wall_s_left()
                with arms_end_by(cascade.model_arms, None if left is None else left + reserve):
                    pack = benchmark_pack(cascade, tgt, pack, result, plan.rounds, final_arm, gamma=plan.gamma,
                                          withdraw=orchestrator.withdraw)
            if steps.enabled:
                steps.with_pack(pack, result)
            result.pack_entries = len(pack)
            base = cascade.model_arms.baseline_info()
            result.processes["model_gpu_mb"] = None if not base.get("gpu_mb") else round(base["gpu_mb"], 1)
            # Beside the options' compile_s: the baseline arm's start (mostly a load of the engine's compile
            # from the cache; a cold compile and its replacement's load where it missed: ArmProcess.warm_load)
            result.processes["baseline_compile_s"] = compile_seconds(base)
    finally:
        for search in llm_search:  # one LLM client a run, closed with it
            search.close()
        if watch is not None:
            _record_device_peaks(result, watch)
        result.usage = budget.snapshot()
        store.runs.finish(run_id, result)
        store.close()
    return pack


SEARCH_ARGUMENT_SETS = 2.0  # gate 2's trials: a candidate's outputs and the compiler's argument set, then one set timed


def _search_hold_mb(cap: Any, searched: list[Any], model_mb: float) -> float:
    """What the search will hold in this process beyond what is in use now, at its peak (MiB):
    gate 2 on the largest searched kernel (:data:`SEARCH_ARGUMENT_SETS` of its recorded arguments;
    the recorded ones stay in host memory meanwhile) or gates 3 and 4 running the model here
    (``model_mb``, what an arm of it holds), and the L2 flush buffer the timing keeps."""
    import torch

    from kernelopt_bot.harness.timing import flush_bytes

    largest = 0
    for row in searched:
        recording = cap.recordings.get((row.graph, row.name))  # none: the search finds it has nothing to run
        args = recording.args if recording is not None else ()
        largest = max(largest, sum(a.untyped_storage().nbytes() for a in args if isinstance(a, torch.Tensor)))
    return max(SEARCH_ARGUMENT_SETS * largest / 2**20, model_mb) + flush_bytes(torch.cuda.current_device()) / 2**20


def _arm_mb_hint() -> float:
    """What a model arm is expected to hold (MiB) before one has said: this process's peak after
    compiling and running the model, as an arm loads, compiles and runs the same model (the
    recorded kernel arguments, which an arm does not keep, are in host memory). Read after the
    capture, before the profile: the profile's L2 flush buffer and timing made a 40 MiB network's
    figure 704 MiB where the capture's was 92, and the memory budget then held one baseline arm
    at a time, whose starts took the options' time (tiny_vit bf16, H100 12-07h)."""
    import torch

    return torch.cuda.max_memory_reserved() / 2**20


def _strategy_rewrites(cap: Any, settings: CompileSettings, log: Callable[[str], None]) -> dict[tuple[int, str], list[Any]]:
    """The strategy rewrites the compiler can generate for the captured kernels
    (:mod:`kernelopt_bot.search.rewrites`: one more compile, only where a looped reduction's rows
    fit on chip). One that cannot be derived is a search not made, never the run's failure."""
    from kernelopt_bot.errors import one_line
    from kernelopt_bot.search.rewrites import persistent_rewrites, qualifying

    if not qualifying(cap):
        return {}
    log("deriving strategy rewrites")
    try:
        found = persistent_rewrites(cap, settings.mode)
    except Exception as exc:  # noqa: BLE001 - Inductor's failure to generate it: a rewrite less
        log(f"warning: strategy rewrites not derived ({one_line(exc)})")
        return {}
    if found:
        log(f"    {len(found)} looped reduction(s) can run as one pass: "
            + ", ".join(name for _graph, name in found))
    return {key: [rewrite] for key, rewrite in found.items()}


def _try_option_configs(orchestrator: Any, cascade: Any, result: RunResult, pack: KernelPack,
                        log: Callable[[str], None]) -> int:
    """The launch configs of the verified compiler options, gated for the searched kernels the
    pack does not replace (:meth:`~kernelopt_bot.search.orchestrator.Orchestrator.try_option_configs`);
    how many joined the pack. The recommendations keep the configs of the searched kernels only.
    A failure of ours here costs the run nothing it had: the pack stays."""
    from kernelopt_bot.compile_options import keep_configs_of, option_configs
    from kernelopt_bot.errors import one_line

    searched = [row.name for row in orchestrator.worth_searching()]
    result.recommendations = keep_configs_of(result.recommendations, searched)
    found = option_configs(result.recommendations)
    if not found:
        return 0
    log(f"gating the launch configs of the verified compiler options ({len(found)} kernel(s))")
    before = len(pack)
    try:
        orchestrator.try_option_configs(found, result.kernels, pack)
    except Exception as exc:  # noqa: BLE001 - an extra search step: the run's own results stand
        log(f"    not all tried: {one_line(exc)}")
    finally:
        cascade.release_search_memory()  # what gating brought back to the GPU leaves it again
    return len(pack) - before  # what joined, counted from the pack itself (an error may come after one did)


def _llm_search(llm: dict[str, Any] | None, log: Callable[[str], None]) -> tuple[list[Any], str | None]:
    """The LLM agents' search when an endpoint is configured, or why there is none (bad settings
    mean the timed tuner only; an unreachable endpoint shows once the search tries it)."""
    if not llm or not llm.get("base_url"):
        return [], None
    from kernelopt_bot.search.agent_search import LLMSearch
    from kernelopt_bot.search.llm.config import LLMSettings

    try:
        settings = LLMSettings.from_env(base_url=llm.get("base_url"), model=llm.get("model"),
                                        unix_socket=llm.get("unix_socket"))
    except BadInputError as exc:
        log(f"warning: LLM agents disabled ({exc}); using the timed tuner only")
        return [], str(exc)
    return [LLMSearch(settings, log=log)], None


def _record_llm_status(result: RunResult, searches: list[Any], problem: str | None, budget: Any) -> None:
    """What became of the LLM agents, for result.json, the report's headline and the PR comment."""
    if result.llm_status == "unavailable":  # the parent could not hand the endpoint over
        return
    disabled = problem or next((s.disabled for s in searches if getattr(s, "disabled", None)), None)
    if disabled:
        result.llm_status, result.llm_error = "unavailable", disabled
    elif searches:
        result.llm_status = "used" if budget.llm_calls else "not called"
