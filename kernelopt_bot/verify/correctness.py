"""Gate 2: multi-seed, multi-distribution correctness of one kernel against the compiler's.

Runs inside the sandbox (:mod:`kernelopt_bot.verify.sandbox`), on fresh data laid out exactly like
the arguments the kernel got in the model:

* every trial draws new values for the kernel's inputs (several seeds of normal, uniform, large,
  mixed-sign and special-value inputs, and one seed of each structured distribution: all-negative,
  all-equal and zero rows, a large common offset, per-row scales over eight orders of magnitude,
  denormals), so nothing can be cached between trials and a kernel right only on the easy
  patterns fails;
* outputs are pre-filled with a pattern that changes between trials (NaN, a large finite
  sentinel, zeros, random garbage), so an element the candidate never writes fails, and so does a
  kernel that reads its output and is right only when it finds one particular prefill;
* the candidate runs first; the compiler's kernel runs afterwards on fresh buffers, so the
  candidate can never read a result the reference left behind;
* inputs the original does not mutate must come back bit-for-bit unchanged after every run;
* every output and every mutated argument is compared (:mod:`kernelopt_bot.verify.tolerance`:
  elementwise, on the norm, for systematic bias, and for values flushed to zero; on the
  special-value inputs NaN and inf are both "not finite", as the order of operations decides
  between them);
* write discipline: on the CPU interpreter the first trial records which elements each program
  stores and loads (:mod:`kernelopt_bot.capture.memory_trace`); the candidate must write only
  what the original writes, from disjoint programs, and read no output before writing it. On a
  GPU, where programs really run at once, the candidate runs several times on identical inputs
  and must give bitwise-identical results (a race shows as nondeterminism).

Inductor kernels are usually specialised to their shapes; a dynamic-shape kernel is verified at
the recorded sizes only, and its pack entry is guarded to them (:mod:`kernelopt_bot.pack.format`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.errors import one_line
from kernelopt_bot.harness import memory
from kernelopt_bot.harness.failures import (
    InfrastructureFailure,
    OutOfWallTime,
    is_out_of_memory,
    is_sticky_device_error,
    past_deadline,
)
from kernelopt_bot.verify.tolerance import Comparison, compare, disagreeing
from kernelopt_bot.verify.verdict import GateResult

BASE_DISTRIBUTIONS = ("normal", "uniform", "large", "mixed", "special")
# Structure along each input's rows (its last dimension, or blocks of the reduction length):
# each runs with the first seed only, the interpreter being slow.
STRUCTURED_DISTRIBUTIONS = ("negative_rows", "equal_rows", "zero_rows", "offset", "row_scales", "denormal")
DISTRIBUTIONS = BASE_DISTRIBUTIONS + STRUCTURED_DISTRIBUTIONS
# Inputs built to cancel: the reference's small outputs there are rounding noise, not values.
CANCELLING_DISTRIBUTIONS = frozenset({"equal_rows", "zero_rows", "offset"})
# Inputs that make a reference overflow: seeded infinities, and finite values wide enough that an
# exp or a sum leaves float32. Where the reference is not finite there, NaN and an infinity are the
# same verdict (tolerance.compare's ``specials``): which one comes out depends on the order in
# which overflowed partial sums meet (+inf + -inf is NaN; one sign alone stays inf), so it changes
# with the launch config. Found off the suite (attention pooling bf16, H100, 12-07c): gate 2 drew the
# second kernel's max and sum like any input, exp(x - max) overflowed, and the compiler's own source
# at another config gave inf where its config gave NaN on 36 elements (their float64 sums are finite,
# about 1e50 and more: both are artefacts). A finite value against a non-finite one still fails,
# unless the compiler's own kernel at the candidate's launch config disagrees with itself there and
# the candidate gives what that kernel gives (:data:`COMPILER_SPREAD_SHARE`). Denormals overflow too, as divisors: the same problem's rerun
# (12-07d) drew the softmax's sum below float32's smallest normal, and 1/sum overflowed.
OVERFLOWING_DISTRIBUTIONS = frozenset({"special", "mixed", "large", "row_scales", "denormal"})
# On those inputs, where the compiler's kernel at the candidate's launch config and at its own
# disagree (tolerance.disagreeing), up to this share of an output, the candidate may give what
# either gives: an autotuner could have picked either config, so neither result there is the only
# right one (a value of the candidate's own there still fails). On attention
# pooling bf16 (H100, 12-07d) gate 2 rejected the compiler's own source at another config (only
# its eviction hints dropped) for 134 NaN where its config gave finite values, and 112 the other way
# round, of 196608. Past the share, the inputs say something after all, and the trial is judged whole.
COMPILER_SPREAD_SHARE = 0.01
DEFAULT_SEEDS = (0, 1, 2)
# Gives the compiler's kernel pinned to the candidate's launch config, as a launcher of an argument
# tuple (None where it does not compile): asked for only when a trial needs it.
ReferenceAtConfig = Callable[[], "Callable[[tuple[Any, ...]], None] | None"]
INT_SENTINEL = -123_456_789
PREFILLS = ("nan", "sentinel", "zeros", "garbage")
FLOAT_SENTINEL = 1.0e4  # finite, representable in every float dtype, far from typical results
REPEATS_ON_GPU = 3  # identical runs whose results must agree bitwise
LARGE_OFFSET = 1.0e3  # breaks one-pass variance (E[x^2] - E[x]^2) in float32


@dataclass(frozen=True)
class ArgRole:
    index: int
    name: str
    role: str  # "in", "out", "inout" or "other"


def argument_roles(kernel: TritonKernel, args: tuple[Any, ...]) -> list[ArgRole]:
    """Which tensor arguments the kernel reads, writes, or both (:meth:`TritonKernel.param_role`)."""
    return [ArgRole(i, kernel.params[i], kernel.param_role(kernel.params[i]))
            for i, arg in enumerate(args) if isinstance(arg, torch.Tensor) and i < len(kernel.params)]


def _storage_view(t: torch.Tensor) -> torch.Tensor:
    """A flat tensor over the whole storage of ``t`` (so views with offsets get data too)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))


