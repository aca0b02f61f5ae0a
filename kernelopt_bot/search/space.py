"""The launch-config space of an Inductor kernel, pruned by the device's limits.

Block-size constexprs are powers of two, bounded by the kernel's size hints (no point in a block
larger than the dimension it tiles) and by a tile budget; warps by the threads a block may have.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.device import DeviceLimits
from kernelopt_bot.pack.format import LaunchConfig

MAX_TILE = 1 << 16  # elements per program; beyond this registers spill
# Elements each thread holds (tile / threads). Past this a reduction's per-thread arrays exceed the
# register file: such configs spill and run slowly, and compiling one took over a minute on an
# H200 host (a cross-entropy kernel at R0_BLOCK=4096 with 2 warps). Every config the gates
# accepted there held 8-64 per thread.
MAX_ELEMENTS_PER_THREAD = 64
_DIM_OF = {"XBLOCK": "x", "YBLOCK": "y", "ZBLOCK": "z", "R0_BLOCK": "r0_", "R1_BLOCK": "r1_"}


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= max(n, 1):
        out.append(v)
        v *= 2
    return out


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def block_choices(kernel: TritonKernel) -> dict[str, list[int]]:
    """Candidate values for each block constexpr the launch config sets."""
    hints = kernel.size_hints if isinstance(kernel.size_hints, dict) else {}
    choices: dict[str, list[int]] = {}
    for name in kernel.constexprs:
        if name not in _DIM_OF:
            continue
        extent = _next_pow2(int(hints.get(_DIM_OF[name], 1024)))
        values = _pow2_upto(min(extent, MAX_TILE))
        if name.startswith("R"):
            values = [v for v in values if v >= 4] or values
        choices[name] = values
    return choices


def configs(kernel: TritonKernel, limits: DeviceLimits | None = None,
            warps: tuple[int, ...] = (1, 2, 4, 8, 16, 32), stages: tuple[int, ...] = (1,)) -> Iterator[LaunchConfig]:
    """Every valid config of the space: tile within budget, warps within the block limit, and
    at most :data:`MAX_ELEMENTS_PER_THREAD` elements per thread. One warp is in it: a reduction
    over short rows then needs no exchange between warps through shared memory (on the H200 the
    gates accepted liger-kernel's layer norm and RMS norm on short rows at 1.118x and 1.038x with
    one warp where it gives four)."""
    limits = limits or DeviceLimits()
    choices = block_choices(kernel)
    names = list(choices)
    grids = [choices[n] for n in names]
    max_warps = limits.max_threads_per_block // limits.warp_size
    hints = kernel.size_hints if isinstance(kernel.size_hints, dict) else {}
    # A persistent reduction fixes its R0_BLOCK in the body: it still counts towards the tile.
    fixed = _next_pow2(int(hints["r0_"])) if "r0_" in hints and "R0_BLOCK" not in names else 1
    for values in itertools.product(*grids):
        tile = fixed
        for v in values:
            tile *= v
        if tile > MAX_TILE:
            continue
        for w in warps:
            if w > max_warps or w * limits.warp_size > max(tile, limits.warp_size) * 4:
                continue
            if tile > w * limits.warp_size * MAX_ELEMENTS_PER_THREAD:
                continue
            for s in stages:
                yield LaunchConfig(dict(zip(names, values)), num_warps=w, num_stages=s)


def sample(kernel: TritonKernel, n: int, seed: int = 0, limits: DeviceLimits | None = None) -> list[LaunchConfig]:
    """A seeded sample of at most ``n`` configs, spread over the space."""
    space = list(configs(kernel, limits))
    random.Random(seed).shuffle(space)
    return space[:n]
