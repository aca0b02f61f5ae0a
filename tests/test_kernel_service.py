"""The engine's kernel service: trusted candidates (the tuner's) run gate 2 in this process, with
the same verdicts as the sandbox; untrusted ones still get a sandbox process each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.harness.failures import InfrastructureFailure
from kernelopt_bot.harness.isolation import processes_started
from kernelopt_bot.harness.kernel_service import KernelService, late_text, variant_key
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.search.tuner import ORIGIN
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.kernel_gate import judge_in_engine
from kernelopt_bot.verify.sandbox import SANDBOX_PROCESS
from kernelopt_bot.verify.verdict import Verdict
from tests.helpers import bump_constant, captured, first_float_constant, other_tiling

SEEDS = (0, 1)  # two trials: the comparison is between paths, not a search for rare failures


@pytest.fixture(scope="module")
def cascade() -> Iterator[Cascade]:
    with Cascade(captured("gelu.py"), VerifyOptions(seeds=SEEDS, distributions=("normal",), rounds=1)) as c:
        yield c


def _kernel(cascade: Cascade) -> TritonKernel:
    return cascade.capture.artifact.kernels[0]


def _other_config(cascade: Cascade) -> LaunchConfig:
    kernel = _kernel(cascade)
    return other_tiling(kernel, cascade.capture.recording(kernel.graph, kernel.name).chosen_config)


def _verify(cascade: Cascade, candidate: Candidate) -> tuple[Verdict, int]:
    """The verdict, and how many sandbox processes it started."""
    before = processes_started(SANDBOX_PROCESS)
    verdict = cascade.verify(_kernel(cascade), candidate)
    return verdict, processes_started(SANDBOX_PROCESS) - before


def _gates_1_2(verdict: Verdict) -> list[tuple[str, bool | None, str]]:
    return [(g.name, g.passed, g.reason) for g in verdict.gates[:2]]


def test_only_the_tuner_is_trusted() -> None:
    assert Candidate("c", config=LaunchConfig({"XBLOCK": 8}, 4, 1), origin=ORIGIN).trusted
    assert not Candidate("c", config=LaunchConfig({"XBLOCK": 8}, 4, 1)).trusted  # the default
    assert not Candidate("llm", source="x", origin="llm").trusted


def test_a_broken_tuner_candidate_is_rejected_in_the_engine_as_in_the_sandbox(cascade: Cascade) -> None:
    """A transformation gone wrong (one constant changed), on a valid config: gate 2 rejects it
    in the engine, without a process, with the sandbox's very verdict."""
    kernel = _kernel(cascade)
    constant = first_float_constant(kernel.source)
    wrong = bump_constant(kernel.source, constant, constant.replace("0.5", "0.25"))
    config = _other_config(cascade)
    ours, started = _verify(cascade, Candidate("broken", source=wrong, config=config, origin=ORIGIN))
    assert started == 0
    theirs, started = _verify(cascade, Candidate("broken", source=wrong, config=config))
    assert started == 1
    assert ours.infrastructure is None and ours.rejected_by == "correctness"
    assert _gates_1_2(ours) == _gates_1_2(theirs)
    assert "sandbox start" not in ours.seconds and "engine correctness" in ours.seconds


def test_an_honest_tuner_config_passes_gate_2_in_the_engine_as_in_the_sandbox(cascade: Cascade) -> None:
    config = _other_config(cascade)
    ours, started = _verify(cascade, Candidate("config", config=config, origin=ORIGIN))
    assert started == 0
    theirs, started = _verify(cascade, Candidate("config", config=config))
    assert started == 1
    assert _gates_1_2(ours) == _gates_1_2(theirs)
    assert ours.gate("correctness").passed is True  # type: ignore[union-attr]
    assert ours.gate("model").passed is True  # type: ignore[union-attr]


def test_an_untrusted_source_candidate_still_starts_a_sandbox(cascade: Cascade) -> None:
    verdict, started = _verify(cascade, Candidate("llm", source=_kernel(cascade).source + "\n"))
    assert started == 1
    assert verdict.gate("correctness").passed is True  # type: ignore[union-attr]