def trial_plan(seeds: tuple[int, ...], distributions: tuple[str, ...]) -> list[tuple[int, str]]:
    """(seed, distribution) per trial: every seed for the plain distributions, the first seed for
    the structured ones."""
    plain = [(seed, d) for seed in seeds for d in distributions if d not in STRUCTURED_DISTRIBUTIONS]
    structured = [(seeds[0], d) for d in distributions if d in STRUCTURED_DISTRIBUTIONS] if seeds else []
    return plain + structured


def draw(distribution: str, n: int, gen: torch.Generator, *, row: int = 1,
         dtype: torch.dtype = torch.float32, first_row: int = 0) -> torch.Tensor:
    """``n`` float32 values from one of :data:`DISTRIBUTIONS`, reproducible, on ``gen``'s device;
    ``row`` elements make one row for the structured distributions (``first_row``: the index of
    the first, where these values are a piece of a longer draw: which rows are "every other"),
    ``dtype`` (the tensor's) sets what a denormal is."""
    dev = gen.device
    base = torch.randn(n, generator=gen, device=dev)
    row = max(1, min(row, n))
    n_rows = -(-n // row)

    def per_element(per_row: torch.Tensor) -> torch.Tensor:
        # Each row's value on its elements, broadcast: an index per element (int64, as indexing
        # or ``repeat_interleave`` builds) would take twice the memory of the float32 values
        # drawn, on the GPU the gates share (3.5x the arguments in gate 2 on the H200).
        return per_row[:, None].expand(n_rows, row).reshape(-1)[:n]

    def even() -> torch.Tensor:
        return per_element((torch.arange(n_rows, device=dev) + first_row) % 2 == 0)

    # In place where the values allow it: the gates draw on the GPU the model arms share, and an
    # input of a large kernel is gigabytes (each temporary here is another copy of it).
    if distribution == "normal":
        return base
    if distribution == "uniform":
        return torch.rand(n, generator=gen, device=dev)
    if distribution == "large":
        return base.mul_(1e3)
    if distribution == "mixed":
        return torch.randn(n, generator=gen, device=dev).mul_(2.0).exp_().mul_(base.sign_())
    if distribution == "special":
        # Unique indices (a mask's): duplicates would make the scatter nondeterministic on CUDA
        # and give candidate and reference different inputs.
        specials = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0], device=dev)
        chosen = (torch.rand(n, generator=gen, device=dev) < 0.02).nonzero().squeeze(1)
        base[chosen] = specials[chosen % specials.numel()]
        return base
    if distribution == "negative_rows":  # every other row entirely negative
        return torch.where(even(), base.abs().neg_().sub_(1e-3), base, out=base)
    if distribution == "equal_rows":  # every other row one repeated value
        per_row = torch.randn(n_rows, generator=gen, device=dev)
        return torch.where(even(), per_element(per_row), base, out=base)
    if distribution == "zero_rows":  # every other row all zeros
        return base.masked_fill_(even(), 0.0)
    if distribution == "offset":  # a large common offset on every element
        return base.add_(LARGE_OFFSET)
    if distribution == "row_scales":  # each row scaled by 1e-4 .. 1e4
        exponents = torch.rand(n_rows, generator=gen, device=dev) * 8.0 - 4.0
        return base.mul_(per_element(torch.pow(10.0, exponents)))
    if distribution == "denormal":  # half the elements below the dtype's smallest normal
        tiny = torch.finfo(dtype).tiny if dtype.is_floating_point else torch.finfo(torch.float32).tiny
        scaled = torch.rand(n, generator=gen, device=dev) < 0.5
        return torch.where(scaled, base * (tiny / 4.0), base, out=base)
    raise ValueError(f"unknown distribution {distribution!r}")


