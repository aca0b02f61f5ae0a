"""The benchmark suite runner: every problem in its own process, shardable, merged into one report.

Each problem (and dtype) is one ``kernelopt optimize`` run in a fresh process with a deadline, so a
problem that crashes or hangs costs only itself; :mod:`kernelopt_bot.fleet` runs them, one after
another or, with ``--gpus``, on several GPUs at once, into the same report. Results are reported
per problem and as per-level geometric means of the end-to-end speedup over ``torch.compile``
default and over ``max-autotune-no-cudagraphs`` (from the run's own measurement of that mode, else
a ``kernelopt modes`` run on the problem's GPU after it), and of the run's pack installed on top of
``max-autotune-no-cudagraphs`` over that mode alone (the run's own measurement, else a ``kernelopt
bench --mode max-autotune-no-cudagraphs`` run after it): what the pack adds for a user who already
compiles with max-autotune. A problem where nothing was verified, or that failed, counts as 1.0
(the compiler's code stays).
"""

from __future__ import annotations

import fnmatch
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.candidate import DEFAULT_GAMMA
from kernelopt_bot.capture.settings import CompileSettings
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.fleet import Fleet, FleetJob, FleetResult, OnSlot
from kernelopt_bot.job_process import run_alone
from kernelopt_bot.result import WITH_PACK, RunResult
from kernelopt_bot.search.llm.config import KEY_ENV_VARS
from kernelopt_bot.shards import ALL, Shard
from kernelopt_bot.stats import geomean, upper_median

MANT = "mode=max-autotune-no-cudagraphs"
# A suite run in a shell that sets up the LLM agents gives them to every problem, as optimize run
# there would have them: the endpoint and the key reach the trusted optimize process only.
LLM_ENV = ("KERNELOPT_LLM_BASE_URL", *KEY_ENV_VARS)


@dataclass(frozen=True)
class Problem:
    path: str  # relative to the suite root
    level: int
    dtype: str
    train: bool = False  # a training step (optimize --train), apart from the same file's inference problem

    @property
    def slug(self) -> str:
        return f"l{self.level}_{Path(self.path).stem}_{self.dtype}" + ("_train" if self.train else "")

    @property
    def group(self) -> str:
        """The row of the per-level table it counts in: ``1``, or ``1 train`` for training steps."""
        return f"{self.level} train" if self.train else str(self.level)


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
    noise_floor: float | None = None  # the end-to-end bench's own (stats.noise_floor: baseline against baseline)
    accepted: list[str] = field(default_factory=list)  # kernels whose replacement passed every gate
    # What a user taking everything the run verified gets over the same baseline: the largest of
    # the pack's speedup, the best compiler option's and that option's with the pack on top
    # (RunResult.best_verified_speedup). None: not known (a shard written before it was kept).
    speedup_best: float | None = None
    # The run's pack installed on a max-autotune-no-cudagraphs compile, over that compile alone
    # (1.0 where the run verified nothing: there is nothing to put on top). None: not measured.
    speedup_pack_on_mant: float | None = None

    @property
    def has_pack(self) -> bool:
        """The run ended and verified a kernel: there is a pack to put on another compile."""
        return self.status == "ok" and bool(self.verified_kernels)

    @property
    def counted(self) -> float:
        """The pack's speedup as a level's geomean counts it: 1.0 where nothing was verified or the
        run failed (the compiler's code stays)."""
        return self.speedup if self.status == "ok" and self.speedup is not None else 1.0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProblemResult:
        """A result as ``to_json`` wrote it (extra keys such as ``slug`` are ignored)."""
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
        for level, train in sorted({(p.problem.level, p.problem.train) for p in self.problems}):
            rows = [p for p in self.problems if (p.problem.level, p.problem.train) == (level, train)]
            measured = [p for p in rows if p.speedup is not None]
            # On a GPU a failed or unverified problem keeps the compiler's code: it counts as 1.0.
            vs_default = [p.counted for p in rows] if self.device == "cuda" else []
            vs_mant = [p.speedup_vs_mant for p in measured if p.speedup_vs_mant is not None]
            # Where a shard did not keep it, the pack's own figure stands in: a lower bound.
            best = [max(p.counted, p.speedup_best or 1.0) for p in rows] if self.device == "cuda" else []
            # Without a pack (nothing verified, or the run failed) nothing goes on top: 1.0. A level
            # whose packs were none of them measured on top has no figure (not one of 1.0s).
            packs = [p for p in rows if p.has_pack]
            packs_on_top = [p for p in packs if p.speedup_pack_on_mant is not None]
            on_top = [p.speedup_pack_on_mant if p.has_pack else 1.0 for p in rows]
            on_top_known = ([v for v in on_top if v is not None]
                            if self.device == "cuda" and (packs_on_top or not packs) else [])
            out[rows[0].problem.group] = {
                "problems": len(rows),
                "measured": len(measured),
                "failed": sum(1 for p in rows if p.status != "ok"),
                "geomean_vs_default": geomean(vs_default),
                "geomean_vs_max_autotune_no_cudagraphs": geomean(vs_mant),
                "geomean_best_verified": geomean(best),
                "geomean_pack_on_max_autotune_no_cudagraphs": geomean(on_top_known),
                "packs": len(packs),
                "packs_on_max_autotune": len(packs_on_top),
                "slowest": min(vs_default) if vs_default else None,
                "optimize_seconds_median": upper_median(p.seconds for p in rows),
            }
        return out