def test_a_candidate_that_does_not_compile_is_a_result_and_compiles_once() -> None:
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    service = KernelService(cap.target.device, cap.recording)
    bench = service.bench(kernel)
    result = judge_in_engine(service, kernel, "def broken(:\n", None, seeds=(0,), distributions=("normal",))
    assert result["compiled"] is False and result["reason"].startswith("does not compile:")
    assert bench._compiled[variant_key("def broken(:\n", None)] == result["reason"].removeprefix("does not compile: ")
    # the same variant twice in a batch, and once more later, is compiled once
    config = LaunchConfig({"XBLOCK": 64}, 4, 1)
    first = bench.compile_all([(None, config), (None, config)], deadline_s=60, threads=2)
    assert not isinstance(first[0], str) and first[0] is first[1]
    assert bench.compile_all([(None, config)], deadline_s=60, threads=1)[0] is first[0]
    assert bench.original() is bench.original()  # the compiler's kernel, compiled once


def test_our_compile_deadline_is_infrastructure_not_a_verdict() -> None:
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    service = KernelService(cap.target.device, cap.recording)
    slow = kernel.source + "\nimport time as _t\n_t.sleep(5)\n"  # loading this module takes 5 s
    with pytest.raises(InfrastructureFailure, match="not compiled within 1 s"):
        judge_in_engine(service, kernel, slow, None, seeds=(0,), distributions=("normal",), compile_deadline_s=1)
    assert service.bench(kernel).compile_all([(slow, None)], deadline_s=0, threads=1) == [late_text(0)]


def test_out_of_memory_is_retried_once_then_infrastructure() -> None:
    cap = captured("gelu.py")
    service = KernelService(cap.target.device, cap.recording)
    calls: list[int] = []

    def once_short() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("out of memory")
        return "done"

    assert service.retrying_memory(once_short) == "done" and len(calls) == 2

    def always_short() -> str:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(InfrastructureFailure, match="out of memory in the engine"):
        service.retrying_memory(always_short)

    def broken() -> str:
        raise ValueError("the candidate's own error")

    with pytest.raises(ValueError):  # not ours: the caller makes it the candidate's failure
        service.retrying_memory(broken)


def test_the_service_times_a_batch_and_survives_a_broken_variant() -> None:
    """The timing path the tuner uses on a GPU, run on the CPU: every step runs, nothing is a
    number (interpreter times say nothing about a GPU), a broken variant is that variant's text."""
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    service = KernelService(cap.target.device, cap.recording)
    config = LaunchConfig({next(iter(kernel.constexprs)): 64}, 4, 1)
    timed = service.time_variants(kernel, [(None, config), ("def broken(:\n", None), (None, config)], reps=2)
    assert len(timed.times) == 3 and isinstance(timed.times[1], str) and "Error" in timed.times[1]
    assert set(timed.seconds) >= {"original", "compile", "timing"}
    if cap.target.device == "cuda":
        assert isinstance(timed.original_ms, float) and isinstance(timed.times[0], float)
        assert timed.times[2] == timed.times[0]  # a duplicate is compiled and timed once
    else:
        assert timed.original_ms is None and timed.times[0] is None and timed.times[2] is None


@pytest.mark.gpu
def test_trusted_variants_are_timed_in_the_engine_on_a_gpu(cascade: Cascade) -> None:
    """On CUDA: the tuner's variants get kernel-level times without a process; an untrusted one
    in the same batch still goes to one sandbox job."""
    kernel = _kernel(cascade)
    config = _other_config(cascade)
    before = processes_started(SANDBOX_PROCESS)
    original, times = cascade.time_variants(kernel, [Candidate("config", config=config, origin=ORIGIN)])
    assert processes_started(SANDBOX_PROCESS) == before
    assert isinstance(original, float) and isinstance(times[0], float)
    _, mixed = cascade.time_variants(kernel, [Candidate("config", config=config, origin=ORIGIN),
                                              Candidate("llm", source=kernel.source + "\n")])
    assert processes_started(SANDBOX_PROCESS) == before + 1
    assert all(isinstance(t, float) for t in mixed)


def test_a_trusted_candidate_that_brought_an_engine_down_is_rejected_without_running() -> None:
    """In a new engine (the supervisor's), the work the last one died in is that candidate's
    failure: rejected by correctness, never run again; the announced work frames gates 2-4."""
    from kernelopt_bot.harness.work_watch import WorkWatch

    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    config = other_tiling(kernel, cap.recording(kernel.graph, kernel.name).chosen_config)
    downed = variant_key(kernel.source, config)
    sent: list[tuple[str, object]] = []
    watch = WorkWatch(sent.append, "cpu", {downed: "the engine process crashed (SIGSEGV)"})
    with Cascade(cap, VerifyOptions(seeds=SEEDS, distributions=("normal",), rounds=1), work_watch=watch) as c:
        verdict = c.verify(kernel, Candidate("config", config=config, origin=ORIGIN))
        assert verdict.rejected_by == "correctness" and verdict.infrastructure is None
        assert "brought the engine down" in verdict.gate("correctness").reason  # type: ignore[union-attr]
        assert not sent  # nothing ran
        honest = c.verify(kernel, Candidate("source", source=kernel.source + "\n", config=config, origin=ORIGIN))
        assert honest.gate("correctness").passed is True  # type: ignore[union-attr]
        assert [kind for kind, _ in sent] == ["begin", "end"]
        assert sent[0][1]["label"].startswith("gates for source")  # type: ignore[index]


