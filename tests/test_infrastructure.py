"""Our own failures (a deadline, out of memory) are never a verdict on a candidate."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelopt_bot.candidate import Candidate, Proposal
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.result import KernelOutcome
from kernelopt_bot.search.budget import Budget
from kernelopt_bot.search.orchestrator import Orchestrator
from kernelopt_bot.store import Store
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.sandbox import SandboxLimits
from kernelopt_bot.verify.verdict import GATE_ORDER, GateResult, Verdict
from tests.helpers import DEVICE, captured


def _unjudged(reason: str = "timed out after 1 s (hang); killed") -> Verdict:
    verdict = Verdict("g0:k", "config", [GateResult.ok("static")])
    verdict.infrastructure = reason
    return verdict


def test_an_infrastructure_failure_is_neither_accepted_nor_rejected() -> None:
    verdict = _unjudged()
    verdict.gates += [GateResult.ok(n) for n in GATE_ORDER[1:]]  # even with every gate passed
    assert not verdict.accepted
    assert verdict.rejected_by is None
    assert verdict.status == "not verified: infrastructure failure (timed out after 1 s (hang); killed)"
    data = verdict.to_json()
    assert data["infrastructure"].startswith("timed out") and data["accepted"] is False
    assert data["rejected_by"] is None


def test_a_valid_config_past_our_deadline_is_infrastructure_not_correctness() -> None:
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    block = next(iter(kernel.constexprs))
    candidate = Candidate("config", config=LaunchConfig({block: 16}, num_warps=4, num_stages=1))
    with Cascade(cap, VerifyOptions(seeds=(0,), distributions=("normal",))) as cascade:
        # The sandbox cannot even import torch in 0.5 s: the deadline is ours, the config is fine.
        verdict = cascade.verify(kernel, candidate, sandbox=SandboxLimits(timeout_s=0.5))
    assert verdict.infrastructure is not None and verdict.infrastructure.startswith("timed out")
    assert verdict.rejected_by is None and not verdict.accepted
    assert verdict.status.startswith("not verified: infrastructure failure (timed out")
    assert all(g.passed is None for g in verdict.gates if g.name != "static")


class _GpuOrchestrator(Orchestrator):
    @property
    def device(self) -> str:  # negative cache entries are only written for GPU verdicts
        return "cuda"


def test_an_unjudged_candidate_leaves_no_negative_cache_entry(tmp_path) -> None:
    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    store = Store(tmp_path / "store.db")
    orch = _GpuOrchestrator(cap, None, None, Budget(), strategies=[], store=store)  # type: ignore[arg-type]
    outcome = KernelOutcome(kernel.name, kernel.kind)
    rejected = Verdict("g0:k", "other", [GateResult.fail("correctness", "wrong")])
    orch._conclude(kernel, [(Proposal(Candidate("c", source="x"), "t"), _unjudged()),
                            (Proposal(Candidate("d", source="y"), "t"), rejected)], outcome, orch_pack(cap))
    assert "not verified (infrastructure: timed out" in outcome.detail
    assert outcome.status == "no candidate accepted"  # one was judged, and rejected
    assert store.cache.lookup(*orch._cache_key(kernel.key)) is None  # searched again next time
    none_judged = KernelOutcome(kernel.name, kernel.kind)  # every candidate ours to blame: no verdict to name
    orch._conclude(kernel, [(Proposal(Candidate("c", source="x"), "t"), _unjudged())], none_judged, orch_pack(cap))
    assert none_judged.status == "not verified (infrastructure: no candidate was judged)"
    from kernelopt_bot.github.trusted import KERNEL_STATUS_RE

    assert KERNEL_STATUS_RE.match(none_judged.status)  # a status the publish stage accepts
    orch._conclude(kernel, [(Proposal(Candidate("d", source="y"), "t"), rejected)], KernelOutcome("k", "x"),
                   orch_pack(cap))
    assert store.cache.lookup(*orch._cache_key(kernel.key)) is not None  # a real rejection is remembered


def test_a_replacement_the_final_benchmark_dropped_is_not_loaded_as_verified_again(tmp_path) -> None:
    """Accepted by the gates, cached as verified, then dropped by the final benchmark on fresh
    processes: the next run on this GPU must not load it from the cache and ship it."""
    from kernelopt_bot.pack.format import PackEntry

    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    store = Store(tmp_path / "store.db")
    orch = _GpuOrchestrator(cap, None, None, Budget(), strategies=[], store=store)  # type: ignore[arg-type]
    block = next(iter(kernel.constexprs))
    entry = PackEntry(kernel.key, kernel.name, config=LaunchConfig({block: 16}, num_warps=4, num_stages=1))
    store.cache.record_verified(*orch._cache_key(kernel.key), entry, 1.047, None)
    orch.withdraw(["f" * 64])  # another kernel's key
    assert store.cache.lookup(*orch._cache_key(kernel.key)).verified
    orch.withdraw([kernel.key])
    hit = store.cache.lookup(*orch._cache_key(kernel.key))
    assert hit is not None and not hit.verified and hit.entry is None


def orch_pack(cap):
    from kernelopt_bot.pack.format import KernelPack

    return KernelPack(target=cap.target.spec)


def test_a_packed_models_arm_stopped_at_our_deadline_is_infrastructure_not_a_verdict(monkeypatch) -> None:
    """Gate 3's arm for an untrusted candidate, stopped because the phase's time ran out, at its
    first start or at its start again after running out of memory: ours, so the candidate is not
    verified, never "rejected by model"."""
    from kernelopt_bot.harness.arm_process import ArmError, ArmTimeout

    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    block = next(iter(kernel.constexprs))
    candidate = Candidate("config", config=LaunchConfig({block: 16}, num_warps=4, num_stages=1))
    assert not candidate.trusted  # its gates 3-4 run on process arms

    def stopped(*_a, **_k):
        raise ArmTimeout("candidate: still compiling when the 12 s the wall budget left it ran out (stopped)",
                         budget=True)

    starts: list[str] = []

    def out_of_memory_then_stopped(*_a, **_k):  # the retry after freeing memory is stopped too
        starts.append("candidate")
        if len(starts) == 1:
            raise ArmError("candidate: CUDA out of memory. Tried to allocate 2.00 GiB")
        stopped()

    for start in (stopped, out_of_memory_then_stopped):
        with Cascade(cap, VerifyOptions(seeds=(0,), distributions=("normal",), model_seeds=(101,))) as cascade:
            monkeypatch.setattr(cascade.model_arms, "baselines", lambda: (object(), None))
            monkeypatch.setattr(cascade.model_arms, "candidate", start)
            verdict = cascade.verify(kernel, candidate)
        assert verdict.gate("correctness").passed is True
        assert verdict.rejected_by is None and not verdict.accepted
        assert verdict.infrastructure is not None and "the wall budget left it ran out" in verdict.infrastructure
    assert starts == ["candidate", "candidate"]


def test_a_kernel_left_out_of_the_search_says_which_rule_left_it_out() -> None:
    """Below the share threshold (measured), or past the kernel limit (the largest searched; on
    the CPU, with no times, the first): one status said "the share threshold or the kernel limit"
    for both, and on the CPU there is no share to be below."""
    from kernelopt_bot.profiling import KernelProfile, Profile
    from kernelopt_bot.search.orchestrator import SearchLimits

    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]

    def run(share: float | None, limits: SearchLimits) -> str:
        row = KernelProfile(kernel.name, kernel.graph, kernel.kind, 1, None if share is None else 0.1, share,
                            0, None, None, None)
        profile = Profile("t", "cuda", None if share is None else 1.0, None, None, [row])
        orch = Orchestrator(cap, profile, None, Budget(), strategies=[], limits=limits)  # type: ignore[arg-type]
        (outcome,) = orch.run()[0]
        return outcome.status

    assert run(0.01, SearchLimits()) == ("not searched (below the share threshold: 1.0% of the model's time, "
                                         "under 2%)")
    assert run(0.5, SearchLimits(max_kernels=0)) == ("not searched (the kernel limit: only the 0 largest are "
                                                     "searched)")
    assert run(None, SearchLimits(max_kernels=0)) == ("not searched (the kernel limit: only the first 0 are "
                                                      "searched; without a GPU no time ranks them)")


def test_a_kernel_that_writes_nothing_is_not_searched(tmp_path: Path) -> None:
    """``one_hot`` checks its labels' range in a kernel of its own (a device-side assert) that writes
    nothing: its candidates were "rejected by correctness" (no output to compare), a verdict on code
    nothing could have verified. It is left out of the search and says why; the one-hot kernel is searched."""
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.profiling import profile
    from kernelopt_bot.targets import load_target

    model = tmp_path / "one_hot_matmul.py"
    model.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.w = torch.nn.Parameter(torch.randn(10, 8))\n\n"
        "    def forward(self, labels):\n        return torch.nn.functional.one_hot(labels, 10).to(self.w.dtype) @ self.w\n\n\n"
        "def get_inputs():\n    return [torch.randint(0, 10, (32,))]\n\n\ndef get_init_inputs():\n    return []\n")
    cap = capture(load_target(str(model), DEVICE, "fp32"))
    checks = [k for k in cap.artifact.kernels if not k.writes]
    if not checks and cap.artifact.device.startswith("cuda"):  # Inductor checks the range inside the one-hot kernel there (H100, 12-06)
        pytest.skip("no kernel of its own for the range check on this device: the rule is tested on the CPU")
    assert [k.name for k in checks] and all("assert" in k.name for k in checks)
    orch = Orchestrator(cap, profile(cap), None, Budget(), strategies=[])  # type: ignore[arg-type]
    assert [row.name for row in orch.worth_searching()] == [k.name for k in cap.artifact.kernels if k.writes]
    outcomes = {o.name: o.status for o in orch.run()[0] if o.name in {k.name for k in checks}}
    assert set(outcomes.values()) == {"not searched (it writes no argument known to us, as a device-side assert "
                                      "does: no replacement of it could be verified)"}


def test_gate_2_stops_at_the_runs_wall_deadline_and_says_the_deadline_was_ours() -> None:
    """On the CPU a kernel's trial can take seconds in the interpreter: gate 2's 21 trials of one
    candidate took 240 s of a 110 s budget (a logcumsumexp). No trial starts past the run's
    deadline, in the engine (the tuner's candidates) or the sandbox (anyone else's); the
    candidate is then not verified, ours, neither rejected nor accepted."""
    import time

    cap = captured("gelu.py")
    kernel = cap.artifact.kernels[0]
    block = next(iter(kernel.constexprs))
    config = LaunchConfig({block: 16}, num_warps=4, num_stages=1)
    with Cascade(cap, VerifyOptions(seeds=(0, 1), distributions=("normal", "uniform"))) as cascade:
        for candidate in (Candidate("config", config=config, origin="tuner"),
                          Candidate("source", source=kernel.source + "\n# the same kernel\n")):
            verdict = cascade.verify(kernel, candidate, ends_at=time.time() - 1)
            assert verdict.infrastructure == "the wall budget ran out during gate 2, after 0 of 4 trials", (
                candidate.trusted, verdict.status)
            assert verdict.rejected_by is None and not verdict.accepted
            assert verdict.status.startswith("not verified: infrastructure failure (the wall budget ran out")
            honest = cascade.verify(kernel, candidate, ends_at=time.time() + 600)  # time enough: judged
            assert honest.infrastructure is None and honest.gate("correctness").passed, honest.status
    # Gate 3 likewise starts no input set past the deadline (the cascade reports it as above).
    import pytest

    from kernelopt_bot.harness.failures import OutOfWallTime
    from kernelopt_bot.verify.model import check_model

    with pytest.raises(OutOfWallTime, match="ran out during gate 3, after 0 of 2 input sets"):
        check_model(cap.target, None, None, None, seeds=(0, 1), ends_at=time.time() - 1)  # type: ignore[arg-type]


def test_a_compile_failure_is_the_compilers_unless_our_own_code_raised_it() -> None:
    """capture() names torch.compile's failures as the compiler's (CompileError); one whose root
    cause was raised in this project's code (a capture hook, a CPU shim) stays ours."""
    import torch

    from kernelopt_bot.capture.recorder import _raised_by_us, relocated

    with pytest.raises(RuntimeError) as theirs:
        torch.zeros(2).view(3)
    assert not _raised_by_us(theirs.value)

    def compiler_wrapping_our_fault() -> None:
        try:
            relocated((), "no-such-device")  # raises inside kernelopt_bot
        except RuntimeError as inner:
            raise RuntimeError("wrapped by the compiler") from inner

    with pytest.raises(RuntimeError) as ours:
        compiler_wrapping_our_fault()
    assert _raised_by_us(ours.value)
