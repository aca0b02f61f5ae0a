"""The benchmark suite runner: every problem in its own process, shardable, merged into one report.

Each problem (and dtype) is one ``kernelopt optimize`` run in a fresh process with a deadline, so a
problem that crashes or hangs costs only itself. Results are reported per problem and as
per-level geometric means of the end-to-end speedup over ``torch.compile`` default and over
``max-autotune-no-cudagraphs`` (from the run's own measurement of that mode); a problem where
nothing was verified, or that failed, counts as 1.0 (the compiler's code stays).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelopt_bot.errors import BadInputError
from kernelopt_bot.result import RunResult

MANT = "mode=max-autotune-no-cudagraphs"


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


@dataclass
class SuiteResult:
    problems: list[ProblemResult] = field(default_factory=list)
    device: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
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


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive, finite values (None when there are none)."""
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


def load_problems(root: Path, dtypes: tuple[str, ...] | None = None) -> list[Problem]:
    """Problems from ``root/suite.json`` (or every ``level<N>/*.py`` in fp32 and bf16)."""
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
    if not problems:
        raise BadInputError(f"suite {root}: no problems")
    return problems


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (1-based, as ``kernelopt sweep run --shard``) as a 0-based index and a count."""
    try:
        index, total = (int(x) for x in text.split("/"))
    except ValueError as exc:
        raise BadInputError(f"--shard {text!r}: expected I/N, e.g. 1/4") from exc
    if total < 1 or not 1 <= index <= total:
        raise BadInputError(f"--shard {text!r}: need 1 <= I <= N")
    return index - 1, total


def run_problem(root: Path, problem: Problem, out: Path, *, device: str | None, budget: list[str],
                gamma: float, timeout_s: float, store: Path) -> ProblemResult:
    """One ``kernelopt optimize`` in its own process; a crash or hang is this problem's result."""
    run_dir = out / "problems" / problem.slug
    cmd = [sys.executable, "-m", "kernelopt_bot.cli", "optimize", str(root / problem.path), "--dtype", problem.dtype,
           "--out", str(run_dir), "--store", str(store), "--gamma", str(gamma)]
    if device:
        cmd += ["--device", device]
    for item in budget:
        cmd += ["--budget", item]
    start = time.time()
    error: str | None = None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=dict(os.environ))
        if proc.returncode not in (0, 1):
            error = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout_s:.0f} s"
    seconds = time.time() - start
    result_file = run_dir / "result.json"
    if error is None and result_file.is_file():
        run = RunResult.load(result_file)
        mant = next((r for r in run.recommendations if r.option == MANT), None)
        vs_mant = None
        if run.speedup is not None and mant is not None and mant.speedup:
            vs_mant = run.speedup / mant.speedup
        return ProblemResult(problem, run.status, run.speedup, vs_mant, run.baseline_ms, run.optimized_ms,
                             run.verified_kernels, seconds, run.error)
    return ProblemResult(problem, "failed", None, None, None, None, 0, seconds, error or "no result.json")


def run_suite(root: Path, out: Path, *, shard: tuple[int, int] = (0, 1), device: str | None = None,
              dtypes: tuple[str, ...] | None = None, budget: list[str] | None = None, gamma: float = 1.03,
              timeout_s: float = 900.0, log: Any = print) -> SuiteResult:
    problems = load_problems(root, dtypes)
    index, total = shard
    mine = problems[index::total]
    out.mkdir(parents=True, exist_ok=True)
    suite = SuiteResult(device=device or ("cuda" if _has_cuda() else "cpu"))
    for i, problem in enumerate(mine, 1):
        log(f"[{i}/{len(mine)}] {problem.path} {problem.dtype}")
        res = run_problem(root, problem, out, device=device, budget=list(budget or []), gamma=gamma,
                          timeout_s=timeout_s, store=out / "store.db")
        suite.problems.append(res)
        write_report(suite, out)  # after every problem: a killed shard still leaves its results
    return suite


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def merge(dirs: list[Path]) -> SuiteResult:
    """Combine the suite.json files of several shards (each problem once; the later dir wins)."""
    by_slug: dict[str, ProblemResult] = {}
    device = ""
    for d in dirs:
        path = d / "suite.json"
        if not path.is_file():
            raise BadInputError(f"{d}: no suite.json")
        data = json.loads(path.read_text())
        device = device or data.get("device", "")
        for p in data["problems"]:
            prob = Problem(**p["problem"])
            fields = {k: v for k, v in p.items() if k in ProblemResult.__dataclass_fields__ and k != "problem"}
            by_slug[prob.slug] = ProblemResult(problem=prob, **fields)
    return SuiteResult(sorted(by_slug.values(), key=lambda r: (r.problem.level, r.problem.path, r.problem.dtype)),
                       device)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(suite: SuiteResult) -> str:
    lines = [f"# kernelopt suite ({suite.device})", "",
             "| level | problems | measured | failed | geomean vs compile default | geomean vs max-autotune-no-cudagraphs | slowest | median optimize s |",
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
        lines += ["", "```mermaid", "xychart-beta", '    title "End-to-end speedup over torch.compile"',
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
