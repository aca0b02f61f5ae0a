"""Gate 1, static: reject a candidate kernel or launch config before it costs any GPU time.

One module per rule family: ``caps`` (size, trip counts, tiles), ``module`` (imports, module
level, parameters, heuristics decorator), ``allowlist`` + ``body`` (what a kernel body may
name), ``access`` (which buffers it may load and store), ``config`` (launch configs); ``source``
runs them in order on a candidate source.
"""

from __future__ import annotations

from kernelopt_bot.verify.static.caps import MAX_SOURCE_BYTES, MAX_TILE_NUMEL
from kernelopt_bot.verify.static.common import GATE, is_power_of_two
from kernelopt_bot.verify.static.config import BLOCK_CONSTEXPRS, check_config
from kernelopt_bot.verify.static.module import ALLOWED_HEURISTICS
from kernelopt_bot.verify.static.source import check_source

__all__ = [
    "ALLOWED_HEURISTICS",
    "BLOCK_CONSTEXPRS",
    "GATE",
    "MAX_SOURCE_BYTES",
    "MAX_TILE_NUMEL",
    "check_config",
    "check_source",
    "is_power_of_two",
]