def measured_slugs(path: Path, settings: CompileSettings) -> set[str]:
    """The problems an earlier run (a shard's or a merge's ``suite.json``, or its folder) measured:
    those that ended ``ok``. A failed one is run again. A run over other compile settings is an
    error: its speedups are over another baseline, and what it measured is not measured here."""
    manifest = path / "suite.json" if path.is_dir() else path
    try:
        data = json.loads(manifest.read_text())
        rows = data["problems"]
        slugs = {ProblemResult.from_json(r).problem.slug for r in rows if r.get("status") == "ok"}
        theirs = CompileSettings.from_json(data.get("compile"))
    except OSError as exc:
        raise BadInputError(f"{path}: no suite results to skip ({exc.strerror or exc})") from exc
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadInputError(f"{manifest}: not a suite result ({exc})") from exc
    if theirs.to_json() != settings.to_json():
        raise BadInputError(f"{manifest}: measured with {theirs.label}, this run compiles with {settings.label}: "
                            "nothing it measured is measured here")
    return slugs


def load_problems(root: Path, dtypes: tuple[str, ...] | None = None,
                  only: tuple[str, ...] | None = None, skip: set[str] | None = None) -> list[Problem]:
    """Problems from ``root/suite.json`` (or every ``level<N>/*.py`` in fp32 and bf16).

    ``only`` keeps the problems whose path or slug matches one of these shell patterns
    (``level1/*``, ``*softmax*``, ``l2_*_bf16``): a short GPU job can run a chosen subset.
    ``skip``: slugs left out (:func:`measured_slugs`: a sweep spread over several GPU jobs goes on
    where the last one stopped; shards then split what is left).
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
                    problems.append(Problem(e["path"], int(e["level"]), dtype, bool(e.get("train", False))))
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
    if skip:
        left = [p for p in problems if p.slug not in skip]
        if problems and not left:
            raise BadInputError(f"suite {root}: every selected problem was measured already ({len(problems)})")
        problems = left
    if not problems:
        raise BadInputError(f"suite {root}: no problems" + (f" match {', '.join(only)}" if only else ""))
    return problems


def _fleet_job(root: Path, problem: Problem, out: Path, *, device: str | None, budget: list[str], gamma: float,
               timeout_s: float, store: Path, settings: CompileSettings) -> FleetJob:
    """A problem as one ``kernelopt optimize`` run into ``out/problems/<slug>``."""
    flags = ["--store", str(store), "--gamma", str(gamma)] + (["--train"] if problem.train else [])
    for item in budget:
        flags += ["--budget", item]
    return FleetJob(name=Path(problem.path).stem, target=str(root / problem.path), dtype=problem.dtype,
                    out=out / "problems" / problem.slug, timeout_s=timeout_s, device=device,
                    flags=(*flags, *settings.cli_args()), secrets=LLM_ENV)


def _mant_of(run: RunResult, settings: CompileSettings) -> float | None:
    """max-autotune-no-cudagraphs against the run's baseline, from the run itself (None: unknown).

    With other compile settings than the default the speedup is over those: where they are
    max-autotune-no-cudagraphs the speedup already is the pack's gain over it, else there is no
    like-for-like figure."""
    if settings == CompileSettings("max-autotune-no-cudagraphs"):
        return 1.0
    if not settings.is_default:
        return None
    return next((r.speedup for r in run.recommendations if r.option == MANT), None)


def _pack_on_mant_of(run: RunResult, settings: CompileSettings) -> float | None:
    """The run's pack on top of max-autotune-no-cudagraphs, over that mode alone, from the run
    itself (None: unknown, measured after it where the run has a pack).

    Compiled with max-autotune-no-cudagraphs, the run's own speedup is that figure; a run that
    verified nothing has no pack to put on top (1.0); a default run that measured the mode with
    its pack on top (the best verified option's ``+ pack``) gives the ratio of the two."""
    if run.status != "ok":
        return None
    if settings == CompileSettings("max-autotune-no-cudagraphs"):
        if run.speedup is not None:
            return run.speedup
        return 1.0 if run.device == "cuda" and not run.verified_kernels else None
    if not settings.is_default:
        return None
    if not run.verified_kernels:
        return 1.0 if run.device == "cuda" else None
    alone = _mant_of(run, settings)
    with_pack = next((r.speedup for r in run.recommendations if r.option == MANT + WITH_PACK), None)
    return with_pack / alone if alone and with_pack else None


@dataclass(frozen=True)
class Reference:
    """What the suite measures on a problem's GPU after its optimize run, outside its budget."""

    mant: float | None = None  # max-autotune-no-cudagraphs over the default compile
    pack_on_mant: float | None = None  # the run's pack on that mode, over the mode alone


def _reference_step(reference: bool, settings: CompileSettings,
                    timeout_s: float) -> Callable[[FleetJob, RunResult, OnSlot], Reference]:
    """The fleet's ``after`` step: measure max-autotune-no-cudagraphs, and the run's pack on top
    of it, on the problem's GPU, outside the optimize time, where optimize's budget left them
    unmeasured and there is a speedup to compare."""

    def step(job: FleetJob, run: RunResult, on_slot: OnSlot) -> Reference:
        # (`kernelopt modes` and `bench` compile for inference: a training step's reference is
        # optimize's own measurement of the options, or none)
        if not (reference and run.device == "cuda" and run.speedup is not None and settings.is_default
                and not run.train):
            return Reference()
        # Both measurements share what the problem's deadline left (at least a minute each).
        end = time.monotonic() + max(60.0, timeout_s - (run.seconds or 0.0))
        mant = None
        if _mant_of(run, settings) is None:
            mant = reference_speedup(Path(job.target), job.dtype, run.device, log_dir=job.out, run=on_slot,
                                     timeout_s=max(60.0, end - time.monotonic()))
        on_top = None
        pack = job.out / "pack.json"
        if _pack_on_mant_of(run, settings) is None and pack.is_file():
            on_top = pack_on_mant_speedup(Path(job.target), job.dtype, run.device, pack, log_dir=job.out,
                                          run=on_slot, timeout_s=max(60.0, end - time.monotonic()))
        return Reference(mant, on_top)

    return step


def _problem_result(problem: Problem, ran: FleetResult, settings: CompileSettings) -> ProblemResult:
    """A problem's row from its run. ``seconds`` is the run's own time where it reports one (not
    the CLI's start), else the time its processes ran."""
    run = ran.result
    measured = ran.after if isinstance(ran.after, Reference) else Reference()
    mant = measured.mant if measured.mant is not None else _mant_of(run, settings)
    vs_mant = run.speedup / mant if run.speedup is not None and mant else None
    on_top = measured.pack_on_mant if measured.pack_on_mant is not None else _pack_on_mant_of(run, settings)
    seconds = run.seconds if run.seconds is not None else ran.seconds
    return ProblemResult(problem, run.status, run.speedup, vs_mant, run.baseline_ms, run.optimized_ms,
                         run.verified_kernels, seconds, run.error, gpu=ran.gpu, noise_floor=run.noise_floor,
                         accepted=sorted(run.accepted_kernels), speedup_best=run.best_verified_speedup,
                         speedup_pack_on_mant=on_top)


def reference_speedup(path: Path, dtype: str, device: str, *, timeout_s: float, log_dir: Path,
                      run: OnSlot = run_alone) -> float | None:
    """max-autotune-no-cudagraphs against the default compile, end to end (``kernelopt modes``, in
    its own process, through ``run``: on the problem's GPU); None when it could not be measured
    (``reference.log`` says why)."""
    cmd = [sys.executable, "-m", "kernelopt_bot.cli", "modes", str(path), "--dtype", dtype, "--device", device,
           "--option", MANT, "--json"]
    found = _last_json(cmd, log_dir / "reference.log", timeout_s, run, "[")
    value = found[0].get("speedup") if isinstance(found, list) and found and isinstance(found[0], dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def pack_on_mant_speedup(path: Path, dtype: str, device: str, pack: Path, *, timeout_s: float, log_dir: Path,
                         run: OnSlot = run_alone) -> float | None:
    """``pack`` installed on a max-autotune-no-cudagraphs compile against that compile alone, end to
    end (``kernelopt bench --mode``, in its own process, through ``run``). 1.0 where none of the
    pack's kernels occurs in that compile (it leaves the build as it is) or where the difference is
    within the comparison's noise floor; None when it could not be measured
    (``pack_on_max_autotune.log`` says why), and where a guard kept every kernel of the pack out
    (a pack verified on an H200, measured on an H100: it changes nothing there, and a 1.0 would
    read as a measured "adds nothing")."""
    cmd = [sys.executable, "-m", "kernelopt_bot.cli", "bench", str(path), "--pack", str(pack), "--dtype", dtype,
           "--device", device, "--mode", "max-autotune-no-cudagraphs", "--json"]
    found = _last_json(cmd, log_dir / "pack_on_max_autotune.log", timeout_s, run, "{")
    if not isinstance(found, dict):
        return None
    if not found.get("applied"):
        return None if found.get("skipped") else 1.0
    value, floor = found.get("speedup"), found.get("noise_floor")
    if not isinstance(value, (int, float)):
        return None
    # A difference the baselines also show between themselves is no measured effect of the pack.
    return 1.0 if isinstance(floor, (int, float)) and abs(value - 1.0) <= floor else float(value)


def _last_json(cmd: list[str], log: Path, timeout_s: float, run: OnSlot, opener: str) -> Any:
    """The JSON a ``--json`` command printed last (a line starting with ``opener``), from its log;
    None where it timed out or printed none."""
    if run(cmd, log, timeout_s).timed_out:
        return None
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith(opener):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def run_suite(root: Path, out: Path, *, shard: Shard = ALL, device: str | None = None,
              dtypes: tuple[str, ...] | None = None, budget: list[str] | None = None, gamma: float = DEFAULT_GAMMA,
              timeout_s: float = 900.0, log: Any = print, gpus: list[int] | None = None, cores: int | None = None,
              only: tuple[str, ...] | None = None, reference: bool = True, skip: set[str] | None = None,
              compile_settings: CompileSettings | None = None, command: tuple[str, ...] | None = None) -> SuiteResult:
    """Run a shard's problems and write ``suite.json`` / ``suite.md`` into ``out`` as they finish.

    ``gpus=None`` runs them one after another on the default device. With ``gpus`` they run on
    those GPUs at once, one per GPU (:class:`~kernelopt_bot.fleet.Fleet`); the report has the same
    form, with the GPU of each problem in its ``gpu`` field. ``command`` is the optimize command
    (tests put a stand-in there so nothing compiles).
    """
    problems = load_problems(root, dtypes, only, skip)
    mine = shard.take(problems)
    out.mkdir(parents=True, exist_ok=True)
    from kernelopt_bot.device import resolve_device

    settings = compile_settings or CompileSettings()
    suite = SuiteResult(device=device or resolve_device(None), compile=settings.to_json())
    store = (out / "store.db").resolve()
    jobs = [_fleet_job(root.resolve(), p, out.resolve(), device=device, budget=list(budget or []), gamma=gamma,
                       timeout_s=timeout_s, store=store, settings=settings) for p in mine]
    done: list[ProblemResult | None] = [None] * len(mine)

    def finished(ran: FleetResult) -> None:
        done[ran.index] = res = _problem_result(mine[ran.index], ran, settings)
        count = sum(r is not None for r in done)
        where = "" if ran.gpu is None else f" on gpu {ran.gpu}"
        retried = f" after {ran.attempts} attempts" if ran.attempts > 1 else ""
        log(f"[{count}/{len(mine)}] {res.problem.path} {res.problem.dtype}{where}: {res.status}{retried}")
        suite.problems = [r for r in done if r is not None]  # in problem order, whatever finished first
        write_report(suite, out)  # after every problem: a killed shard still leaves its results

    if gpus is not None:
        log(f"{len(mine)} problems on {len(gpus)} GPU(s): {', '.join(map(str, gpus))}")
    Fleet(gpus, cores=cores, command=command, log=log).run(jobs, on_result=finished,
                                                         after=_reference_step(reference, settings, timeout_s))
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


def packs_note(row: dict[str, Any]) -> str:
    """`` (k of n packs)`` after a level's pack-on-max-autotune figure where not every verified
    pack of the level was measured on it (:meth:`SuiteResult.levels`' row)."""
    if row["geomean_pack_on_max_autotune_no_cudagraphs"] is None or row["packs_on_max_autotune"] >= row["packs"]:
        return ""
    return f" ({row['packs_on_max_autotune']} of {row['packs']} packs)"


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(suite: SuiteResult) -> str:
    lines = [f"# kernelopt suite ({suite.device})", "", f"Speedups are over `{suite.baseline_label}`; the pack on "
             "max-autotune-nc is over max-autotune-no-cudagraphs alone (problems without a verified pack count "
             "1.0; where not every pack was measured on it, the count says how many were, and a gain within "
             "its noise floor counts 1.0).", "",
             f"| level | problems | measured | failed | geomean vs {suite.baseline_label} | "
             "geomean vs max-autotune-no-cudagraphs | geomean, pack on max-autotune-nc | "
             "geomean, best verified (option, pack or both) | slowest | median optimize s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for level, row in suite.levels().items():
        on_top = _fmt(row["geomean_pack_on_max_autotune_no_cudagraphs"]) + packs_note(row)
        lines.append(f"| {level} | {row['problems']} | {row['measured']} | {row['failed']} | "
                     f"{_fmt(row['geomean_vs_default'])} | {_fmt(row['geomean_vs_max_autotune_no_cudagraphs'])} | "
                     f"{on_top} | {_fmt(row['geomean_best_verified'])} | "
                     f"{_fmt(row['slowest'])} | {_fmt(row['optimize_seconds_median'], '.0f')} |")
    measured = [p for p in suite.problems if p.speedup is not None]
    if measured:
        names = ", ".join(f'"{p.problem.slug}"' for p in measured)
        values = ", ".join(f"{p.speedup:.3f}" for p in measured)
        top = max(1.5, max(p.speedup for p in measured if p.speedup) * 1.1)
        lines += ["", "```mermaid", "xychart-beta", f'    title "End-to-end speedup over {suite.baseline_label}"',
                  f"    x-axis [{names}]", f'    y-axis "speedup" 0 --> {top:.2f}', f"    bar [{values}]", "```"]
    lines += ["", "| problem | dtype | status | baseline ms | optimized ms | speedup | vs max-autotune-nc | "
                  "pack on max-autotune-nc | best verified | verified kernels | optimize s |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in suite.problems:
        status = p.status if not p.error else f"{p.status}: {p.error[:80]}"
        lines.append(f"| {p.problem.path}{' (training step)' if p.problem.train else ''} | {p.problem.dtype} | {status.replace('|', '/')} | {_fmt(p.baseline_ms, '.4f')} | "
                     f"{_fmt(p.optimized_ms, '.4f')} | {_fmt(p.speedup)} | {_fmt(p.speedup_vs_mant)} | "
                     f"{_fmt(p.speedup_pack_on_mant)} | {_fmt(p.speedup_best)} | {p.verified_kernels} | {p.seconds:.0f} |")
    return "\n".join(lines) + "\n"


def write_report(suite: SuiteResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(suite.to_json(), indent=2))
    (out / "suite.md").write_text(markdown(suite))