class _ScriptedHarness:
    """Kernel objects are their own true times (ms); a call's median is that time. Records how
    many repetitions each object got, so the test sees who got the full timing."""

    def __init__(self) -> None:
        self.reps: dict[float, list[int]] = {}

    def time_kernel(self, kernel_obj: float, *, reps: int, warmup: int) -> object:
        from kernelopt_bot.harness.timing import Timing

        self.reps.setdefault(kernel_obj, []).append(reps)
        return Timing(median_ms=float(kernel_obj), samples_ms=[float(kernel_obj)] * reps)


def test_every_variant_is_probed_and_only_the_contenders_get_the_full_repetitions() -> None:
    """Successive halving in two passes: 56 variants of a 1.5 ms kernel each timed in full took
    8.4 s on the H200. The probe decides who is in the running: within 10% of the best."""
    from kernelopt_bot.harness.kernel_service import PROBE_REPS, KernelBench, contenders

    bench = object.__new__(KernelBench)
    bench.harness, bench.kernel = _ScriptedHarness(), TritonKernel.__new__(TritonKernel)
    bench.kernel.name = "k"
    from kernelopt_bot.harness.work_watch import NO_WATCH

    bench.watch = NO_WATCH
    fast, close, slow = 1.0, 1.08, 1.5
    compiled = [slow, fast, "does not compile: x", close, fast]  # the second fast: a duplicate
    times = bench.time_compiled(compiled, ["a", "b", "c", "d", "b"], original_ms=1.2, reps=50)
    assert times == [slow, fast, "does not compile: x", close, fast]
    reps = bench.harness.reps
    assert reps[fast] == [PROBE_REPS, 50] and reps[close] == [PROBE_REPS, 50]
    assert reps[slow] == [PROBE_REPS]  # out of the running: its probe is its time
    # the original's time counts when it is the fastest; without times (the CPU) nobody contends
    assert contenders({1: 1.5, 2: 1.05}, original_ms=1.0) == [2]
    assert contenders({1: None, 2: "error"}, original_ms=None) == []


@pytest.mark.parametrize(("pinned", "expected"), [
    ("late", "the compiler's kernel at the candidate's config not compiled within 60 s"),
    ("CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
])
def test_gate_2s_pinned_compile_failing_on_our_side_is_infrastructure(monkeypatch: pytest.MonkeyPatch, pinned: str,
                                                                      expected: str) -> None:
    """Where a trial on inputs that overflow fails, gate 2 compiles the compiler's source pinned to
    the candidate's config (the compiler's own spread). That compile running past our deadline, or
    out of memory, is ours: an infrastructure failure, never the candidate's "rejected by
    correctness" (review, stop 61)."""
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    service = KernelService(cap.target.device, cap.recording)
    bench = service.bench(kernel)
    real = bench.compile_all

    def compile_all(variants: list, *, deadline_s: float | None, threads: int) -> list:
        if variants[0][0] is None:  # the compiler's source, pinned: only the spread asks for it
            return [late_text(deadline_s) if pinned == "late" else pinned]
        return real(variants, deadline_s=deadline_s, threads=threads)

    monkeypatch.setattr(bench, "compile_all", compile_all)
    constant = first_float_constant(kernel.source)
    wrong = bump_constant(kernel.source, constant, constant.replace("0.5", "0.25"))
    config = other_tiling(kernel, cap.recording(kernel.graph, kernel.name).chosen_config)
    with pytest.raises(InfrastructureFailure, match=expected):
        judge_in_engine(service, kernel, wrong, config, seeds=(0,), distributions=("large",), compile_deadline_s=60)
    # on inputs that cannot overflow nothing is pinned: the wrong candidate is the candidate's verdict
    result = judge_in_engine(service, kernel, wrong, config, seeds=(0,), distributions=("normal",), compile_deadline_s=60)
    assert result["correctness"]["passed"] is False