def row_length(t: torch.Tensor, reduction: int | None) -> int:
    """Elements in one "row" of ``t``: its last dimension when that is contiguous, otherwise the
    kernel's reduction length, otherwise 64-element blocks."""
    if t.dim() >= 2 and t.stride(-1) == 1 and t.size(-1) > 1:
        return int(t.size(-1))
    if reduction:
        return int(reduction)
    return 64


def reduction_length(kernel: TritonKernel, recorded: tuple[Any, ...]) -> int | None:
    """The kernel's reduction length (``r0_numel``/``rnumel``), when it is an argument."""
    for name, value in zip(kernel.params, recorded):
        if name in ("r0_numel", "rnumel") and isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _prefill(flat: torch.Tensor, pattern: str, gen: torch.Generator) -> None:
    """Poison an output's whole storage with one of :data:`PREFILLS`."""
    if flat.dtype == torch.bool:
        flat.fill_(pattern in ("nan", "sentinel"))
        return
    if flat.is_floating_point():
        if pattern == "nan":
            flat.fill_(float("nan"))
        elif pattern == "sentinel":
            flat.fill_(FLOAT_SENTINEL)
        elif pattern == "zeros":
            flat.zero_()
        else:
            flat.copy_(torch.randn(flat.numel(), generator=gen, device=flat.device).mul_(100.0))
        return
    info = torch.iinfo(flat.dtype)
    if pattern == "zeros":
        flat.zero_()
    elif pattern == "garbage":
        low, high = max(info.min, -(2**31)), min(info.max, 2**31 - 1)
        flat.copy_(torch.randint(low, high, (flat.numel(),), generator=gen, device=flat.device).to(flat.dtype))
    else:
        flat.fill_(INT_SENTINEL if info.min < INT_SENTINEL else -1)


