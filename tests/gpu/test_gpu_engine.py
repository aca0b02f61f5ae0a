"""The engine on a real GPU: capture and profile the examples, pinned configs, empty packs.

Run on the H200 by scripts/gpu_check.sh; skipped without CUDA.
"""

from __future__ import annotations

import pytest
import torch

from kernelopt_bot.capture.recorder import capture
from kernelopt_bot.harness.bench import bench
from kernelopt_bot.harness.kernel import KernelHarness
from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry
from kernelopt_bot.pack.runtime import running_environment
from kernelopt_bot.profiling import profile
from kernelopt_bot.targets import load_target
from tests.helpers import EXAMPLES

pytestmark = pytest.mark.gpu

TARGETS = [
    ("gelu.py", "fp32", "pointwise", None),
    ("rmsnorm.py", "bf16", None, None),
    ("softmax.py", "fp32", None, None),
    ("sum_middle_dim.py", "fp32", None, None),
    ("linear_epilogue.py", "bf16", None, "extern_kernels."),
    ("conv_bn_gelu.py", "fp32", None, "extern_kernels.convolution"),
    ("mlp.py", "bf16", None, "extern_kernels."),
    ("attention_block.py", "bf16", None, "extern_kernels."),
    ("graph_break.py", "fp32", None, None),
]


@pytest.mark.parametrize(("example", "dtype", "kind", "vendor"), TARGETS, ids=lambda v: str(v))
def test_examples_inspect_on_gpu(example: str, dtype: str, kind: str | None, vendor: str | None) -> None:
    target = load_target(str(EXAMPLES / example), "cuda", dtype)
    cap = capture(target)
    art = cap.artifact
    assert art.kernels, "no Triton kernels captured"
    assert all(k.launches for k in art.kernels)
    assert all(k.kind != "other" for k in art.kernels if k.name.startswith(("triton_poi", "triton_per", "triton_red")))
    if kind:
        assert {k.kind for k in art.kernels} == {kind}
    if vendor:
        assert any(c.op.startswith(vendor) for c in art.extern_calls)
    assert all(c.preserved for c in art.extern_calls)
    if example == "graph_break.py":
        assert len(art.graphs) == 2
    prof = profile(cap)
    assert prof.model_ms and prof.model_ms > 0
    assert prof.roofline and prof.roofline.copy_gbps > 1000
    shares = [k.share for k in prof.kernels if k.share is not None]
    assert shares and sum(shares) < 1.5
    for k in prof.kernels:
        assert k.time_ms is not None and k.bound in ("memory", "compute", "launch")
    # Every kernel runs alone on its recorded arguments and reproduces its recorded outputs.
    for kernel in art.kernels:
        harness = KernelHarness(kernel, cap.recording(kernel.graph, kernel.name).on("cuda"), "cuda")
        timing = harness.time(reps=10)
        assert timing.median_ms is not None and timing.median_ms > 0


def _other_config(cfg: dict, constexprs: list[str]) -> LaunchConfig:
    """A different valid launch config: halve or double the first block size, other warps."""
    kwargs = dict(cfg["kwargs"])
    block = next(n for n in ("XBLOCK", "R0_BLOCK", "YBLOCK") if n in kwargs and n in constexprs)
    kwargs[block] = kwargs[block] // 2 if kwargs[block] > 1 else 2
    warps = 4 if cfg["num_warps"] != 4 else 8
    return LaunchConfig(kwargs, num_warps=warps, num_stages=cfg["num_stages"])


@pytest.mark.parametrize("config", [{}, {"coordinate_descent_tuning": True}, {"force_disable_caches": True}],
                         ids=["default", "coordinate_descent", "caches_disabled"])
def test_pinned_config_pack_applies_and_stays_correct(config: dict) -> None:
    spec = str(EXAMPLES / "rmsnorm.py")
    cap = capture(load_target(spec, "cuda", "fp32"))
    kernel = cap.artifact.kernels[0]
    chosen = cap.recording(kernel.graph, kernel.name).chosen_config
    assert chosen is not None
    pin = _other_config(chosen, kernel.constexprs)
    pack = KernelPack(target=spec)
    pack.add(PackEntry(kernel.key, kernel.name, config=pin, guard=running_environment("cuda")))
    result = bench(spec, pack, device="cuda", rounds=3, reps=10, config=config)
    assert result.applied == [kernel.name]
    assert result.max_abs_diff is not None and result.max_abs_diff < 1e-4
    assert result.speedup is not None
    print(f"PIN {config or 'default'}: {chosen} -> {pin.describe()}: baseline {result.baseline_ms:.4f} ms, "
          f"packed {result.packed_ms:.4f} ms, speedup {result.speedup:.3f}, noise {result.noise_floor:.4f}")


def test_guard_for_another_gpu_changes_nothing() -> None:
    spec = str(EXAMPLES / "softmax.py")
    cap = capture(load_target(spec, "cuda", "fp32"))
    kernel = cap.artifact.kernels[0]
    env = running_environment("cuda")
    pack = KernelPack()
    pack.add(PackEntry(kernel.key, kernel.name, config=LaunchConfig({"XBLOCK": 1}, 4, 1),
                       guard=type(env)(env.torch, env.triton, "NVIDIA B200", "10.0")))
    result = bench(spec, pack, device="cuda", rounds=1, reps=3)
    assert result.applied == [] and result.max_abs_diff == 0.0


def test_empty_pack_matches_the_compiler_within_noise() -> None:
    spec = str(EXAMPLES / "softmax.py")
    result = bench(spec, KernelPack(), device="cuda", rounds=8, reps=20)
    assert result.speedup is not None and result.noise_floor is not None
    print(f"EMPTY softmax: baseline {result.baseline_ms:.4f} ms, packed {result.packed_ms:.4f} ms, "
          f"speedup {result.speedup:.4f}, noise floor {result.noise_floor:.4f}")
    assert abs(result.speedup - 1.0) <= max(result.noise_floor, 0.005)
    assert torch.cuda.is_available()


def test_inputs_and_weights_are_drawn_on_the_gpu_and_reproducible() -> None:
    """A CUDA target's ``torch.randn(...)`` runs on the GPU (a half-GiB input drawn on the CPU cost
    about a second per benchmark round) and gives every process the same values per seed."""
    first = load_target(str(EXAMPLES / "mlp.py"), "cuda", "bf16")
    second = load_target(str(EXAMPLES / "mlp.py"), "cuda", "bf16")
    a, b = first.make_inputs(7), second.make_inputs(7)
    assert all(x.is_cuda for x in a if isinstance(x, torch.Tensor))
    assert all(torch.equal(x, y) for x, y in zip(a, b) if isinstance(x, torch.Tensor))
    assert not torch.equal(a[0], first.make_inputs(8)[0])
    for p, q in zip(first.model.parameters(), second.model.parameters()):
        assert p.is_cuda and torch.equal(p, q)
