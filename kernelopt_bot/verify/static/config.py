"""Gate 1, launch configs: can this config be a valid launch of the original on this device?

Configs come from packs and candidate JSON files, i.e. from outside; ``LaunchConfig.from_json``
already refuses malformed ones (``num_warps: 4.9``, ``num_stages: true``, unknown keys), and this
gate checks them again against the kernel, because a ``LaunchConfig`` can also be built in code.
``bool`` is never an int here.
"""

from __future__ import annotations

import ast

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.device import DeviceLimits
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.pack.keys import KernelSourceError, find_jit_function, read_decorator
from kernelopt_bot.verify.static.caps import MAX_TILE_NUMEL
from kernelopt_bot.verify.static.common import GATE, Reject, fail, is_int, is_power_of_two
from kernelopt_bot.verify.verdict import GateResult

# Launch-config constexprs that size a tile. Older Inductor names the reduction block RBLOCK.
BLOCK_CONSTEXPRS = ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK", "RBLOCK")
MAX_NUM_WARPS = 32
MAX_NUM_STAGES = 8


def _hardcoded_blocks(original: TritonKernel) -> dict[str, int]:
    """Block sizes a kernel fixes in its body (persistent reductions: ``R0_BLOCK: tl.constexpr = 128``)."""
    try:
        fn = find_jit_function(ast.parse(original.source))
    except (SyntaxError, KernelSourceError):
        return {}
    found: dict[str, int] = {}
    for stmt in fn.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            value = stmt.value
            if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
                for t in targets:
                    if isinstance(t, ast.Name) and t.id in BLOCK_CONSTEXPRS:
                        found[t.id] = value.value
    return found


def check_config(original: TritonKernel, config: LaunchConfig, limits: DeviceLimits | None = None) -> GateResult:
    """Gate 1 on a launch config: can it be a valid launch of ``original`` on this device?

    Only constexprs the launcher passes (signature ``'constexpr'``) may be set; a persistent
    reduction fixes ``R0_BLOCK`` in its body, so setting it there would be ignored or clash.
    """
    limits = limits or DeviceLimits.from_current_device()
    try:
        tile = _check_config(original, config, limits)
    except Reject as exc:
        return fail(exc)
    return GateResult.ok(GATE, "launch config passed static checks", tile=tile)


def _wrapper_constants(original: TritonKernel) -> set[str]:
    """Constexpr parameters the wrapper passes itself (``triton_meta['constants']``, e.g. an
    ``xnumel`` of 1): a launch config must not set them too."""
    try:
        dec = read_decorator(original.source)
    except (SyntaxError, KernelSourceError):
        return set()
    constants = dec.triton_meta.get("constants") if dec else None
    return {str(k) for k in constants} if isinstance(constants, dict) else set()


def _check_config(original: TritonKernel, config: LaunchConfig, limits: DeviceLimits) -> int:
    fixed = _wrapper_constants(original)
    constexprs = [c for c in original.constexprs if c not in fixed]
    if not isinstance(config.kwargs, dict):
        raise Reject("config-key", f"kwargs must be a mapping of constexpr names to ints, got {config.kwargs!r}")
    for key, value in config.kwargs.items():
        if not isinstance(key, str):
            raise Reject("config-key", f"{key!r} is not a constexpr name")
        if key in fixed:
            raise Reject("config-key", f"{key} is a constant the wrapper passes to {original.name} "
                                        "(triton_meta constants), not a launch-config knob")
        if key not in constexprs:
            hint = ""
            if key in BLOCK_CONSTEXPRS and original.kind == "persistent_reduction":
                hint = f"; a persistent reduction fixes {key} in its body"
            raise Reject("config-key", f"{key} is not a constexpr parameter of {original.name} "
                                        f"(its constexprs: {constexprs or 'none'}){hint}")
        if not is_power_of_two(value):
            raise Reject("config-value", f"{key}={value!r} is not a positive power of two")
        if value > MAX_TILE_NUMEL:
            raise Reject("config-value", f"{key}={value} exceeds the tile cap {MAX_TILE_NUMEL}")
        if "STAGES" in key.upper() and value > MAX_NUM_STAGES:  # a loop's software pipelining depth
            raise Reject("config-value", f"{key}={value} exceeds {MAX_NUM_STAGES} pipeline stages")
    missing = [c for c in constexprs if c in BLOCK_CONSTEXPRS and c not in config.kwargs]
    if missing:
        raise Reject("config-missing", f"block size(s) {missing} of {original.name} must be given")
    warps = config.num_warps
    if not is_power_of_two(warps):
        raise Reject("num_warps", f"num_warps={warps!r} is not a power of two between 1 and {MAX_NUM_WARPS}")
    if warps * limits.warp_size > limits.max_threads_per_block:
        raise Reject("num_warps", f"num_warps={warps} x warp size {limits.warp_size} = {warps * limits.warp_size} "
                                   f"threads exceeds the device's {limits.max_threads_per_block} per block")
    if warps > MAX_NUM_WARPS:
        raise Reject("num_warps", f"num_warps={warps} exceeds {MAX_NUM_WARPS}")
    stages = config.num_stages
    if not (is_int(stages) and 1 <= stages <= MAX_NUM_STAGES):
        raise Reject("num_stages", f"num_stages={stages!r} must be an int between 1 and {MAX_NUM_STAGES}")
    blocks = {k: v for k, v in config.kwargs.items() if k in BLOCK_CONSTEXPRS}
    for name, value in _hardcoded_blocks(original).items():
        blocks.setdefault(name, value)
    tile = 1
    for value in blocks.values():
        tile *= value
    if tile > MAX_TILE_NUMEL:
        shown = " x ".join(f"{k}={v}" for k, v in sorted(blocks.items()))
        raise Reject("tile-size", f"tile {shown} = {tile} elements exceeds Triton's limit of {MAX_TILE_NUMEL}")
    return tile
