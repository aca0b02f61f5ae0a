"""Running the engine on targets, one job per (target, dtype), and reading the results back.

The GitHub layer calls the engine in-process only through :class:`PipelineRunner`, so tests can
hand in RunResults they built and the engine can change without touching publishing. The default
runner imports :func:`kernelopt_bot.pipeline.run_pipeline` lazily: this package imports without it.
On several GPUs a job is instead a ``kernelopt optimize`` process (:func:`fleet_job`, run by
:mod:`kernelopt_bot.fleet`) given the same settings as flags, into the same folder.

A job that fails (the runner raises, or returns ``status="failed"``) never stops the others; it
is recorded as a failed :class:`~kernelopt_bot.result.RunResult` and reported.

Results directory layout (the unit that travels between jobs as an artifact)::

    DIR/<target>.<dtype>/result.json   RunResult
    DIR/<target>.<dtype>/pack.json     KernelPack (may have 0 entries)
    DIR/<target>.<dtype>/report.md
    DIR/<target>.<dtype>/job.json      the job that produced it
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.capture.settings import CompileSettings
from kernelopt_bot.config import KerneloptConfig, TargetConfig
from kernelopt_bot.fleet import FleetJob
from kernelopt_bot.pack.format import KernelPack
from kernelopt_bot.result import RunResult
from kernelopt_bot.search.llm.config import KEY_ENV_VARS


@dataclass(frozen=True)
class TargetJob:
    """Everything the engine needs for one target in one dtype."""

    name: str
    entry: str
    dtype: str
    device: str | None
    budget: dict[str, Any] = field(default_factory=dict)
    gamma: float = DEFAULT_GAMMA
    llm: dict[str, Any] | None = None
    compile: dict[str, Any] = field(default_factory=dict)  # CompileSettings.to_json(): how the model is compiled
    kind: str | None = None  # the config's stated kind of target (module, triton, helion), if any
    train: bool = False  # a training step (the config's mode: train)

    @property
    def slug(self) -> str:
        return f"{self.name}.{self.dtype}"

    def public(self) -> dict[str, Any]:
        """The job without secrets (the LLM key), safe to write next to results."""
        data = asdict(self)
        if data.get("llm"):
            data["llm"] = {k: v for k, v in data["llm"].items() if k != "api_key"}
        return data


class PipelineRunner(Protocol):
    def run(self, target_cfg: TargetJob, out_dir: Path) -> RunResult: ...


class DefaultRunner:
    """The real engine. Entries are resolved against the repository root."""

    def __init__(self, repo_root: Path) -> None:
        self.repo_root = repo_root.resolve()

    def run(self, target_cfg: TargetJob, out_dir: Path) -> RunResult:
        from kernelopt_bot.pipeline import run_pipeline  # lazy: the engine is optional to import this

        # The command to reproduce is for a maintainer's checkout: the entry as the config names
        # it, relative to the repository root, not this runner's absolute path.
        return run_pipeline(_entry(target_cfg, self.repo_root), device=target_cfg.device, dtype=target_cfg.dtype,
                            out_dir=out_dir, budget=dict(target_cfg.budget), gamma=target_cfg.gamma,
                            llm=target_cfg.llm, shown_as=target_cfg.entry, kind=target_cfg.kind,
                            compile_settings=CompileSettings.from_json(target_cfg.compile), train=target_cfg.train,
                            import_root=self.repo_root)


def _entry(job: TargetJob, repo_root: Path) -> str:
    """The job's target as the engine takes it: a ``.py`` entry as a path under the repository."""
    return str(repo_root.resolve() / job.entry) if job.entry.endswith(".py") else job.entry


def fleet_job(job: TargetJob, repo_root: Path, out_dir: Path, timeout_s: float) -> FleetJob:
    """``job`` as a ``kernelopt optimize`` run into ``out_dir``: what :class:`DefaultRunner` gives
    the pipeline, as the CLI's flags. The LLM key stays in the environment (the variable the config
    names, then the usual ones), kept for the trusted optimize process only."""
    flags = [arg for key, value in job.budget.items() for arg in ("--budget", f"{key}={json.dumps(value)}")]
    flags += ["--gamma", str(job.gamma), "--shown-as", job.entry, *CompileSettings.from_json(job.compile).cli_args()]
    if job.kind is not None:
        flags += ["--kind", job.kind]
    if job.train:
        flags += ["--train"]
    secrets: tuple[str, ...] = ()
    if job.llm and job.llm.get("base_url"):
        flags += ["--llm-base-url", str(job.llm["base_url"])]
        for key in ("model", "api_key_env"):
            if job.llm.get(key):
                flags += [f"--llm-{key.replace('_', '-')}", str(job.llm[key])]
        secrets = tuple(dict.fromkeys([*filter(None, [job.llm.get("api_key_env")]), *KEY_ENV_VARS]))
    return FleetJob(name=job.name, target=_entry(job, repo_root), dtype=job.dtype, out=out_dir, timeout_s=timeout_s,
                    device=job.device, flags=tuple(flags), cwd=repo_root.resolve(), secrets=secrets)


