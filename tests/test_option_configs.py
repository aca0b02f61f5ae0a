"""The launch configs a verified compiler option's compile settled on are candidates for the pack
(issue 13 item 1: the pack is not behind what the compiler's own tuning found). On the H200,
coordinate descent made an amax over the outer dimension 1.335x faster end to end while none of
the tuner's 96 variants was faster alone: the option's own configs are gated like any candidate."""

from __future__ import annotations

import pytest

from kernelopt_bot.candidate import Candidate
from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.capture.recorder import Capture
from kernelopt_bot.compile_options import keep_configs_of, option_configs
from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackError
from kernelopt_bot.profiling import profile
from kernelopt_bot.result import KernelOutcome, Recommendation
from kernelopt_bot.search.budget import Budget
from kernelopt_bot.search.orchestrator import OPTION_CONFIG, Orchestrator, strategy_of
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions
from kernelopt_bot.verify.verdict import GATE_ORDER, GateResult, Verdict
from tests.helpers import captured


def test_a_described_config_reads_back_as_strictly_as_a_packs() -> None:
    config = LaunchConfig({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=8, num_stages=2)
    assert LaunchConfig.from_description(config.describe()) == config
    for bad in ("XBLOCK=64, num_warps=8", "XBLOCK=64, num_warps=8, num_stages=1, XBLOCK=2",
                "XBLOCK=sixty, num_warps=8, num_stages=1", "XBLOCK=96, num_warps=8, num_stages=1",
                "__class__=1, num_warps=8, num_stages=1", ""):
        with pytest.raises(PackError):
            LaunchConfig.from_description(bad)


def test_the_fastest_verified_options_configs_come_first_one_a_kernel() -> None:
    a = "R0_BLOCK=8, XBLOCK=64, num_warps=8, num_stages=1"
    b = "R0_BLOCK=16, XBLOCK=32, num_warps=4, num_stages=1"
    recs = [
        Recommendation("mode=max-autotune-no-cudagraphs", 1.30, True, "", {"k0": b, "k1": b}),
        Recommendation("coordinate_descent_tuning=True", 1.33, True, "", {"k0": a, "k2": "not a config"}),
        Recommendation("mode=reduce-overhead (CUDA graphs)", 2.0, False, "below gamma", {"k3": a}),  # not verified
        Recommendation("mode=max-autotune-no-cudagraphs + pack", 1.5, True, "", {"k4": a}),  # with the pack
    ]
    assert option_configs(recs) == [
        ("coordinate_descent_tuning=True", "k0", LaunchConfig.from_description(a)),
        ("mode=max-autotune-no-cudagraphs", "k1", LaunchConfig.from_description(b)),
    ]
    assert option_configs([]) == []


def test_a_recommendation_keeps_the_configs_of_the_searched_kernels_largest_first() -> None:
    """Under max-autotune every kernel of a large model may change: a published result keeps a
    few, those the search cares about."""
    a = "XBLOCK=64, num_warps=8, num_stages=1"
    recs = [Recommendation("o", 1.3, True, "", {f"k{i}": a for i in range(30)}), Recommendation("p", None, False)]
    kept = keep_configs_of(recs, ["k7", "k3", "k99"], limit=1)
    assert kept[0].configs == {"k7": a} and kept[1] == recs[1]
    assert keep_configs_of(recs, ["k7", "k3"])[0].configs == {"k7": a, "k3": a}


class _Gates:
    """Gates whose verdicts the test sets: what is under test is which configs are tried and what
    an accepted one does to the pack and the kernel's row (the gates have tests of their own)."""

    def __init__(self, accept: bool) -> None:
        self.accept = accept
        self.tried: list[tuple[str, Candidate]] = []
        self.timing_seconds: list[dict[str, float]] = []

    def verify(self, kernel: TritonKernel, candidate: Candidate, *, ends_at: float | None = None) -> Verdict:
        self.tried.append((kernel.name, candidate))
        gates = [GateResult.ok(name, "ok", speedup=1.2) if name == "performance" else GateResult.ok(name, "ok")
                 for name in GATE_ORDER]
        if not self.accept:
            gates[-1] = GateResult.fail("performance", "1.01x is below gamma 1.03", speedup=1.01)
        return Verdict(kernel.qualified_name, candidate.label, gates)


def _softmax_kernel() -> tuple[Capture, TritonKernel, LaunchConfig, LaunchConfig]:
    """A real captured kernel, the config the compiler chose for it, and another (twice the warps)."""
    cap = captured("softmax.py")
    kernel = cap.artifact.kernels[0]
    chosen = LaunchConfig.from_json(cap.recording(kernel.graph, kernel.name).chosen_config)
    return cap, kernel, chosen, LaunchConfig({**chosen.kwargs}, num_warps=chosen.num_warps * 2,
                                             num_stages=chosen.num_stages)


def _run(cap: Capture, gates: _Gates, found: list[tuple[str, str, LaunchConfig]],
         pack: KernelPack | None = None) -> tuple[int, list[KernelOutcome], KernelPack]:
    orch = Orchestrator(cap, profile(cap), gates, Budget(), strategies=[])  # type: ignore[arg-type]
    outcomes = [KernelOutcome(k.name, k.kind, status="no proposal") for k in cap.artifact.kernels]
    pack = pack if pack is not None else KernelPack()
    return orch.try_option_configs(found, outcomes, pack), outcomes, pack


def test_an_accepted_options_config_joins_the_pack_as_its_own_kind_of_candidate() -> None:
    cap, kernel, _chosen, other = _softmax_kernel()
    gates = _Gates(accept=True)
    added, outcomes, pack = _run(cap, gates, [("coordinate_descent_tuning=True", kernel.name, other)])
    assert added == 1 and len(gates.tried) == 1
    (entry,) = pack.entries.values()
    assert entry.kernel_name == kernel.name and entry.config == other and entry.source is None
    row = next(o for o in outcomes if o.name == kernel.name)
    assert row.status == "accepted" and row.speedup == 1.2 and row.replacement == "config"
    assert row.strategies == {OPTION_CONFIG: {"gated": 1, "accepted": 1, "chosen": 1}}
    assert "as coordinate_descent_tuning=True compiles it" in row.detail
    assert gates.tried[0][1].trusted  # a launch config of ours: gates in the engine, like the tuner's


def test_what_is_not_tried_and_a_rejection_leaves_the_kernel_as_it_was() -> None:
    cap, kernel, chosen, other = _softmax_kernel()
    foreign = LaunchConfig({"YBLOCK": 16}, 4, 1)  # a constexpr this kernel does not have
    gates = _Gates(accept=True)
    skipped = [("o", kernel.name, chosen),  # the compiler's own config: nothing to try
               ("o", kernel.name, foreign), ("o", "triton_poi_no_such_kernel_7", other)]
    added, _, pack = _run(cap, gates, skipped)
    assert added == 0 and len(pack) == 0 and gates.tried == []
    replaced = KernelPack()
    _run(cap, _Gates(accept=True), [("o", kernel.name, other)], replaced)
    gates = _Gates(accept=True)
    assert _run(cap, gates, [("o2", kernel.name, other)], replaced)[0] == 0 and gates.tried == []  # replaced already
    gates = _Gates(accept=False)
    added, outcomes, pack = _run(cap, gates, [("mode=max-autotune-no-cudagraphs", kernel.name, other)])
    assert added == 0 and len(pack) == 0 and len(gates.tried) == 1
    row = next(o for o in outcomes if o.name == kernel.name)
    assert row.status == "no proposal" and row.candidates == 1
    assert row.strategies == {OPTION_CONFIG: {"gated": 1, "accepted": 0, "chosen": 0}}
    assert row.detail == "mode=max-autotune-no-cudagraphs's config: rejected by performance"


def test_the_limit_counts_the_configs_tried_not_those_passed_over() -> None:
    cap, kernel, _chosen, other = _softmax_kernel()
    gates = _Gates(accept=False)
    orch = Orchestrator(cap, profile(cap), gates, Budget(), strategies=[])  # type: ignore[arg-type]
    outcomes = [KernelOutcome(k.name, k.kind, status="no proposal") for k in cap.artifact.kernels]
    found = [("o", f"triton_poi_not_here_{i}", other) for i in range(5)] + [("o", kernel.name, other)]
    orch.try_option_configs(found, outcomes, KernelPack(), limit=1)
    assert [name for name, _ in gates.tried] == [kernel.name]


def test_an_options_config_runs_the_real_gates() -> None:
    """Through the real cascade (CPU interpreter: gates 1-3; gate 4 needs a GPU)."""
    cap, kernel, _chosen, other = _softmax_kernel()
    with Cascade(cap, VerifyOptions(seeds=(0,), rounds=1)) as gates:
        orch = Orchestrator(cap, profile(cap), gates, Budget(), strategies=[])
        outcomes = [KernelOutcome(k.name, k.kind, status="no proposal") for k in cap.artifact.kernels]
        pack = KernelPack()
        orch.try_option_configs([("coordinate_descent_tuning=True", kernel.name, other)], outcomes, pack)
    row = next(o for o in outcomes if o.name == kernel.name)
    assert row.candidates == 1 and len(pack) == 0  # not accepted without gate 4's measurement
    assert row.detail == "coordinate_descent_tuning=True's config: passed gates 1-3; performance not measured"


def test_its_kind_in_the_report_is_its_own() -> None:
    from kernelopt_bot.candidate import Proposal

    assert strategy_of(Proposal(Candidate("config XBLOCK=1, num_warps=1, num_stages=1 (as o compiles it)"),
                                OPTION_CONFIG)) == OPTION_CONFIG


def test_a_kernel_from_a_parallel_compile_is_noted_when_inductor_resolves_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """With compile workers Inductor hands out futures: asking one again would load (and set up
    the autotuning of) the kernel the model uses a second time, so the arm notes the kernel when
    Inductor resolves it, once."""
    from types import SimpleNamespace

    from torch._inductor.async_compile import AsyncCompile

    from kernelopt_bot.capture.chosen_configs import seeing_kernels

    loads: list[str] = []

    def kernel() -> SimpleNamespace:
        loads.append("load")
        config = SimpleNamespace(kwargs={"XBLOCK": 8}, num_warps=2, num_stages=1)
        return SimpleNamespace(run=lambda *a: None, launchers=[SimpleNamespace(config=config)])

    monkeypatch.setattr(AsyncCompile, "triton", lambda _self, _name, _src, *a, **k: SimpleNamespace(result_fn=kernel))
    with seeing_kernels() as seen:
        future = AsyncCompile.triton(None, "triton_poi_fused_x_0", "source")
        assert seen.configs() == {} and loads == []  # not resolved yet: nothing loaded on our account
        future.result_fn()  # Inductor resolves it
    assert seen.configs() == {"triton_poi_fused_x_0": "XBLOCK=8, num_warps=2, num_stages=1"}
    assert seen.configs() == {"triton_poi_fused_x_0": "XBLOCK=8, num_warps=2, num_stages=1"} and loads == ["load"]