def trial_arguments(recorded: tuple[Any, ...], roles: list[ArgRole], seed: int,
                    distribution: str, prefill: str = "nan", reduction: int | None = None,
                    device: str | torch.device | None = None) -> tuple[Any, ...]:
    """Fresh buffers laid out like ``recorded``, on ``device`` (default: where ``recorded`` is):
    inputs drawn anew, outputs poisoned with ``prefill``, the rest (integer inputs, what the kernel
    neither reads nor writes) copied. The same arguments give the same buffers, bit for bit,
    wherever ``recorded`` lies: the engine keeps it in host memory during gate 2, so the device
    holds the trials' buffers and not the recorded ones beside them."""
    from kernelopt_bot.capture.recorder import snapshot

    if device is None:
        device = next((a.device for a in recorded if isinstance(a, torch.Tensor)), torch.device("cpu"))
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed * 1000 + DISTRIBUTIONS.index(distribution))
    by_index = {r.index: r for r in roles}
    # A large common offset is what activations get; smaller inputs (weights, biases) stay
    # ordinary, or they would swamp the result the offset is meant to strain.
    largest = max((a.numel() for i, a in enumerate(recorded) if isinstance(a, torch.Tensor)
                   and i in by_index and by_index[i].role in ("in", "inout")), default=0)
    out: list[Any] = []
    for i, arg in enumerate(recorded):
        if not isinstance(arg, torch.Tensor):
            out.append(arg)
            continue
        role = by_index[i].role if i in by_index else "other"
        drawn_input = role in ("in", "inout") and arg.is_floating_point()
        # what is prefilled or drawn has every element set below: its recorded values are not copied
        fresh = snapshot(arg, device, contents=not (role == "out" or drawn_input))
        flat = _storage_view(fresh)
        if role == "out":
            _prefill(flat, prefill, gen)
        elif drawn_input:
            dist = "normal" if distribution == "offset" and fresh.numel() < largest else distribution
            _draw_into(flat, dist, gen, row_length(fresh, reduction))
        out.append(fresh)
    return tuple(out)


# Elements drawn at once into an input (whole rows; at least one): a draw holds up to three float32
# temporaries its size, so a whole bf16 activation of 375 MiB drawn at once held 2.2 GB beside it
# (the engine's search peak on attention pooling, 3014 MiB on an H100, 12-07).
DRAW_PIECE_ELEMENTS = 2**20