def make_jobs(cfg: KerneloptConfig, targets: Iterable[TargetConfig], *, budget: int | None = None,
              gamma: float | None = None) -> list[TargetJob]:
    """One job per target and dtype; command overrides (``--budget``, ``--gamma``) applied."""
    budget_dict = cfg.budget.as_dict()
    if budget is not None:
        budget_dict["candidates"] = budget
    llm = cfg.llm.as_dict() if cfg.llm else None
    jobs = []
    for t in sorted(targets, key=lambda t: t.name):
        for dtype in t.dtypes:
            jobs.append(TargetJob(name=t.name, entry=t.entry, dtype=dtype,
                                  device=None if t.device == "auto" else t.device, budget=budget_dict,
                                  gamma=gamma if gamma is not None else cfg.gamma, llm=llm,
                                  compile={"mode": t.compile_mode, "config": dict(t.inductor_config)},
                                  kind=t.kind, train=t.mode == "train"))
    return jobs


@dataclass
class JobOutcome:
    """One job's result. ``pack`` is set only on outcomes read back through :func:`load_outcomes`
    (validated); publishing takes packs from there, never from a file path."""

    job: TargetJob
    result: RunResult
    out_dir: Path
    pack: KernelPack | None = None
    traceback: str | None = None

    @property
    def failed(self) -> bool:
        return self.result.status != "ok"


def _failed(job: TargetJob, error: str) -> RunResult:
    return RunResult(target=job.entry, name=job.name, device=job.device or "auto", dtype=job.dtype,
                     status="failed", error=error)


def job_folder(results_dir: Path, job: TargetJob) -> Path:
    """The job's own folder, with the job (less its secrets) written in it before it runs."""
    out = results_dir / job.slug
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.json").write_text(json.dumps(job.public(), indent=2) + "\n")
    return out


def record(job: TargetJob, result: RunResult, out: Path, seconds: float, log: Any = None) -> JobOutcome:
    """Write a job's result into its folder as every front door reads it back."""
    result.name = job.name  # the display name is the config's: the engine may call a target by its entry
    if result.seconds is None:
        result.seconds = round(seconds, 3)
    result.save(out / "result.json")
    if log is not None:
        log(f"{job.slug}: {result.status}" + (f" ({result.error})" if result.error else ""))
    return JobOutcome(job, result, out)


def run_jobs(runner: PipelineRunner, jobs: Iterable[TargetJob], results_dir: Path,
             log: Any = None) -> list[JobOutcome]:
    """Run every job; a job that raises is recorded as failed and the next one runs."""
    outcomes = []
    for job in jobs:
        out = job_folder(results_dir, job)
        start = time.monotonic()
        try:
            result = runner.run(job, out)
            if not isinstance(result, RunResult):
                raise TypeError(f"runner returned {type(result).__name__}, not RunResult")
        except Exception as exc:  # noqa: BLE001 - one target must never stop the others
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            result = _failed(job, detail)
            (out / "traceback.txt").write_text(traceback.format_exc())
        outcomes.append(record(job, result, out, time.monotonic() - start, log))
    return outcomes


def load_outcomes(dirs: Iterable[Path], *, cfg: KerneloptConfig | None = None,
                  allow_source: bool = True) -> list[JobOutcome]:
    """Every result under ``dirs``, re-validated (:mod:`kernelopt_bot.github.trusted`), in a stable order.

    ``allow_source=False`` for results of a run of PR code: source replacements are rejected.
    The job is rebuilt from the folder name and the trusted config, never read from ``job.json``.
    """
    from kernelopt_bot.github.trusted import check_results

    outcomes = []
    for c in check_results(list(dirs), cfg=cfg, allow_source=allow_source):
        target = cfg.target(c.name) if cfg is not None else None
        job = TargetJob(name=c.name, entry=c.result.target, dtype=c.dtype,
                        device=None if target is None or target.device == "auto" else target.device)
        outcomes.append(JobOutcome(job, c.result, Path(), pack=c.pack, traceback=c.traceback))
    return outcomes
