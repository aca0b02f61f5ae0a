"""install(pack) inside torch.compile: swaps what it knows, leaves the rest, and undoes cleanly."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from kernelopt_bot.capture.recorder import capture, compile_fresh
from kernelopt_bot.pack import runtime
from kernelopt_bot.pack.format import Guard, KernelPack, LaunchConfig, PackEntry
from tests.helpers import bump_constant, captured

CONST = "tl.full([1, 1], 1.0, tl.float32)"


def _entry(source: str | None = None, config: LaunchConfig | None = None, guard: Guard | None = None) -> KernelPack:
    kernel = captured("linear_epilogue.py").artifact.kernels[0]
    pack = KernelPack(target="linear_epilogue")
    pack.add(PackEntry(kernel.key, kernel.name, source=source, config=config,
                       guard=guard or runtime.running_environment(captured("linear_epilogue.py").target.device)))
    return pack


def _run_with(pack: KernelPack, config: dict[str, object] | None = None) -> tuple[torch.Tensor, torch.Tensor, list[runtime.AppliedReplacement]]:
    """Compile and run linear_epilogue with ``pack`` installed (``config``: Inductor config patches)."""
    target = captured("linear_epilogue.py").target
    inputs = target.make_inputs(11)
    reference = target.eager(*inputs)
    runtime.clear_log()
    with runtime.installed(pack), torch.no_grad(), torch._inductor.config.patch(config or {}):
        out = compile_fresh(target.model)(*inputs)
        applied = runtime.applied()
    return out, reference, applied


@pytest.fixture(scope="module")
def changed_source() -> str:
    return bump_constant(captured("linear_epilogue.py").artifact.kernels[0].source, CONST,
                         "tl.full([1, 1], 3.0, tl.float32)")


def test_changed_kernel_changes_what_runs(changed_source: str) -> None:
    out, reference, applied = _run_with(_entry(source=changed_source))
    assert [a.kernel_name for a in applied] == [captured("linear_epilogue.py").artifact.kernels[0].name]
    assert applied[0].replaced_source and applied[0].pinned_config is None
    assert not torch.allclose(out, reference, atol=1e-3)


def test_uninstall_restores_the_compiler(changed_source: str) -> None:
    _run_with(_entry(source=changed_source))
    assert not runtime.is_installed()
    target = captured("linear_epilogue.py").target
    inputs = target.make_inputs(12)
    runtime.clear_log()
    with torch.no_grad():
        out = compile_fresh(target.model)(*inputs)
    assert runtime.applied() == []
    torch.testing.assert_close(out, target.eager(*inputs))


def test_replacement_applies_on_fx_cache_hits_and_with_caches_disabled(changed_source: str) -> None:
    from torch._dynamo.utils import counters

    hits_before = counters["inductor"]["fxgraph_cache_hit"]
    out, reference, applied = _run_with(_entry(source=changed_source))
    assert counters["inductor"]["fxgraph_cache_hit"] > hits_before, "expected an FX-graph cache hit"
    assert applied and not torch.allclose(out, reference, atol=1e-3)
    out, reference, applied = _run_with(_entry(source=changed_source), {"force_disable_caches": True})
    assert applied and not torch.allclose(out, reference, atol=1e-3)


def test_guard_mismatch_changes_nothing(changed_source: str) -> None:
    guard = Guard(torch.__version__, None, "NVIDIA H200", "9.0")
    out, reference, applied = _run_with(_entry(source=changed_source, guard=guard))
    assert applied == []
    assert any("gpu" in s.reason for s in runtime.skipped())
    torch.testing.assert_close(out, reference)


def test_unknown_kernel_changes_nothing(changed_source: str) -> None:
    pack = KernelPack()
    pack.add(PackEntry("0" * 64, "triton_other_0", source=changed_source))
    out, reference, applied = _run_with(pack)
    assert applied == []
    torch.testing.assert_close(out, reference)


def test_pinned_config_is_the_one_that_runs() -> None:
    pin = LaunchConfig({"XBLOCK": 2}, num_warps=2, num_stages=1)
    out, reference, applied = _run_with(_entry(config=pin))
    assert applied and applied[0].pinned_config == pin and not applied[0].replaced_source
    torch.testing.assert_close(out, reference)
    target = captured("linear_epilogue.py").target
    with runtime.installed(_entry(config=pin)):
        cap = capture(target, record=False)
    name = cap.artifact.kernels[0].name
    kernel_obj = getattr(cap.graphs[0].module, name)
    assert [dict(c.kwargs) for c in kernel_obj.configs] == [{"XBLOCK": 2}]
    assert kernel_obj.configs[0].num_warps == 2
    assert kernel_obj.inductor_meta["coordinate_descent_tuning"] is False


def test_production_import_needs_torch_and_triton_only() -> None:
    code = (
        "import sys, kernelopt_bot.pack.runtime as r\n"
        "bad = [m for m in ('click', 'openai', 'github', 'jinja2', 'rich', 'pydantic') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
