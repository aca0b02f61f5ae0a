"""The benchmark suite runner: every problem in its own process, shardable, merged into one report.

Each problem (and dtype) is one ``kernelopt optimize`` run in a fresh process with a deadline, so a
problem that crashes or hangs costs only itself. With ``--gpus`` the problems run on several GPUs
at once through :mod:`kernelopt_bot.gpu_pool` (one worker per GPU) into the same report. Results are reported per problem and as
per-level geometric means of the end-to-end speedup over ``torch.compile`` default and over
``max-autotune-no-cudagraphs`` (from the run's own measurement of that mode); a problem where
nothing was verified, or that failed, counts as 1.0 (the compiler's code stays).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.compile.settings import CompileSettings
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.gpu_pool import GpuFailure, GpuPool, JobResult, looks_like_gpu_failure, resolve
from kernelopt_bot.result import RunResult, geomean
from kernelopt_bot.shards import ALL, Shard

MANT = "mode=max-autotune-no-cudagraphs"
TIMED_OUT = "timed out after"
PROBLEM_JOB = "kernelopt_bot.suite.problem_job"  # what a pool worker runs for one problem
POOL_GRACE_S = 120.0  # the pool's own deadline is the problem's plus this: a backstop for a stuck worker


@dataclass(frozen=True)
class Problem:
    path: str  # relative to the suite root
    level: int
    dtype: str

    @property
    def slug(self) -> str:
        return f"l{self.level}_{Path(self.path).stem}_{self.dtype}"


@dataclass
class ProblemResult:
    problem: Problem
    status: str
    speedup: float | None  # over torch.compile default, end to end; None = not measured
    speedup_vs_mant: float | None
    baseline_ms: float | None
    optimized_ms: float | None
    verified_kernels: int
    seconds: float
    error: str | None = None
    gpu: int | None = None  # which GPU ran it with --gpus (an index as the suite saw them); None: the default
    noise_floor: float | None = None  # the end-to-end bench's own (largest baseline/baseline-repeat gap)
    accepted: list[str] = field(default_factory=list)  # kernels whose replacement passed every gate

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProblemResult:
        """A result as ``to_json`` / a pool job wrote it (extra keys such as ``slug`` are ignored)."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "problem"}
        return cls(problem=Problem(**data["problem"]), **fields)


