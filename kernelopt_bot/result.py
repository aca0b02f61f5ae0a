"""RunResult: what one pipeline run on one target produced, as plain data (``result.json``).

Every front door renders this same object: the terminal table, ``report.md``, the PR body, the
sticky comment, the job summary and the sweep report. Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULT_SCHEMA = "kernelopt-result/1"


_USAGE_LABELS = (("candidates", "candidates"), ("wall_s", "wall seconds"), ("gpu_s", "GPU seconds"),
                 ("tokens", "LLM tokens"), ("cost", "cost"))


@dataclass
class KernelOutcome:
    """One kernel of the target: how much it weighed and what the search made of it."""

    name: str
    kind: str
    share: float | None = None
    time_ms: float | None = None
    candidates: int = 0
    status: str = "not searched"  # "accepted", "rejected by <gate>", "not searched", "cached", ...
    speedup: float | None = None  # end to end, with only this kernel replaced
    replacement: str | None = None  # "config", "source", "config+source" or None
    detail: str = ""
    phase: str = "forward"  # "backward": a training step's backward kernel
    # The compiler's kernel's bandwidth over the device's copy roofline (the profile's): a
    # memory-bound kernel near 1.0 has little left for any search to find.
    roofline_fraction: float | None = None
    # Per strategy (a launch config, a source transformation, a strategy rewrite): candidates
    # gated, accepted, and whether the chosen one was of it: {"one_pass_persistent": {"gated": 2,
    # "accepted": 1, "chosen": 1}}. The report adds them up: how often each one won.
    strategies: dict[str, dict[str, int]] = field(default_factory=dict)


# The suffix of a recommendation that is a compiler option with the run's pack installed on top.
WITH_PACK = " + pack"
# An option whose arm never started, for want of wall time or of GPU memory beside the others,
# says one of these (nothing of it ran: measured before the search, it may still be measured after
# it, see compile_options.not_started); one that is the baseline's own setting says ALREADY.
RAN_OUT = "not measured: the wall-time budget ran out"
COMPILED_UNTIMED = f"{RAN_OUT} after its compile"  # compiled (its graphs cached), not timed
PASSED_OVER = "not measured: its compile (about"
NO_ROOM = "not measured: no GPU memory for its arm beside the others"
ALREADY = "not measured: the baseline already is"


@dataclass
class Recommendation:
    """A whole-model compiler option, measured end to end against the run's baseline compile;
    ``"<option> + pack"``: the best verified option with the run's pack installed on top."""

    option: str  # e.g. "mode=max-autotune-no-cudagraphs", "coordinate_descent_tuning=True"
    speedup: float | None
    verified: bool
    detail: str = ""
    # Each kernel's launch config as this option's compile settled it (its arm's report): where an
    # option beats the pack, the evidence of what the tuner did not find.
    configs: dict[str, str] = field(default_factory=dict)
    # Seconds its arm took from its start to ready (torch's import, loading the target, the compile
    # and its first call; None: it did not compile): what the options' compile estimates plan for.
    compile_s: float | None = None
    # What the run planned that compile to take (:func:`~kernelopt_bot.compile_options.compile_estimate_s`;
    # None: no estimate, or the option was not planned): beside compile_s, the estimate's evidence.
    compile_estimate_s: float | None = None
    # Seconds its check (gate 3) and timed rounds took (None: not checked): what the options'
    # timing estimates plan for (on the H200 a training step's CUDA-graphs option took 36 s where
    # 10 were planned, 12-04).
    timed_s: float | None = None

    @property
    def with_pack(self) -> bool:
        return self.option.endswith(WITH_PACK)

    @property
    def never_started(self) -> bool:
        """Its arm never started: no time or GPU room for it, or it is the baseline's own setting."""
        return self.detail in (RAN_OUT, NO_ROOM) or self.detail.startswith((PASSED_OVER, ALREADY))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunResult:
    target: str
    name: str
    device: str
    dtype: str
    status: str = "ok"  # "ok" or "failed"
    error: str | None = None
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    baseline_ms: float | None = None
    optimized_ms: float | None = None
    speedup: float | None = None
    noise_floor: float | None = None
    # How the model is compiled, baseline and every arm alike: {"mode": ..., "config": {...}}
    # (kernelopt_bot.capture.settings; empty mode and config: the default compile).
    compile: dict[str, Any] = field(default_factory=dict)
    # A training target: every call measured and compared is one training step (forward, loss,
    # backward; kernelopt_bot.training), and gate 3 compares the loss and every gradient.
    train: bool = False
    # A training step's time split into its forward and its backward, baseline and optimized
    # (ms, GPU time): {"forward": {"baseline": .., "optimized": ..}, "backward": {...}}.
    step_split_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # The same end-to-end comparison as host-inclusive latency of one call (wall clock, synchronized
    # per call; launch overhead included): "baseline", "optimized" in ms (medians over rounds),
    # "speedup" (the passes' paired ratios' median, as the GPU time's) and "noise_floor".
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    # Where the end-to-end benchmark's pack arm and baseline did not start alike (one timed as it
    # compiled, the other loaded from the compiler's cache: harness.arm_process.started_unlike),
    # which way that leans; None where they started alike or did not say.
    started_unlike: str | None = None
    # How many graphs torch.compile captured (a module target; None before the capture or for a
    # kernel target). 0: Dynamo traced nothing (an nn.LSTM, say), so the model runs eagerly and
    # no kernel was generated.
    graphs: int | None = None
    # How many library calls (cuBLAS, cuDNN, ATen fallbacks) the captured graphs make (None as
    # for ``graphs``). With no kernel and no call, the graphs only view their inputs.
    library_calls: int | None = None
    kernels: list[KernelOutcome] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    pack_entries: int = 0
    pack_path: str | None = None
    # A standalone-kernel target's deliverable: the verified configs as a patch to its own source
    # (kernelopt_bot.launcher_run; `git apply` it at the launcher's folder), None otherwise.
    patch_path: str | None = None
    # A kernel target's verified changes to its source, as data (source_patch.SourceEdit.to_json)
    source_edits: list[dict[str, Any]] = field(default_factory=list)
    reproduce: str = ""
    seconds: float | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)  # candidates tried, tokens, cost, GPU seconds
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent in each pipeline step
    # Processes the run started ("started": the engine and every child it started, model arms
    # included; "sandboxes": those for untrusted candidates' gate 2 and timing) and the engine's
    # peak GPU memory in MiB ("peak_gpu_mb"; None without CUDA).
    processes: dict[str, Any] = field(default_factory=dict)
    isolation: str = ""  # how untrusted code was isolated: "bwrap", "unshare" or "none"
    # Why a failed run failed: "bad input" (the target or an option; the CLI exits 2) or "" (exit 1).
    error_kind: str = ""
    # The LLM agents: "not configured" (no endpoint given), "used", or "unavailable" (an endpoint
    # was given but could not be used: bad settings, unreachable, refusing; the tuner ran alone).
    llm_status: str = "not configured"
    llm_error: str | None = None  # why the agents were unavailable

    @property
    def llm_headline(self) -> str:
        """One line for a report's headline when the LLM agents were asked for but did not run,
        else ``""``: a reader must not take a tuner-only run for a run with the agents."""
        if self.llm_status != "unavailable":
            return ""
        return "LLM agents unavailable: tuner only" + (f" ({self.llm_error})" if self.llm_error else "")

    @property
    def strategy_rows(self) -> list[dict[str, Any]]:
        """Each strategy's candidates over all kernels: gated, accepted, chosen (most chosen first)."""
        totals: dict[str, dict[str, int]] = {}
        for kernel in self.kernels:
            for name, counts in kernel.strategies.items():
                row = totals.setdefault(name, {"gated": 0, "accepted": 0, "chosen": 0})
                for key in row:
                    row[key] += int(counts.get(key, 0))
        rows = [{"strategy": name, **counts} for name, counts in totals.items()]
        return sorted(rows, key=lambda r: (-r["chosen"], -r["accepted"], -r["gated"], r["strategy"]))

    @property
    def step_halves(self) -> list[dict[str, Any]]:
        """A training step's split as rows: ``half`` (forward, backward), ``baseline`` and
        ``optimized`` ms, and the half's ``speedup``: the passes' paired median the harness
        measured (None where no pass had both halves positive: a backward is the step less its
        forward, which noise can make negative); a result written before the harness paired them
        has the ratio of the two times (None where either is missing or not positive)."""
        rows = []
        for half, times in self.step_split_ms.items():
            before, after = times.get("baseline"), times.get("optimized")
            if "speedup" in times:
                speedup = times["speedup"]
            else:
                speedup = before / after if before and after and before > 0 and after > 0 else None
            rows.append({"half": half, "baseline": before, "optimized": after, "speedup": speedup})
        return rows

    @property
    def best_recommendation(self) -> Recommendation | None:
        """The verified compiler option (alone) with the largest end-to-end speedup, if any."""
        verified = [r for r in self.recommendations if r.verified and r.speedup is not None and not r.with_pack]
        return max(verified, key=lambda r: r.speedup or 0.0) if verified else None

    @property
    def option_outcome(self) -> Recommendation | None:
        """The option the report's headline speaks for where none is verified: the first whose arm
        started (CUDA graphs, led on a launch-bound model and failed, says more than a
        max-autotune that never started), else the first."""
        alone = [r for r in self.recommendations if not r.with_pack]
        return next((r for r in alone if not r.never_started), alone[0] if alone else None)

    @property
    def option_with_pack(self) -> Recommendation | None:
        """The best verified option measured with the pack on top, where the run measured it."""
        return next((r for r in self.recommendations if r.with_pack), None)

    @property
    def best_verified_speedup(self) -> float | None:
        """What a user gets taking everything this run verified: the largest of the pack's
        speedup, the best option's and the option's with the pack, over the baseline compile
        (1.0 on a GPU where none was verified: the compiler's code stays; None without one)."""
        if self.status != "ok":
            return None
        found = [r.speedup for r in self.recommendations if r.verified and r.speedup is not None]
        if self.speedup is not None:
            found.append(self.speedup)
        if not found:
            return 1.0 if self.device == "cuda" else None
        return max(1.0, *found)

    @property
    def usage_rows(self) -> list[dict[str, Any]]:
        """The budget as rows a table can show: resource, limit (``None`` = unlimited), used.
        Tokens and cost only where LLM agents were asked for (the tuner spends neither)."""
        limits, used = self.usage.get("limits") or {}, self.usage.get("used") or {}
        shown = [(k, label) for k, label in _USAGE_LABELS
                 if (k in limits or k in used) and (self.llm_status != "not configured" or k not in ("tokens", "cost"))]
        return [{"resource": label, "limit": limits.get(k), "used": used.get(k)} for k, label in shown]

    @property
    def baseline_label(self) -> str:
        """How the report names the baseline: ``torch.compile`` with the run's settings."""
        from kernelopt_bot.capture.settings import CompileSettings

        return CompileSettings.from_json(self.compile).label

    @property
    def measured(self) -> bool:
        return self.speedup is not None

    @property
    def nothing_to_search(self) -> str | None:
        """Why the run had no kernel to search, said once where the kernel table would be empty;
        None where it had kernels. Three cases: Dynamo captured no graph (an nn.LSTM: the model
        runs eagerly under torch.compile), Inductor compiled every op to a library call, or the
        graph has no op to compile (a view of the input)."""
        if self.status != "ok" or self.kernels:
            return None
        if self.graphs == 0:
            return ("torch.compile captured no graph: Dynamo did not trace this model (an nn.LSTM, "
                    "say), so it runs eagerly, no Triton kernel was generated and there was nothing "
                    "to search.")
        if self.library_calls == 0:
            return ("The compiled model computes nothing: its graph only views or reshapes its inputs, "
                    "or its tensors are empty (no Triton kernel, no library call), so there was nothing to search.")
        return ("The compiled model has no Triton kernels: torch.compile left every op to library "
                "calls (cuBLAS, cuDNN, ATen), which kernelopt keeps, so there was nothing to search.")

    @property
    def accepted_kernels(self) -> list[str]:
        """Names of the kernels whose replacement passed every gate."""
        return [k.name for k in self.kernels if k.status == "accepted"]

    @property
    def verified_kernels(self) -> int:
        return len(self.accepted_kernels)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = RESULT_SCHEMA
        data["measured"] = self.measured
        data["verified_kernels"] = self.verified_kernels
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunResult:
        if data.get("schema") != RESULT_SCHEMA:
            raise ValueError(f"not a {RESULT_SCHEMA} document")
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["kernels"] = [KernelOutcome(**k) for k in data.get("kernels", [])]
        fields["recommendations"] = [Recommendation(**r) for r in data.get("recommendations", [])]
        return cls(**fields)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        return cls.from_json(json.loads(Path(path).read_text()))