def _draw_into(flat: torch.Tensor, distribution: str, gen: torch.Generator, row: int) -> None:
    """Fill ``flat`` (an input's storage) with :func:`draw`'s values, a piece of whole rows at
    a time, so the temporaries stay bounded whatever the input's size."""
    n = flat.numel()
    row = max(1, min(row, n))
    step = row * max(1, DRAW_PIECE_ELEMENTS // row)
    for start in range(0, n, step):
        piece = flat[start:start + step]
        values = draw(distribution, piece.numel(), gen, row=row, dtype=flat.dtype, first_row=start // row)
        if flat.dtype == torch.float16:  # keep finite values finite; specials stay special
            values = torch.where(values.isfinite(), values.clamp(-6e4, 6e4), values)
        piece.copy_(values)
        del values


def check_correctness(kernel: TritonKernel, recorded: tuple[Any, ...], kwargs: dict[str, Any],
                      launch_candidate: Any, launch_reference: Any, *,
                      seeds: tuple[int, ...] = DEFAULT_SEEDS,
                      distributions: tuple[str, ...] = DISTRIBUTIONS, device: str,
                      ends_at: float | None = None,
                      reference_at_candidate_config: ReferenceAtConfig | None = None) -> GateResult:
    """Compare a candidate launcher with the reference launcher over seeds and distributions.

    ``reference_at_candidate_config``: where a trial on inputs that overflow fails, gives the
    compiler's own kernel pinned to the candidate's launch config (its launcher, or None where
    there is none), asked for then only; where it and the reference disagree, the candidate may
    give what either gives (:data:`COMPILER_SPREAD_SHARE`).

    ``ends_at`` (``time.time()``): the run's wall deadline. No trial starts that would end past
    it (as long as the longest so far): the gate stops with :class:`OutOfWallTime`, ours, not a verdict (on the CPU a kernel's trial can
    take seconds in the interpreter, and a gate 2 of 21 trials took 240 s of a 110 s budget).

    ``launch_*`` are callables taking the argument tuple (they launch and return nothing). What
    the candidate's launch raises (synchronized, so a kernel's fault counts) propagates: the
    candidate failed. Anything else that raises here is the gate's own failure (its comparison,
    the compiler's kernel) and is raised as an
    :class:`~kernelopt_bot.harness.failures.InfrastructureFailure`, never a verdict.
    """

    def candidate(args: tuple[Any, ...]) -> None:
        try:
            launch_candidate(args)
            _sync(device)
        except Exception as exc:
            raise _CandidateRaised(exc) from exc

    try:
        return _check(kernel, recorded, candidate, launch_reference, seeds, distributions, device, ends_at,
                      reference_at_candidate_config)
    except _CandidateRaised as raised:
        raise raised.error from None
    except OutOfWallTime:
        raise
    except Exception as exc:
        if is_out_of_memory(exc) or is_sticky_device_error(exc):
            raise  # handled as such by the callers: freed and retried, or the process replaced
        raise InfrastructureFailure(f"gate 2's own check failed: {type(exc).__name__}: {one_line(exc)}") from exc


class _CandidateRaised(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _check(kernel: TritonKernel, recorded: tuple[Any, ...], launch_candidate: Any, launch_reference: Any,
           seeds: tuple[int, ...], distributions: tuple[str, ...], device: str,
           ends_at: float | None = None, reference_at_config: ReferenceAtConfig | None = None) -> GateResult:
    roles = argument_roles(kernel, recorded)
    compared = [r for r in roles if r.role in ("out", "inout")]
    if not compared:
        return GateResult.fail("correctness", "kernel has no output argument to compare")
    read_only = [r for r in roles if r.role == "in"]
    reduction = reduction_length(kernel, recorded)
    traced = device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
    worst = 0.0
    excused = 0  # elements not judged: the compiler's kernel disagreed with itself, the candidate agreed with one
    plan = trial_plan(seeds, distributions)
    longest = 0.0  # the longest trial so far: none starts that would end past the deadline
    for trial, (seed, dist) in enumerate(plan):
        began = time.time()
        if past_deadline(ends_at, ahead_s=longest):
            raise OutOfWallTime(f"the wall budget ran out during gate 2, after {trial} of {len(plan)} trials")
        prefill = PREFILLS[trial % len(PREFILLS)]
        where = f"seed {seed}, {dist} inputs, {prefill} prefill"

        def fresh(seed: int = seed, dist: str = dist, prefill: str = prefill) -> tuple[Any, ...]:
            return trial_arguments(recorded, roles, seed, dist, prefill, reduction, device)

        cand_args = fresh()
        if traced and trial == 0:
            problem = _write_discipline(roles, cand_args, fresh(), launch_candidate, launch_reference)
            if problem is not None:
                return GateResult.fail("correctness", f"write discipline: {problem}", seed=seed)
            cand_args = fresh()
        problem = _run_checked(launch_candidate, cand_args, read_only, device)
        if problem is not None:
            return GateResult.fail("correctness", f"{problem} ({where})", seed=seed)
        # Its inputs are checked and done with: only its outputs are compared, so the inputs go
        # before the compiler's argument set is drawn (one input set fewer at the trial's peak).
        cand_args = _outputs_only(cand_args, compared)
        ref_args = fresh()  # fresh buffers, after the candidate
        launch_reference(ref_args)
        _sync(device)
        # The compiler's outputs only: its inputs go before another argument set may be drawn.
        ref_outs = {r.index: ref_args[r.index] for r in compared}
        del ref_args
        results = _compared(compared, cand_args, ref_outs, dist)
        failed = next((res for res in results if not res.ok), None)
        if failed is not None and dist in OVERFLOWING_DISTRIBUTIONS and reference_at_config is not None:
            spread = _compiler_spread(reference_at_config, fresh, compared, cand_args, ref_outs, device)
            if isinstance(spread, str):
                where += f"; {spread}"
            elif spread and (unjudged := sum(int(m.sum()) for m in spread.values())):
                results = _compared(compared, cand_args, ref_outs, dist, spread)
                failed = next((res for res in results if not res.ok), None)
                if failed is None:
                    excused += unjudged
                else:
                    where += (f"; {unjudged} element(s) not judged, where the compiler's kernel at this config "
                              "disagrees with itself and the candidate agrees with it there")
        if failed is not None:
            return GateResult.fail("correctness", f"{failed.reason} ({where})",
                                   seed=seed, distribution=dist, prefill=prefill, **failed.numbers)
        worst = max([worst, *(float(res.numbers.get("rel_norm_err", 0.0)) for res in results)])
        # Each trial's buffers go before the next are drawn (the caching allocator keeps what a
        # trial's peak reserved, and the engine's search holds it beside the model arms): the
        # repeat check needs the candidate's first output, not the compiler's.
        del ref_outs
        if device == "cuda" and trial == 0:
            problem = _repeatable(fresh, cand_args, compared, read_only, launch_candidate, launch_reference, device)
            if problem is not None:
                return GateResult.fail("correctness", f"{problem} ({where})", seed=seed)
        del cand_args
        longest = max(longest, time.time() - began)
    how = "write sets recorded in the interpreter" if traced else (
        f"{REPEATS_ON_GPU} bitwise-identical runs" if device == "cuda" else "no write-set record")
    spread_note = (f"; {excused} element(s) on inputs that overflow not judged, where the compiler's kernel at "
                   "this launch config disagrees with itself" if excused else "")
    return GateResult.ok("correctness", f"matched the compiler's kernel on {len(plan)} trials "
                                        f"({len(seeds)} seeds, {len(distributions)} distributions, "
                                        f"{len(PREFILLS)} prefills; {how}; recorded shape only{spread_note})",
                         trials=len(plan), worst_rel_norm_err=worst, compiler_spread_elements=excused)


def _compared(compared: list[ArgRole], cand_args: tuple[Any, ...], ref_outs: dict[int, torch.Tensor], dist: str,
              unjudged: dict[int, torch.Tensor] | None = None) -> list[Comparison]:
    """Each compared output of the candidate against the compiler's, the elements of its mask in
    ``unjudged`` (if any) left out (``compare``'s ``skip``: no copy of either output)."""
    return [compare(cand_args[r.index], ref_outs[r.index], what=r.name, cancelling=dist in CANCELLING_DISTRIBUTIONS,
                    specials=dist in OVERFLOWING_DISTRIBUTIONS,
                    skip=None if unjudged is None else unjudged.get(r.index))
            for r in compared]


def _compiler_spread(reference_at_config: ReferenceAtConfig, fresh: Callable[[], tuple[Any, ...]],
                     compared: list[ArgRole], cand_args: tuple[Any, ...], ref_outs: dict[int, torch.Tensor],
                     device: str) -> dict[int, torch.Tensor] | str | None:
    """Per compared output, the elements not to judge: where the compiler's kernel at the
    candidate's launch config disagrees with the reference on this trial's inputs
    (:func:`~kernelopt_bot.verify.tolerance.disagreeing`) and the candidate agrees with that
    kernel, so each element of the candidate's is one the compiler's own kernel gives at one of the
    two configs. None where there is no such kernel or it fails to run; why not, where it
    disagrees on more than :data:`COMPILER_SPREAD_SHARE` of an output (then these inputs still say
    something about the candidate). Running out of memory, a sticky device error, our deadline and
    our own failures are raised: they are ours, not this answer."""
    try:
        launch = reference_at_config()
        if launch is None:
            return None
        again = fresh()
        launch(again)
        _sync(device)
    except (InfrastructureFailure, OutOfWallTime):
        raise
    except Exception as exc:
        if is_out_of_memory(exc) or is_sticky_device_error(exc):
            raise
        return None
    masks: dict[int, torch.Tensor] = {}
    for r in compared:
        spread = disagreeing(again[r.index], ref_outs[r.index])
        count = int(spread.sum())
        if count > COMPILER_SPREAD_SHARE * spread.numel():
            return (f"the compiler's kernel at this config disagrees with itself on {count} of {spread.numel()} "
                    f"elements of {r.name}, over {COMPILER_SPREAD_SHARE:.0%}: judged whole")
        if count:
            spread &= ~disagreeing(cand_args[r.index], again[r.index])
            masks[r.index] = spread
    return masks


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _outputs_only(args: tuple[Any, ...], compared: list[ArgRole]) -> tuple[Any, ...]:
    """``args`` with every tensor but the compared outputs dropped (None in its place)."""
    keep = {r.index for r in compared}
    return tuple(None if isinstance(a, torch.Tensor) and i not in keep else a for i, a in enumerate(args))


def _run_checked(launch: Any, args: tuple[Any, ...], read_only: list[ArgRole], device: str,
                 copies_on: str | None = None) -> str | None:
    """Launch once; why the read-only inputs did not come back bit-for-bit, or ``None``. Their
    copies are taken on ``copies_on`` (default: where they are): the host, where the device would
    otherwise hold them beside a second argument set (the repeat check's)."""
    before = {r.index: args[r.index].to(copies_on or args[r.index].device, copy=True) for r in read_only}
    launch(args)
    _sync(device)
    for r in read_only:
        if not _same(before[r.index], args[r.index]):
            return f"input {r.name} was modified in place"
    return None


def _write_discipline(roles: list[ArgRole], cand_args: tuple[Any, ...], ref_args: tuple[Any, ...],
                      launch_candidate: Any, launch_reference: Any) -> str | None:
    """Record both kernels' memory accesses in the interpreter and compare them."""
    from kernelopt_bot.capture.memory_trace import recording_memory, write_discipline

    outputs = {r.name for r in roles if r.role in ("out", "inout")}

    def traced(launch: Any, args: tuple[Any, ...]) -> Any:
        with recording_memory({r.name: args[r.index] for r in roles}, watch_reads=outputs) as trace:
            launch(args)
        return trace

    candidate = traced(launch_candidate, cand_args)
    original = traced(launch_reference, ref_args)
    return write_discipline(original, candidate)


def _repeatable(fresh: Any, first: tuple[Any, ...], compared: list[ArgRole], read_only: list[ArgRole],
                launch_candidate: Any, launch_reference: Any, device: str) -> str | None:
    """On a GPU: the candidate run again on identical inputs must give identical bits (programs
    that race show as runs that differ), unless the compiler's kernel itself is not repeatable."""
    for _ in range(REPEATS_ON_GPU - 1):
        again = fresh()
        # The first run's outputs are held here beside a whole argument set: the inputs' copies go
        # to the host (one trial's, not every trial's: its transfer is not paid 20 times).
        problem = _run_checked(launch_candidate, again, read_only, device, copies_on="cpu")
        if problem is not None:
            return problem
        differs = next((r.name for r in compared if not _same(first[r.index], again[r.index])), None)
        del again  # before the next buffers are drawn
        if differs is None:
            continue
        # The compiler's kernel, run as often: compared with its first run one run at a time, so
        # no more than two of its argument sets are held.
        ref_first: tuple[Any, ...] | None = None
        for _ in range(REPEATS_ON_GPU):
            ref_args = fresh()
            launch_reference(ref_args)
            _sync(device)
            if ref_first is None:
                ref_first = ref_args
            elif not all(_same(ref_first[r.index], ref_args[r.index]) for r in compared):
                return None
            del ref_args
        return (f"output {differs} differs bitwise between identical runs while the compiler's "
                "kernel's does not (a race between programs)")
    return None


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN payloads and signed zeros included): an untouched input is.
    (Flattened first: a 0-dim tensor, a loss, cannot be viewed as bytes.) In pieces: on CUDA
    ``torch.equal`` builds a mask of the bytes compared, which for a whole large output was one
    more copy of it in gate 2 (512 MiB of a 1 GiB argument set on the H200)."""
    if a.shape != b.shape:
        return False
    bytes_a = a.contiguous().reshape(-1).view(torch.uint8)
    bytes_b = b.contiguous().reshape(-1).view(torch.uint8)
    return all(bool(torch.equal(x.to(y.device), y))
               for x, y in memory.flat_pieces(bytes_a, bytes_b, chunk=4 * memory.CHUNK_ELEMENTS))
