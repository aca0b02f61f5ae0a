"""A pack entry is guarded to the sizes it was verified at: a dynamic-shape kernel has one key for
every size, so a replacement verified at one (perhaps with that size baked in) must not run at
another."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from kernelopt_bot.pack import runtime
from kernelopt_bot.pack.format import KernelPack, PackEntry, PackError, integer_arguments
from kernelopt_bot.pack.keys import kernel_key
from tests.helpers import bump_constant, captured


def _twice_plus_one(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0 + 1.0


def _compile_dynamic() -> Callable[[torch.Tensor], torch.Tensor]:
    torch._dynamo.reset()
    return torch.compile(_twice_plus_one, dynamic=True)


@pytest.fixture(scope="module")
def dynamic_source() -> str:
    """The one Triton kernel Inductor generates for ``x * 2 + 1`` with dynamic shapes."""
    from torch._inductor.async_compile import AsyncCompile

    seen: list[str] = []
    original = AsyncCompile.triton

    def spy(self: Any, name: str, source: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(source)
        return original(self, name, source, *args, **kwargs)

    AsyncCompile.triton = spy  # type: ignore[method-assign]
    try:
        runtime.clear_loaded_modules(dynamo=True)
        fn = _compile_dynamic()
        fn(torch.ones(8))
        fn(torch.ones(16))
    finally:
        AsyncCompile.triton = original  # type: ignore[method-assign]
    assert len(set(seen)) == 1, "expected one kernel for both sizes"
    return seen[0]


def _baked_replacement(source: str, size: int) -> str:
    """The kernel with ``xnumel`` baked to ``size`` and its constant 1.0 made 1.5 (so it shows)."""
    baked = bump_constant(source, "    xoffset = ", f"    xnumel = {size}\n    xoffset = ")
    return bump_constant(baked, "tl.full([1], 1.0, tl.float32)", "tl.full([1], 1.5, tl.float32)")


def test_dynamic_kernel_uses_the_replacement_only_at_verified_sizes(dynamic_source: str) -> None:
    assert not runtime.sizes_baked_in(dynamic_source)
    name = "triton_poi_fused_add_mul_0"
    entry = PackEntry(kernel_key(dynamic_source), name, source=_baked_replacement(dynamic_source, 8),
                      guard=runtime.running_environment("cpu"), shapes=((8,),))
    pack = KernelPack(entries={entry.key: entry})
    with runtime.installed(pack), torch.no_grad():
        fn = _compile_dynamic()
        at_verified = fn(torch.ones(8))
        elsewhere = fn(torch.ones(16))
        assert runtime.applied(), "the pack did not apply"
    assert torch.equal(at_verified, torch.full((8,), 3.5))  # the replacement ran at size 8
    assert torch.equal(elsewhere, torch.full((16,), 3.0))  # the compiler's kernel at size 16


def test_without_recorded_shapes_the_baked_kernel_would_run_everywhere(dynamic_source: str) -> None:
    """The negative control: the same replacement unguarded computes garbage at another size."""
    name = "triton_poi_fused_add_mul_0"
    entry = PackEntry(kernel_key(dynamic_source), name, source=_baked_replacement(dynamic_source, 8),
                      guard=runtime.running_environment("cpu"))
    with runtime.installed(KernelPack(entries={entry.key: entry})), torch.no_grad():
        out = _compile_dynamic()(torch.ones(16))
    assert not torch.equal(out, torch.full((16,), 3.0))


def test_static_kernels_bake_their_sizes_so_the_guard_is_trivial() -> None:
    kernel = captured("gelu.py").artifact.kernels[0]
    assert runtime.sizes_baked_in(kernel.source)
    assert integer_arguments(captured("gelu.py").recording(kernel.graph, kernel.name).args)


def test_shapes_round_trip_and_are_validated() -> None:
    entry = PackEntry("k" * 64, "triton_x", source="src", shapes=((8, 32), (16, 32)))
    back = PackEntry.from_json(entry.to_json())
    assert back.shapes == ((8, 32), (16, 32))
    assert PackEntry.from_json({**entry.to_json(), "shapes": None}).shapes == ()
    for bad in ([[8.0]], [8], [[True]], "8"):
        with pytest.raises(PackError, match="shapes"):
            PackEntry.from_json({**entry.to_json(), "shapes": bad})
    assert integer_arguments((torch.ones(2), 8, True, 2.0, 32)) == (8, 32)