@dataclass
class SuiteResult:
    problems: list[ProblemResult] = field(default_factory=list)
    device: str = ""
    # How every problem was compiled (CompileSettings.to_json(); empty: the default compile): the
    # speedups are over that compile, so `--mode max-autotune-no-cudagraphs` gives the pack's
    # gain on top of max-autotune.
    compile: dict[str, Any] = field(default_factory=dict)

    @property
    def baseline_label(self) -> str:
        return CompileSettings.from_json(self.compile).label

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "compile": CompileSettings.from_json(self.compile).to_json(),
            "levels": self.levels(),
            "problems": [dict(asdict(p), slug=p.problem.slug) for p in self.problems],
        }

    def levels(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for level in sorted({p.problem.level for p in self.problems}):
            rows = [p for p in self.problems if p.problem.level == level]
            measured = [p for p in rows if p.speedup is not None]
            # On a GPU a failed or unverified problem keeps the compiler's code: it counts as 1.0.
            vs_default = ([p.speedup if p.status == "ok" and p.speedup is not None else 1.0 for p in rows]
                          if self.device == "cuda" else [])
            vs_mant = [p.speedup_vs_mant for p in measured if p.speedup_vs_mant is not None]
            out[str(level)] = {
                "problems": len(rows),
                "measured": len(measured),
                "failed": sum(1 for p in rows if p.status != "ok"),
                "geomean_vs_default": geomean(vs_default),
                "geomean_vs_max_autotune_no_cudagraphs": geomean(vs_mant),
                "slowest": min(vs_default) if vs_default else None,
                "optimize_seconds_median": _median([p.seconds for p in rows]),
            }
        return out


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


def load_problems(root: Path, dtypes: tuple[str, ...] | None = None,
                  only: tuple[str, ...] | None = None) -> list[Problem]:
    """Problems from ``root/suite.json`` (or every ``level<N>/*.py`` in fp32 and bf16).

    ``only`` keeps the problems whose path or slug matches one of these shell patterns
    (``level1/*``, ``*softmax*``, ``l2_*_bf16``): a short GPU job can run a chosen subset.
    """
    if not root.is_dir():
        raise BadInputError(f"suite {root}: not a directory")
    manifest = root / "suite.json"
    problems: list[Problem] = []
    if manifest.is_file():
        try:
            entries = json.loads(manifest.read_text())["problems"]
            for e in entries:
                for dtype in e.get("dtypes", ["fp32"]):
                    problems.append(Problem(e["path"], int(e["level"]), dtype))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInputError(f"{manifest}: not a suite manifest ({exc})") from exc
    else:
        for path in sorted(root.glob("level*/*.py")):
            level = int(path.parent.name.removeprefix("level") or 0)
            problems += [Problem(str(path.relative_to(root)), level, d) for d in ("fp32", "bf16")]
    if dtypes:
        problems = [p for p in problems if p.dtype in dtypes]
    if only:
        problems = [p for p in problems if any(fnmatch.fnmatchcase(p.path, pat) or fnmatch.fnmatchcase(p.slug, pat)
                                               for pat in only)]
    if not problems:
        raise BadInputError(f"suite {root}: no problems" + (f" match {', '.join(only)}" if only else ""))
    return problems


def run_problem(root: Path, problem: Problem, out: Path, *, device: str | None, budget: list[str],
                gamma: float, timeout_s: float, store: Path, reference: bool = True,
                compile_settings: CompileSettings | None = None) -> ProblemResult:
    """One ``kernelopt optimize`` in its own process; a crash or hang is this problem's result.

    ``reference``: measure max-autotune-no-cudagraphs afterwards when optimize's budget did not
    (on the default compile only: with other settings the speedup is over those, and where they
    are max-autotune-no-cudagraphs the speedup already is the pack's gain over it).
    ``compile_settings``: how every problem is compiled (optimize's ``--mode``/``--inductor-config``)."""
    settings = compile_settings or CompileSettings()
    run_dir = out / "problems" / problem.slug
    cmd = [sys.executable, "-m", "kernelopt_bot.cli", "optimize", str(root / problem.path), "--dtype", problem.dtype,
           "--out", str(run_dir), "--store", str(store), "--gamma", str(gamma)]
    if device:
        cmd += ["--device", device]
    for item in budget:
        cmd += ["--budget", item]
    cmd += settings.cli_args()
    start = time.time()
    error: str | None = None
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / "optimize.log"  # the run's own log, kept also when it is killed: where did it stop?
    try:
        with log_path.open("w") as log_file:
            proc = subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, text=True, timeout=timeout_s,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        if proc.returncode not in (0, 1):
            error = _last_error_line(log_path) or f"exit code {proc.returncode}"
    except subprocess.TimeoutExpired:
        error = f"{TIMED_OUT} {timeout_s:.0f} s"
        step = _last_step(log_path)
        if step:
            error += f" (last step: {step})"
    seconds = time.time() - start
    result_file = run_dir / "result.json"
    if error is None and result_file.is_file():
        run = RunResult.load(result_file)
        mant = next((r.speedup for r in run.recommendations if r.option == MANT), None)
        if settings == CompileSettings("max-autotune-no-cudagraphs"):
            mant = 1.0  # the baseline is max-autotune-no-cudagraphs: the speedup is over it
        elif not settings.is_default:
            mant = None  # over other settings: no like-for-like max-autotune figure
        elif mant is None and run.device == "cuda" and reference:
            # optimize's budget left the reference unmeasured: measure it outside the optimize time
            mant = reference_speedup(root / problem.path, problem.dtype, run.device,
                                     timeout_s=max(60.0, timeout_s - (time.time() - start)), log_dir=run_dir)
        vs_mant = None
        if run.speedup is not None and mant:
            vs_mant = run.speedup / mant
        return ProblemResult(problem, run.status, run.speedup, vs_mant, run.baseline_ms, run.optimized_ms,
                             run.verified_kernels, seconds, run.error, noise_floor=run.noise_floor,
                             accepted=sorted(run.accepted_kernels))
    return ProblemResult(problem, "failed", None, None, None, None, 0, seconds, error or "no result.json")


def reference_speedup(path: Path, dtype: str, device: str, *, timeout_s: float, log_dir: Path) -> float | None:
    """max-autotune-no-cudagraphs against the default compile, end to end (``kernelopt modes``, in
    its own process); None when it could not be measured (its log says why)."""
    cmd = [sys.executable, "-m", "kernelopt_bot.cli", "modes", str(path), "--dtype", dtype, "--device", device,
           "--option", MANT, "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        (log_dir / "reference.log").write_text(f"{TIMED_OUT} {timeout_s:.0f} s\n")
        return None
    (log_dir / "reference.log").write_text(proc.stdout + proc.stderr)
    try:
        recs = json.loads(proc.stdout.strip().splitlines()[-1])
        value = recs[0].get("speedup")
    except (IndexError, ValueError, AttributeError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def _lines(path: Path) -> list[str]:
    try:
        return [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def _last_error_line(path: Path) -> str | None:
    """The CLI's own error line (``error: ...``), else the log's last line."""
    lines = _lines(path)
    errors = [line for line in lines if line.lower().startswith("error")]
    return (errors or lines or [None])[-1]


# A pipeline step as optimize logs it: ``12:03:41 loading the target (107 s left)``, or in the
# older form ``[  42 s] searching ...``.
_STEP_LINE = re.compile(r"^(\d\d:\d\d:\d\d |\[\s*\d+ s\] )")


def _last_step(path: Path) -> str | None:
    """The last pipeline step a run logged before it stopped."""
    steps = [line for line in _lines(path) if _STEP_LINE.match(line)]
    return steps[-1][:120] if steps else None


def problem_job(job: dict[str, Any]) -> dict[str, Any]:
    """One problem as a pool job: :func:`run_problem` (a ``kernelopt optimize`` subprocess that
    inherits the worker's ``CUDA_VISIBLE_DEVICES``), its result as a plain dict.

    A run that failed the way a GPU fails (a CUDA error, out of memory, a hang past the deadline)
    raises :class:`GpuFailure` carrying that result, so a pool retries it on another GPU.
    """
    res = run_problem(Path(job["root"]), Problem(**job["problem"]), Path(job["out"]), device=job["device"],
                      budget=list(job["budget"]), gamma=job["gamma"], timeout_s=job["timeout_s"],
                      store=Path(job["store"]), reference=bool(job.get("reference", True)),
                      compile_settings=CompileSettings.from_json(job.get("compile")))
    data = asdict(res)
    if res.status != "ok" and res.error and (res.error.startswith(TIMED_OUT) or looks_like_gpu_failure(res.error)):
        raise GpuFailure(res.error, value=data)
    return data


def _pool_result(problem: Problem, job: JobResult) -> ProblemResult:
    """A pool's answer for one problem: the job's own result, or a failed one with the pool's reason."""
    if job.ok:
        res = ProblemResult.from_json(job.value)
    elif isinstance(job.value, dict):  # failed like a GPU on every attempt: its own last result
        res = ProblemResult.from_json(job.value)
        res.status, res.error = "failed", job.error
    else:
        res = ProblemResult(problem, "failed", None, None, None, None, 0, job.seconds, job.error)
    res.gpu = job.gpu
    return res


def run_suite(root: Path, out: Path, *, shard: Shard = ALL, device: str | None = None,
              dtypes: tuple[str, ...] | None = None, budget: list[str] | None = None, gamma: float = DEFAULT_GAMMA,
              timeout_s: float = 900.0, log: Any = print, gpus: list[int | None] | None = None,
              job_fn: str = PROBLEM_JOB, cores: int | None = None,
              only: tuple[str, ...] | None = None, reference: bool = True,
              compile_settings: CompileSettings | None = None) -> SuiteResult:
    """Run a shard's problems and write ``suite.json`` / ``suite.md`` into ``out`` as they finish.

    ``gpus=None`` runs them one after another in this process's environment (the default). With
    ``gpus`` they go through a :class:`GpuPool`, one worker per GPU; the report has the same form,
    with the GPU of each problem in its ``gpu`` field. ``job_fn`` names the function that runs one
    problem (tests put a fake there so nothing compiles).
    """
    problems = load_problems(root, dtypes, only)
    mine = shard.take(problems)
    out.mkdir(parents=True, exist_ok=True)
    from kernelopt_bot.device import resolve_device

    settings = compile_settings or CompileSettings()
    suite = SuiteResult(device=device or resolve_device(None), compile=settings.to_json())
    jobs = [{"root": str(root.resolve()), "problem": asdict(p), "out": str(out.resolve()), "device": device,
             "budget": list(budget or []), "gamma": gamma, "timeout_s": timeout_s,
             "store": str((out / "store.db").resolve()), "reference": reference,
             "compile": settings.to_json()} for p in mine]
    if gpus is None:
        run_one = resolve(job_fn)
        for i, (problem, job) in enumerate(zip(mine, jobs), 1):
            log(f"[{i}/{len(mine)}] {problem.path} {problem.dtype}")
            try:
                data = run_one(job)
            except GpuFailure as exc:  # no other GPU to retry on: its own failed result
                data = exc.value
            suite.problems.append(ProblemResult.from_json(data))
            write_report(suite, out)  # after every problem: a killed shard still leaves its results
        return suite

    done: list[ProblemResult | None] = [None] * len(mine)

    def finished(job: JobResult) -> None:
        done[job.job_index] = res = _pool_result(mine[job.job_index], job)
        count = sum(r is not None for r in done)
        retried = f" after {job.attempts} attempts" if job.attempts > 1 else ""
        log(f"[{count}/{len(mine)}] {res.problem.path} {res.problem.dtype} on gpu {job.gpu}: {res.status}{retried}")
        suite.problems = [r for r in done if r is not None]  # in problem order, as a sequential run
        write_report(suite, out)

    log(f"{len(mine)} problems on {len(gpus)} worker(s): gpus {', '.join(map(str, gpus))}")
    GpuPool(gpus, job_timeout_s=timeout_s + POOL_GRACE_S, cores=cores, log=log).map(job_fn, jobs, on_result=finished)
    suite.problems = [r for r in done if r is not None]
    write_report(suite, out)
    return suite


def merge(dirs: list[Path]) -> SuiteResult:
    """Combine the suite.json files of several shards (each problem once; the later dir wins)."""
    by_slug: dict[str, ProblemResult] = {}
    device = ""
    compiled: dict[str, Any] | None = None
    for d in dirs:
        path = d / "suite.json"
        if not path.is_file():
            raise BadInputError(f"{d}: no suite.json")
        data = json.loads(path.read_text())
        device = device or data.get("device", "")
        settings = CompileSettings.from_json(data.get("compile")).to_json()
        if compiled is not None and settings != compiled:
            raise BadInputError(f"{d}: compiled with {CompileSettings.from_json(settings).label}, the other shards "
                                f"with {CompileSettings.from_json(compiled).label}: their speedups are over "
                                "different baselines")
        compiled = settings
        for p in data["problems"]:
            res = ProblemResult.from_json(p)
            by_slug[res.problem.slug] = res
    return SuiteResult(sorted(by_slug.values(), key=lambda r: (r.problem.level, r.problem.path, r.problem.dtype)),
                       device, compiled or {})


@dataclass(frozen=True)
class Agreement:
    """One problem in two runs of the same suite (one GPU against several, say)."""

    slug: str
    same_verdict: bool  # same status and the same accepted kernels
    speedups: tuple[float | None, float | None]
    tolerance: float  # the larger of the two runs' noise floors (relative)
    within_noise: bool

    def line(self) -> str:
        a, b = (_fmt(x) for x in self.speedups)
        return (f"{self.slug:40} {a:>7} {b:>7}  noise {self.tolerance:.2%}  "
                f"{'same verdict' if self.same_verdict else 'DIFFERENT VERDICT'}, "
                f"{'within noise' if self.within_noise else 'OUTSIDE NOISE'}")


def agreement(first: SuiteResult, second: SuiteResult, min_floor: float = 0.005) -> list[Agreement]:
    """Do two runs of the same problems agree: same verdicts, speedups within the noise floor?

    A speedup's uncertainty is its bench's noise floor; two runs agree when they differ by no more
    than the larger floor of the two (at least ``min_floor``: a floor measured as 0 on a quiet GPU
    still has the timer's own jitter). A problem missing from either run counts as disagreeing.
    """
    rows: list[Agreement] = []
    by_slug = {p.problem.slug: p for p in second.problems}
    for a in first.problems:
        b = by_slug.get(a.problem.slug)
        if b is None:
            rows.append(Agreement(a.problem.slug, False, (a.speedup, None), min_floor, False))
            continue
        tol = max(min_floor, a.noise_floor or 0.0, b.noise_floor or 0.0)
        same = a.status == b.status and sorted(a.accepted) == sorted(b.accepted)
        if a.speedup is None or b.speedup is None:
            close = a.speedup is None and b.speedup is None
        else:
            close = abs(a.speedup / b.speedup - 1.0) <= tol
        rows.append(Agreement(a.problem.slug, same, (a.speedup, b.speedup), tol, close))
    return rows


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(suite: SuiteResult) -> str:
    lines = [f"# kernelopt suite ({suite.device})", "", f"Speedups are over `{suite.baseline_label}`.", "",
             f"| level | problems | measured | failed | geomean vs {suite.baseline_label} | "
             "geomean vs max-autotune-no-cudagraphs | slowest | median optimize s |",
             "|---|---|---|---|---|---|---|---|"]
    for level, row in suite.levels().items():
        lines.append(f"| {level} | {row['problems']} | {row['measured']} | {row['failed']} | "
                     f"{_fmt(row['geomean_vs_default'])} | {_fmt(row['geomean_vs_max_autotune_no_cudagraphs'])} | "
                     f"{_fmt(row['slowest'])} | {_fmt(row['optimize_seconds_median'], '.0f')} |")
    measured = [p for p in suite.problems if p.speedup is not None]
    if measured:
        names = ", ".join(f'"{p.problem.slug}"' for p in measured)
        values = ", ".join(f"{p.speedup:.3f}" for p in measured)
        top = max(1.5, max(p.speedup for p in measured if p.speedup) * 1.1)
        lines += ["", "```mermaid", "xychart-beta", f'    title "End-to-end speedup over {suite.baseline_label}"',
                  f"    x-axis [{names}]", f'    y-axis "speedup" 0 --> {top:.2f}', f"    bar [{values}]", "```"]
    lines += ["", "| problem | dtype | status | baseline ms | optimized ms | speedup | vs max-autotune-nc | verified kernels | optimize s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in suite.problems:
        status = p.status if not p.error else f"{p.status}: {p.error[:80]}"
        lines.append(f"| {p.problem.path} | {p.problem.dtype} | {status.replace('|', '/')} | {_fmt(p.baseline_ms, '.4f')} | "
                     f"{_fmt(p.optimized_ms, '.4f')} | {_fmt(p.speedup)} | {_fmt(p.speedup_vs_mant)} | "
                     f"{p.verified_kernels} | {p.seconds:.0f} |")
    return "\n".join(lines) + "\n"


def write_report(suite: SuiteResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(suite.to_json(), indent=2))
    (out / "suite.md").write_text(markdown(suite))
