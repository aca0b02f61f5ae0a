"""Gate 2: multi-seed, multi-distribution correctness of one kernel against the compiler's.

Runs inside the sandbox (:mod:`kernelopt_bot.verify.sandbox`), on fresh data laid out exactly like
the arguments the kernel got in the model:

* every trial draws new values for the kernel's inputs (several seeds, and normal, uniform, large,
  mixed-sign and special-value distributions), so nothing can be cached between trials;
* outputs are pre-filled with NaN (integer outputs with a sentinel), so an element the candidate
  never writes fails;
* the candidate runs first; the compiler's kernel runs afterwards on fresh buffers, so the
  candidate can never read a result the reference left behind;
* inputs the original does not mutate must come back unchanged;
* every output and every mutated argument is compared (:mod:`kernelopt_bot.verify.tolerance`).

Inductor kernels are specialised to their shapes (sizes are baked into the source), so there is no
other valid shape to try; that is reported, not hidden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernelopt_bot.compile.artifact import TritonKernel
from kernelopt_bot.verify.result import GateResult
from kernelopt_bot.verify.tolerance import compare

DISTRIBUTIONS = ("normal", "uniform", "large", "mixed", "special")
DEFAULT_SEEDS = (0, 1, 2)
INT_SENTINEL = -123_456_789


@dataclass(frozen=True)
class ArgRole:
    index: int
    name: str
    role: str  # "in", "out", "inout" or "other"


def argument_roles(kernel: TritonKernel, args: tuple[Any, ...]) -> list[ArgRole]:
    """Which arguments the kernel reads, writes, or both, from Inductor's naming and metadata."""
    mutated = set(kernel.mutated_args)
    roles = []
    for i, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor) or i >= len(kernel.params):
            continue
        name = kernel.params[i]
        if name.startswith("out_ptr"):
            role = "out"
        elif name.startswith("in_out_ptr") or name in mutated:
            role = "inout"
        elif name.startswith("in_ptr"):
            role = "in"
        else:
            role = "other"
        roles.append(ArgRole(i, name, role))
    return roles


def _storage_view(t: torch.Tensor) -> torch.Tensor:
    """A flat tensor over the whole storage of ``t`` (so views with offsets get data too)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))


def draw(distribution: str, n: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` float32 values from one of :data:`DISTRIBUTIONS`, reproducible, on ``gen``'s device."""
    dev = gen.device
    base = torch.randn(n, generator=gen, device=dev)
    if distribution == "normal":
        return base
    if distribution == "uniform":
        return torch.rand(n, generator=gen, device=dev)
    if distribution == "large":
        return base * 1e3
    if distribution == "mixed":
        return base.sign() * torch.exp(2.0 * torch.randn(n, generator=gen, device=dev))
    if distribution == "special":
        # A mask, not scattered indices: duplicate indices would make the scatter nondeterministic
        # on CUDA and give candidate and reference different inputs.
        specials = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0], device=dev)
        chosen = torch.rand(n, generator=gen, device=dev) < 0.02
        pattern = specials[torch.arange(n, device=dev) % specials.numel()]
        return torch.where(chosen, pattern, base)
    raise ValueError(f"unknown distribution {distribution!r}")


def trial_arguments(recorded: tuple[Any, ...], roles: list[ArgRole], seed: int,
                    distribution: str) -> tuple[Any, ...]:
    """Fresh buffers laid out like ``recorded``: inputs drawn anew, outputs poisoned."""
    from kernelopt_bot.compile.capture import snapshot

    device = next((a.device for a in recorded if isinstance(a, torch.Tensor)), torch.device("cpu"))
    gen = torch.Generator(device=device).manual_seed(seed * 1000 + DISTRIBUTIONS.index(distribution))
    by_index = {r.index: r for r in roles}
    out: list[Any] = []
    for i, arg in enumerate(recorded):
        if not isinstance(arg, torch.Tensor):
            out.append(arg)
            continue
        fresh = snapshot(arg)
        flat = _storage_view(fresh)
        role = by_index[i].role if i in by_index else "other"
        if role == "out":
            if fresh.is_floating_point():
                flat.fill_(float("nan"))
            elif fresh.dtype != torch.bool:
                flat.fill_(INT_SENTINEL if torch.iinfo(fresh.dtype).min < INT_SENTINEL else -1)
        elif role in ("in", "inout") and fresh.is_floating_point():
            values = draw(distribution, flat.numel(), gen)
            if fresh.dtype == torch.float16:  # keep finite values finite; specials stay special
                values = torch.where(values.isfinite(), values.clamp(-6e4, 6e4), values)
            flat.copy_(values.to(dtype=flat.dtype))
        out.append(fresh)
    return tuple(out)


def check_correctness(kernel: TritonKernel, recorded: tuple[Any, ...], kwargs: dict[str, Any],
                      launch_candidate: Any, launch_reference: Any, *,
                      seeds: tuple[int, ...] = DEFAULT_SEEDS,
                      distributions: tuple[str, ...] = DISTRIBUTIONS, device: str) -> GateResult:
    """Compare a candidate launcher with the reference launcher over seeds and distributions.

    ``launch_*`` are callables taking the argument tuple (they launch and return nothing).
    """
    roles = argument_roles(kernel, recorded)
    compared = [r for r in roles if r.role in ("out", "inout")]
    if not compared:
        return GateResult.fail("correctness", "kernel has no output argument to compare")
    read_only = [r for r in roles if r.role == "in"]
    worst = 0.0
    trials = 0
    for seed in seeds:
        for dist in distributions:
            cand_args = trial_arguments(recorded, roles, seed, dist)
            before = {r.index: cand_args[r.index].clone() for r in read_only}
            launch_candidate(cand_args)
            if device == "cuda":
                torch.cuda.synchronize()
            for r in read_only:
                if not _same(before[r.index], cand_args[r.index]):
                    return GateResult.fail("correctness", f"input {r.name} was modified in place "
                                                          f"(seed {seed}, {dist} inputs)", seed=seed)
            ref_args = trial_arguments(recorded, roles, seed, dist)  # fresh buffers, after the candidate
            launch_reference(ref_args)
            if device == "cuda":
                torch.cuda.synchronize()
            for r in compared:
                result = compare(cand_args[r.index], ref_args[r.index], what=r.name)
                if not result.ok:
                    return GateResult.fail("correctness", f"{result.reason} (seed {seed}, {dist} inputs)",
                                           seed=seed, distribution=dist, **result.numbers)
                worst = max(worst, float(result.numbers.get("rel_norm_err", 0.0)))
            trials += 1
    return GateResult.ok("correctness", f"matched the compiler's kernel on {trials} trials "
                                        f"({len(seeds)} seeds x {len(distributions)} distributions; "
                                        "shape-specialised kernel, one shape)",
                         trials=trials, worst_rel_norm_err=worst)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN payloads and signed zeros included): an untouched input is."""
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))
