"""The cascade: cheap gates first, every candidate gets a Verdict, nothing passes by default.

static (no GPU time, in this process: the candidate is only parsed) -> compile + correctness (in
the sandbox for untrusted source; in this process, through the kernel service, for the tuner's own
candidates) -> model (float64 referee in this process) -> performance (the end-to-end harness).
Gates 3 and 4 run on model arms: for untrusted source, packed and baseline models in their own
processes (the baseline arms live as long as the cascade, so verifying several candidates for one
target compiles the baseline once); for the tuner's candidates, the engine's own compiled model
with the candidate's kernel swapped in for each request (:mod:`kernelopt_bot.harness.swap_arm`),
so no process starts and nothing compiles again. A gate that fails stops the cascade; the gates after
it are recorded as not run. If no candidate for a kernel is accepted, the compiler's kernel stays.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelopt_bot.candidate import DEFAULT_GAMMA, Candidate, candidate_pack
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.capture.recorder import Capture
from kernelopt_bot.capture.settings import CompileSettings
from kernelopt_bot.device import device_limits
from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.arm_process import (
    ArmError,
    ArmOursFailed,
    ArmProcess,
    ArmRaised,
    unlike_where_asked,
)
from kernelopt_bot.harness.compile_pool import CompilePool
from kernelopt_bot.harness.failures import (
    InfrastructureFailure,
    OutOfWallTime,
    is_infrastructure_text,
    is_out_of_memory,
    past_deadline,
)
from kernelopt_bot.harness.kernel_service import KernelService, variant_key
from kernelopt_bot.harness.memory import free_memory, retry_note
from kernelopt_bot.harness.model_arms import ModelArms
from kernelopt_bot.harness.swap_arm import EngineArm, KernelSwap
from kernelopt_bot.harness.timing import StepClock
from kernelopt_bot.harness.work_watch import NO_WATCH, WorkWatch
from kernelopt_bot.targets import dtype_name
from kernelopt_bot.verify.correctness import DEFAULT_SEEDS, DISTRIBUTIONS
from kernelopt_bot.verify.kernel_gate import judge_in_engine
from kernelopt_bot.verify.model import DEFAULT_MODEL_SEEDS, check_model
from kernelopt_bot.verify.perf import check_performance, launches_a_call
from kernelopt_bot.verify.sandbox import SandboxLimits, SandboxOutcome, run_sandboxed
from kernelopt_bot.verify.static import check_config, check_source
from kernelopt_bot.verify.verdict import GATE_ORDER, GateResult, Verdict


@dataclass(frozen=True)
class VerifyOptions:
    gamma: float = DEFAULT_GAMMA
    f64_factor: float = 10.0
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    distributions: tuple[str, ...] = DISTRIBUTIONS
    model_seeds: tuple[int, ...] = DEFAULT_MODEL_SEEDS
    rounds: int = 10
    reps: int = 20
    allow_inline_asm: bool = False
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)

# Gates 2-4 of a trusted candidate in the engine (they may wait for arms still compiling): past
# this the engine is taken for hung, replaced, and the candidate skipped by the next one.
ENGINE_GATES_MIN_DEADLINE_S = 900.0


class Cascade:
    """Verifies candidates for the kernels of one captured model."""

    def __init__(self, capture: Capture, options: VerifyOptions | None = None, *,
                 compile_settings: CompileSettings | None = None, work_watch: WorkWatch = NO_WATCH,
                 compile_pool: CompilePool | None = None) -> None:
        self.capture = capture
        self.options = options or VerifyOptions()
        self._workdir = tempfile.TemporaryDirectory(prefix="kernelopt-verify-")
        self._args_paths: dict[tuple[int, str], str] = {}
        self._copy_gbps: float | None = None
        self.timing_seconds: list[dict[str, float]] = []  # per timing job: seconds per step, for the log
        target = capture.target
        # Every model arm compiles as the user does (the capture did too): the baseline is theirs.
        settings = compile_settings or CompileSettings()
        self.model_arms = ModelArms(target.spec, target.device, dtype_name(target.dtype), mode=settings.mode,
                           config=settings.config, train=target.train)
        # Trusted candidates' gate 2 and timing, in this process (the engine): no process started.
        # Each piece of it is watched: work that brings this process down is skipped by the next.
        self.work_watch = work_watch
        self.kernels = KernelService(target.device, capture.recording, work_watch, compile_pool)

    @property
    def device(self) -> str:
        return self.capture.target.device

    def close(self) -> None:
        self.model_arms.close()
        self.kernels.close()
        self._workdir.cleanup()

    def release_search_memory(self) -> None:
        """The search is over: what only it needed leaves the GPU (the kernel service's compiled
        variants and argument copies, its recorded arguments' device copy), so the model arms
        that come next (the compiler's options, the final benchmark) have room. On a large model
        these are several copies of its activations. Nothing is copied to host memory: the
        recorded arguments go back to the host copy the kernel service kept (copied, a large
        model's took 36 s on the H200, the compiler options' time). The capture's inputs left the
        GPU after the profile (``kernelopt_bot.pipeline._run``)."""
        self.kernels.close()  # the searched kernel's arguments back to their host copy; frees the cached GPU blocks

    def __enter__(self) -> Cascade:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _args_path(self, kernel: TritonKernel) -> str:
        """The kernel's recorded arguments, saved once for the sandboxes to load."""
        key = (kernel.graph, kernel.name)
        if key not in self._args_paths:
            path = Path(self._workdir.name) / f"g{kernel.graph}_{kernel.name}.pt"
            # host or device, the sandbox loads them onto its device (map_location), layout kept
            torch.save(list(self.capture.recording(*key).args), path)
            self._args_paths[key] = str(path)
        return self._args_paths[key]

    def _static(self, kernel: TritonKernel, candidate: Candidate) -> GateResult:
        if candidate.source is None and candidate.config is None:
            return GateResult.fail("static", "candidate has neither source nor config")
        if candidate.source is not None:
            result = check_source(kernel, candidate.source, allow_inline_asm=self.options.allow_inline_asm)
            if not result.passed:
                return result
        if candidate.config is not None:
            result = check_config(kernel, candidate.config, device_limits(self.device))
            if not result.passed:
                return result
        return GateResult.ok("static", "passed static checks")

    def verify(self, kernel: TritonKernel, candidate: Candidate, *,
               sandbox: SandboxLimits | None = None, ends_at: float | None = None) -> Verdict:
        """Run ``candidate`` through the gates (``sandbox`` overrides the options' limits).

        ``ends_at`` (``time.time()``): the run's wall deadline. Gate 2 starts no trial past it and
        gates 3-4 do not start past it: the candidate is then not verified (ours), not judged."""
        verdict = Verdict(kernel.qualified_name, candidate.label)
        gates = verdict.gates
        static = self._static(kernel, candidate)
        if not static.passed:
            gates.append(static)
            return verdict.finished()
        if candidate.trusted:  # gates 2-4 run in this process: watched, and skipped if they killed one
            key = variant_key(candidate.source or kernel.source, candidate.config)
            downed = self.work_watch.quarantined(key)
            if downed is not None:
                gates.append(GateResult.fail("correctness", f"candidate run failed: {downed}"))
                return verdict.finished()
            limits = sandbox or self.options.sandbox
            deadline_s = max(ENGINE_GATES_MIN_DEADLINE_S, 4 * limits.timeout_s)  # a backstop for a hang
            with self.work_watch.watching(key, f"gates for {candidate.label} on {kernel.name}", deadline_s):
                return self._verify_past_static(kernel, candidate, verdict, static, sandbox, ends_at)
        return self._verify_past_static(kernel, candidate, verdict, static, sandbox, ends_at)

    def _verify_past_static(self, kernel: TritonKernel, candidate: Candidate, verdict: Verdict,
                            static: GateResult, sandbox: SandboxLimits | None, ends_at: float | None) -> Verdict:
        gates = verdict.gates
        # On a GPU an untrusted candidate's packed-model arm starts compiling now, while gate 2
        # runs: each takes seconds, and a candidate that compiles mostly passes gate 2. It is only
        # asked anything (gates 3-4) after gate 2 passed, and is killed if it did not. A trusted
        # candidate needs no arm process: gates 3-4 swap it into the engine's compiled model.
        early_arm = None
        if self.device == "cuda" and not candidate.trusted:
            # A start that fails here (no process for it, out of memory beside gate 2, our deadline)
            # is not the candidate's: gates 3-4 start their own arm and report what happens then.
            with contextlib.suppress(ArmError):
                early_arm = self.model_arms.candidate(candidate_pack(self.capture, kernel, candidate), wait=False)
        clock = StepClock(verdict.seconds)
        try:
            limits = sandbox or self.options.sandbox
            where = "engine" if candidate.trusted else "sandbox"
            gate2 = self._kernel_job_in_engine if candidate.trusted else self._sandboxed_kernel_job
            outcome = gate2(kernel, candidate, limits, ends_at)
            clock.done(where)
            if not outcome.ok and _is_infrastructure(outcome):
                return _not_verified(verdict, outcome.reason)
            if outcome.ok and outcome.value.get("infrastructure"):  # the wall deadline passed in gate 2
                return _not_verified(verdict, str(outcome.value["infrastructure"]))
            if outcome.ok:
                verdict.seconds.update({f"{where} {k}": v for k, v in (outcome.value.get("seconds") or {}).items()})
            if outcome.ok and not outcome.value.get("compiled") and is_out_of_memory(outcome.value.get("reason", "")):
                return _not_verified(verdict, outcome.value["reason"])
            if outcome.ok and not outcome.value.get("compiled"):
                gates.append(GateResult.fail("static", outcome.value.get("reason", "does not compile")))
                return verdict.finished()
            gates.append(GateResult.ok("static", f"{static.reason}; compiles for {self.device}"))
            if not outcome.ok:
                gates.append(GateResult.fail("correctness", f"candidate run failed: {outcome.reason}"))
                return verdict.finished()
            job = outcome.value
            correctness = GateResult(**job["correctness"])
            gates.append(correctness)
            if not correctness.passed:
                return verdict.finished()
            if past_deadline(ends_at):
                return _not_verified(verdict, "the wall budget ran out before gate 3")

            try:
                if candidate.trusted:
                    gates.extend(self._model_and_performance_in_engine(kernel, candidate, job, clock, ends_at))
                else:
                    gates.extend(self._model_and_performance(kernel, candidate, job, early_arm, clock, ends_at))
            except InfrastructureFailure as exc:
                return _not_verified(verdict, str(exc))
            return verdict.finished()
        finally:
            if early_arm is not None:
                early_arm.close()

    def _kernel_job_in_engine(self, kernel: TritonKernel, candidate: Candidate,
                              limits: SandboxLimits, ends_at: float | None) -> SandboxOutcome:
        """Gate 2 for a trusted candidate in this process (:class:`KernelService`), as the
        sandbox's outcome: a run that raised is the candidate's failure, as in the sandbox; out
        of memory (after one retry) or our compile deadline is infrastructure."""
        opts = self.options
        try:
            value = judge_in_engine(self.kernels, kernel, candidate.source, candidate.config, seeds=tuple(opts.seeds),
                                       distributions=tuple(opts.distributions), time_it=self.device == "cuda",
                                       compile_deadline_s=limits.timeout_s, ends_at=ends_at)
        except InfrastructureFailure as exc:
            return SandboxOutcome(False, reason=str(exc), infrastructure=True)
        except Exception as exc:  # noqa: BLE001 - the candidate's run failed: a result
            return SandboxOutcome(False, reason=one_line(exc))
        return SandboxOutcome(True, value)

    def _sandboxed_kernel_job(self, kernel: TritonKernel, candidate: Candidate,
                              limits: SandboxLimits, ends_at: float | None) -> SandboxOutcome:
        """Gate 2's sandbox job; run once more, after freeing this process's GPU memory, when it
        ran out of memory (the arms and the last job may have held what it needed). A deadline
        of ours is not retried: the same deadline would pass the same way."""
        self.kernels.release_arguments()  # the sandbox loads its own copy: the device holds one
        opts = self.options
        recording = self.capture.recording(kernel.graph, kernel.name)
        payload = {
            "device": self.device, "kernel": kernel.to_json(), "args_path": self._args_path(kernel),
            "kwargs": recording.kwargs, "source": candidate.source,
            "config": candidate.config.to_json() if candidate.config else None,
            "seeds": list(opts.seeds), "distributions": list(opts.distributions),
            "time": self.device == "cuda", "sent_at": time.time(), "chosen_config": recording.chosen_config,
            "ends_at": ends_at,
        }
        outcome = run_sandboxed("kernelopt_bot.verify.jobs.kernel_job", payload, device=self.device,
                                limits=limits)
        if not outcome.ok and _is_infrastructure(outcome) and is_out_of_memory(outcome.reason):
            free_memory(self.device)
            outcome = run_sandboxed("kernelopt_bot.verify.jobs.kernel_job", payload, device=self.device,
                                    limits=limits)
        return outcome

    def _model_and_performance(self, kernel: TritonKernel, candidate: Candidate, job: dict[str, Any],
                               arm: ArmProcess | None, clock: StepClock, ends_at: float | None) -> list[GateResult]:
        """Gates 3 and 4 on one candidate arm (``arm``, already started, or a new one), against
        the model arms' long-lived baselines; ``clock`` records the time of each step."""
        self.kernels.release_arguments()  # the arms run the model, not the kernel
        try:
            baseline, repeat = self.model_arms.baselines()
            clock.done("baselines ready")
            if arm is None:
                arm = self.model_arms.candidate(candidate_pack(self.capture, kernel, candidate))
            elif not arm.ready:
                arm.wait_ready()
            clock.done("arm ready")
        except ArmOursFailed as exc:  # killed at our deadline, or not started: no verdict on the candidate
            if arm is not None:
                arm.close()
            raise InfrastructureFailure(f"a model arm: {exc}") from exc
        except ArmError as exc:
            if not is_out_of_memory(str(exc)):
                return [GateResult.fail("model", f"the packed model did not compile or run: {exc}")]
            # Out of memory while starting is ours (other arms, the sandbox): free what this
            # process holds and start the arm once more before calling it infrastructure.
            if arm is not None:
                arm.close()
            free_memory(self.device)
            try:
                baseline, repeat = self.model_arms.baselines()
                arm = self.model_arms.candidate(candidate_pack(self.capture, kernel, candidate))
            except ArmError as again:
                if is_out_of_memory(str(again)):
                    raise InfrastructureFailure(f"out of memory starting the model arms: {again}") from again
                if isinstance(again, ArmOursFailed):
                    raise InfrastructureFailure(f"a model arm, started again after running out of memory: "
                                                f"{again}") from again
                return [GateResult.fail("model", f"the packed model did not compile or run: {again}")]
            clock.done("arm ready")
        first = arm

        def judge() -> list[GateResult]:
            with first:
                return self._judge_on_arms(kernel, job, baseline, first, repeat, clock, ends_at)

        def restart_and_judge() -> list[GateResult]:
            # The arm that ran out is gone: stop every arm (their memory back to the GPU), start
            # them afresh and judge once more. They compiled before, so a failure now is ours.
            self.model_arms.close()
            try:
                again_baseline, again_repeat = self.model_arms.baselines()
                again_arm = self.model_arms.candidate(candidate_pack(self.capture, kernel, candidate))
            except ArmError as exc:
                raise InfrastructureFailure(f"out of memory judging the candidate, and the model arms did not "
                                            f"start again: {exc}") from exc
            clock.done("arms restarted after running out of memory")
            with again_arm:
                return self._judge_on_arms(kernel, job, again_baseline, again_arm, again_repeat, clock, ends_at)

        return self._retrying_memory(judge, restart_and_judge)

    def _retrying_memory(self, judge: Callable[[], list[GateResult]],
                         again: Callable[[], list[GateResult]]) -> list[GateResult]:
        """Gates 3 and 4 (``judge()``); when they ran out of memory (an arm, the referee, a
        comparison: ours, never a verdict), free this process's memory and run ``again()`` once.
        Out of memory then is an :class:`InfrastructureFailure` that says it was retried."""
        try:
            return judge()
        except InfrastructureFailure as exc:
            if not is_out_of_memory(str(exc)):
                raise
        free_memory(self.device)
        try:
            return again()
        except InfrastructureFailure as exc:
            if is_out_of_memory(str(exc)):
                raise InfrastructureFailure(f"{exc} ({retry_note(self.device)})") from exc
            raise

    def _model_and_performance_in_engine(self, kernel: TritonKernel, candidate: Candidate, job: dict[str, Any],
                                         clock: StepClock, ends_at: float | None) -> list[GateResult]:
        """Gates 3 and 4 for a trusted candidate on the engine's compiled model: the baseline, the
        candidate's kernel object (gate 2's, compiled once) swapped in, and the baseline again
        for the noise floor, asked in turn within this process. No process starts."""
        self.kernels.release_arguments()  # the model runs here, not the kernel: its arguments' device copy goes
        try:
            swap = KernelSwap.build(self.capture, kernel, self.kernels.compiled(kernel, candidate.source,
                                                                                candidate.config))
            arm = EngineArm(self.capture, "candidate", swap)
        except (RuntimeError, ArmRaised) as exc:
            if is_out_of_memory(str(exc)):
                raise InfrastructureFailure(f"out of memory running the model in the engine: {exc}") from exc
            return [GateResult.fail("model", f"the packed model did not compile or run: {exc}")]
        if kernel.name not in arm.info.get("applied", []):
            # The compiled model no longer runs the captured output module (something reset Dynamo
            # and it recompiled): a swap there proves nothing, so judge in process arms instead.
            arm.close()
            return self._model_and_performance(kernel, candidate, job, None, clock, ends_at)
        baseline = self._engine_baseline(kernel) if self.device == "cuda" else EngineArm(self.capture, "baseline")
        repeat = EngineArm(self.capture, "baseline-repeat") if self.device == "cuda" else None
        clock.done("arm ready")

        def judge() -> list[GateResult]:  # the engine's arms hold nothing between requests
            return self._judge_on_arms(kernel, job, baseline, arm, repeat, clock, ends_at)

        return self._retrying_memory(judge, judge)

    def _engine_baseline(self, kernel: TritonKernel) -> EngineArm:
        """The baseline a swapped-in candidate is timed against: the compiler's own kernel (its
        source, pinned to the config its autotuning chose, as the tuner times it) loaded the way
        the candidate was and swapped in the same way, so whatever that path costs or saves (our
        loader, the shape guard's call) is on both sides of the ratio. The repeat arm stays the
        compiled model as it is: the noise floor then shows the path's own effect. On an H100 a
        55 us instance norm's candidate, 1.5% slower than the compiler's kernel timed alone, read
        1.047x against the unswapped model and 0.985x on fresh processes (12-07b). Where the
        original cannot be swapped in, the compiled model as it is."""
        plain = EngineArm(self.capture, "baseline")
        try:
            swap = KernelSwap.build(self.capture, kernel, self.kernels.bench_as_is(kernel).original())
            arm = EngineArm(self.capture, "baseline", swap)
        except (RuntimeError, ArmRaised) as exc:
            if is_out_of_memory(str(exc)):
                raise InfrastructureFailure(f"out of memory running the model in the engine: {exc}") from exc
            return plain
        return arm if kernel.name in arm.info.get("applied", []) else plain

    def _judge_on_arms(self, kernel: TritonKernel, job: dict[str, Any], baseline: Any, arm: Any,
                       repeat: Any, clock: StepClock, ends_at: float | None) -> list[GateResult]:
        """Gate 3, then gate 4, on compiled arms (processes or in-engine: the same interface);
        past the run's wall deadline (``ends_at``) gate 3 starts no seed and gate 4 does not start."""
        opts, target = self.options, self.capture.target
        model = check_model(target, baseline, arm, kernel.name, seeds=opts.model_seeds, factor=opts.f64_factor,
                            ends_at=ends_at)
        clock.done("model")
        if not model.passed:
            return [model]
        if past_deadline(ends_at):
            raise OutOfWallTime("the wall budget ran out before gate 4")
        self.model_arms.settle()  # no arm compiles while gate 4 times (an early arm, a prestarted baseline)
        perf = check_performance(
            baseline, arm, repeat, kernel.name, target=target.spec, device=self.device,
            dtype=dtype_name(target.dtype), gamma=opts.gamma, rounds=opts.rounds, reps=opts.reps,
            kernel_timing=job, copy_gbps=self._roofline_gbps(), launches=self._launches(kernel),
            # The forward/backward split doubles a training step's timing; only gate 4 on fresh
            # process arms may become the run's reported numbers (final_bench.measured_in_this_run)
            split_step=target.train and arm.where == "process",
        )
        clock.done("performance")
        if getattr(baseline, "swap", None) is not None:
            perf.numbers["baseline_arm"] = "the compiler's kernel, swapped in as the candidate is"
        if arm.where == "process":  # the engine's arms share one process: they start alike
            unlike = unlike_where_asked(arm, baseline)
            if unlike:  # which way the comparison leans, on a launch-bound model: the verdict says so
                perf.reason += f" ({unlike})"
                perf.numbers["started_unlike"] = unlike  # the run's headline if these numbers become it
        return [model, perf]

    def _launches(self, kernel: TritonKernel) -> int:
        """The kernel's launches a model call (:func:`~kernelopt_bot.verify.perf.launches_a_call`)."""
        return launches_a_call(self.capture.artifact.kernels, self.capture.recordings, kernel.key)

    def time_variants(self, kernel: TritonKernel, candidates: list[Candidate], *, reps: int = 50
                      ) -> tuple[float | None, list[float | str | None]]:
        """Kernel-level times of the compiler's kernel and of each candidate: trusted ones in
        this process (:class:`KernelService`), the others in one sandbox job.

        Without CUDA nothing is timed: ``(None, [None, ...])``. A failed job times nothing.
        """
        if self.device != "cuda":
            return None, [None] * len(candidates)
        trusted = [i for i, c in enumerate(candidates) if c.trusted]
        others = [i for i, c in enumerate(candidates) if not c.trusted]
        times: list[float | str | None] = [None] * len(candidates)
        original_ms: float | None = None
        if others:
            original_ms, sandboxed = self._time_in_sandbox(kernel, [candidates[i] for i in others], reps)
            for i, value in zip(others, sandboxed):
                times[i] = value
        if trusted:
            try:
                timed = self.kernels.time_variants(kernel, [(candidates[i].source, candidates[i].config)
                                                            for i in trusted], reps=reps)
            except Exception as exc:  # noqa: BLE001 - a failed batch times nothing, as a failed job
                for i in trusted:
                    times[i] = one_line(exc)
            else:
                self.timing_seconds.append({"variants": len(trusted), **timed.seconds})
                original_ms = timed.original_ms if timed.original_ms is not None else original_ms
                for i, value in zip(trusted, timed.times):
                    times[i] = value
        return original_ms, times

    def _time_in_sandbox(self, kernel: TritonKernel, candidates: list[Candidate], reps: int
                         ) -> tuple[float | None, list[float | str | None]]:
        """:meth:`time_variants` for untrusted candidates: one sandbox timing job."""
        recording = self.capture.recording(kernel.graph, kernel.name)
        payload = {
            "device": self.device, "kernel": kernel.to_json(), "args_path": self._args_path(kernel),
            "kwargs": recording.kwargs, "reps": reps,
            "variants": [{"source": c.source, "config": c.config.to_json() if c.config else None}
                         for c in candidates],
            "sent_at": time.time(), "chosen_config": recording.chosen_config,
        }
        outcome = run_sandboxed("kernelopt_bot.verify.jobs.timing_job", payload, device=self.device,
                                limits=self.options.sandbox)
        if not outcome.ok:
            return None, [outcome.reason] * len(candidates)
        self.timing_seconds.append({"variants": len(candidates), **(outcome.value.get("seconds") or {})})
        return outcome.value["original_ms"], list(outcome.value["times"])

    def _roofline_gbps(self) -> float | None:
        if self.device != "cuda":
            return None
        if self._copy_gbps is None:
            from kernelopt_bot.harness.roofline import device_roofline

            roof = device_roofline()
            self._copy_gbps = roof.copy_gbps if roof else None
        return self._copy_gbps


def _is_infrastructure(outcome: SandboxOutcome) -> bool:
    """Did the sandbox fail on our side (our deadline, memory, a child that could not start)?
    Until the sandbox flags it itself, a reason starting with "timed out" or saying "out of
    memory" (CUDA's OOM inside the job included) is taken as ours."""
    return bool(getattr(outcome, "infrastructure", False)) or is_infrastructure_text(outcome.reason)


def _not_verified(verdict: Verdict, reason: str) -> Verdict:
    """Our side failed: record why, judge nothing (every gate not yet decided is not run)."""
    verdict.infrastructure = reason
    ran = {g.name for g in verdict.gates}
    for name in GATE_ORDER:
        if name not in ran:
            verdict.gates.append(GateResult.not_run(name, f"not run: infrastructure failure ({reason})"))
    return verdict
