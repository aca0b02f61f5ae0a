"""When each step of a run comes, and what of the wall budget it gets: the search, the compiler's
options (before the search or after it) and the final end-to-end benchmark.

The wall budget is a deadline for the whole run. The search's deadline is the run's less the
final benchmark's reserve (:func:`final_reserve_s`); within it the search holds back what the
options need after it (:func:`after_search_s`, :func:`held_back`), or, where the profile sends the
options first (:func:`options_first`), the options leave the search its share
(:func:`search_keep_s`) and those that could not start go after it (:func:`options_later`). Every
arm started in a step compiles by that step's deadline (:func:`arms_end_by`). The figures are
estimates from the capture's own compile and the profiled model's time a call; the steps
themselves (the search, the options' arms, the final benchmark) live elsewhere and are handed
their deadlines from here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

OPTIONS_FIRST_SHARE = 0.5  # library calls' share of model time (or launch-bound kernels' of Triton time): options go first
OPTIONS_FIRST_LAUNCHES = 4  # Triton kernels a launch-bound model has at least, for options to go first
OPTIONS_FIRST_SEARCH_S = 10.0  # what options measured first leave the search at least (see options_first)
OPTIONS_FIRST_HEADROOM = 0.10  # the share of model time the search could save at most, below which options go first
OPTION_START_SLACK_S = 5.0  # held beyond an option's need: the search's last step may overrun its deadline
MIN_SEARCH_S = 20.0  # what the time held back for the options leaves the search at least
OPTION_COMPILE_FACTOR = 1.5  # an option's compile against the default compile's (max-autotune tunes GEMMs)
FINAL_BENCH_RESERVE_S = 20.0  # seconds kept for the final end-to-end benchmark on a GPU, at least
# A training step's: on the H200 a layer norm's step (3 ms) with a one-kernel pack took 28 s in
# the final benchmark (gate 3, and rounds that also time each arm's forward half and whole step),
# and ended the run 25-43 s past its wall budget (12-04).
FINAL_BENCH_RESERVE_TRAIN_S = 30.0
FINAL_BENCH_TIMING_S = 10.0  # the final benchmark's gate 3 and timed rounds, after its compile


def final_reserve_s(device: str, train: bool) -> float:
    """Seconds of the wall budget kept for the final end-to-end benchmark: none without a GPU
    (nothing is timed end to end), more for a training step (its rounds time each arm's forward
    half and whole step too)."""
    if device != "cuda":
        return 0.0
    return FINAL_BENCH_RESERVE_TRAIN_S if train else FINAL_BENCH_RESERVE_S


@contextlib.contextmanager
def arms_end_by(model_arms: Any, seconds: float | None) -> Iterator[None]:
    """Option and pack arms started in this block must have compiled ``seconds`` from its start
    (the time left to the deadline; ``None``: no limit), however late in it they start: one still
    compiling then is killed, so an arm cannot carry the run past its wall budget. Baseline arms
    started in it keep their own limit: the final benchmark needs them after it."""
    saved = model_arms.end_by
    if seconds is not None:
        end = time.monotonic() + max(1.0, seconds)
        model_arms.end_by = end if saved is None else min(saved, end)
    try:
        yield
    finally:
        model_arms.end_by = saved


def after_search_s(compile_s: float, reserve: float, options_after: bool, left: float | None,
                   option_s: float | None = None, final_s: float | None = None, load_s: float = 0.0) -> float:
    """What the search leaves, beyond ``reserve``, for what must run after it, sized by the
    model's compile time (``compile_s``, the capture's): the compiler's options when they come
    after it (their compile and timed rounds; the final benchmark's arm compiles beside theirs),
    else the final benchmark's fresh compile of the packed model where it outgrows ``reserve``
    (a level-3 model compiles for 25-30 s on the H200, past the 20 s reserve). ``option_s``: what
    an option's gate 3 and timed rounds take on this model (default: MIN_BENCH_S); ``final_s``: the
    final benchmark's (default: FINAL_BENCH_TIMING_S; where the options come after, what of it
    outgrows ``reserve`` is held back too: a training step's split rounds, a slow model's). Of ``left``
    (the search's wall time, None: no limit) the search keeps ``MIN_SEARCH_S`` whatever that
    costs them: a kernel of the model may be what matters most. ``load_s``: what replacing a cold
    option arm by a cache load adds to its start (``ModelArms.warm_load_s``)."""
    if options_after:  # the final benchmark's arm compiles beside theirs; its rounds past the reserve come after
        after = options_need_s(compile_s, option_s) + load_s + OPTION_START_SLACK_S + max(0.0, (final_s or 0.0) - reserve)
    else:
        timing = FINAL_BENCH_TIMING_S if final_s is None else max(FINAL_BENCH_TIMING_S, final_s)
        after = max(0.0, compile_s + timing - reserve) if reserve else 0.0
    return after if left is None else min(after, max(0.0, left - MIN_SEARCH_S))


def options_need_s(compile_s: float, bench_s: float | None = None) -> float:
    """Seconds the compiler's options need after the search: their compile (max-autotune's takes
    longer than the default one the capture timed) and their check and timed rounds (``bench_s``,
    :func:`~kernelopt_bot.compile_options.bench_need_s`; default: MIN_BENCH_S)."""
    from kernelopt_bot.compile_options import MIN_BENCH_S, MIN_OPTION_S

    bench = MIN_BENCH_S if bench_s is None else bench_s
    return max(MIN_OPTION_S + bench - MIN_BENCH_S, OPTION_COMPILE_FACTOR * compile_s + bench)


@contextlib.contextmanager
def held_back(budget: Any, seconds: float) -> Iterator[None]:
    """Within the block the wall deadline comes ``seconds`` earlier (for what must run after it:
    the search leaves the compiler's options their time), never before the block starts."""
    saved = budget.max_wall_s
    if saved is not None and seconds > 0:
        budget.max_wall_s = min(saved, max(budget.elapsed_s(), saved - seconds))
    try:
        yield
    finally:
        budget.max_wall_s = saved


class OptionsFirst(NamedTuple):
    """Why the compiler's options go before the search, the share of the model's time the search
    could save (``headroom``, which sizes its share of the time), and the option to measure first
    (``lead``; None: :data:`~kernelopt_bot.compile_options.COMPILE_OPTIONS`' order)."""

    why: str
    headroom: float
    lead: str | None = None


def options_first(prof: Any, searched: list[Any], tunable_library: bool = True) -> OptionsFirst | None:
    """Why the compiler's options are measured before the search rather than after it, and the
    share of what is then left of the wall budget that the search keeps; None: search first.
    Where library calls (cuBLAS, cuDNN) take most of the model's time, the searched Triton
    kernels can move the end-to-end time little, and max-autotune's GEMM tuning alone compiles
    for 30-70 s on the H200: measured after the search, the options found no time left (level-2
    problems on 12-03). Where most Triton time is in launch-bound kernels, CUDA graphs is the
    option that can win, and no kernel of the search can: it is measured first (on the H200 a
    small vision transformer's max-autotune and coordinate descent compiled for 64 and 51 s and
    CUDA graphs never started, where issue 12 measured them 1.28x in this harness, 12-04). Where the Triton kernels run at the
    copy roofline already, the search has little to give either: a small CNN's BN+ReLU kernels at
    100% of it took the search's time and left max-autotune's convolution tuning too little to
    finish (12-03, fp32). The search keeps the share of the model's time it could save at most
    (:attr:`~kernelopt_bot.profiling.KernelProfile.headroom_ms` of the kernels it would search,
    ``searched``: not those below the share threshold or past the kernel limit). Library time
    counts only where an option can tune it (``tunable_library``: the model calls GEMMs or
    convolutions); a training step's eager loss and gradient kernels cannot: on the H200 a layer
    norm's training step (63% outside the compiled graphs, 37% in two reductions) sent the options
    first, max-autotune compiled for 60 s and was stopped, and the search got 7 s (bf16, 12-04)."""
    from kernelopt_bot.compile_options import CUDA_GRAPHS

    if not prof.measured or not prof.model_ms:
        return None
    total = sum(k.time_ms for k in prof.kernels if k.time_ms)
    share = launch_share(prof)
    # As the profile's shares: the profiler's busy time can exceed the model's median wall time.
    model_ms = max(prof.model_ms, (prof.vendor_ms or 0.0) + total)
    library = (prof.vendor_ms or 0.0) / model_ms
    headroom = sum(k.headroom_ms for k in searched) / model_ms
    if tunable_library and library >= OPTIONS_FIRST_SHARE:
        return OptionsFirst(f"library calls take {library:.0%} of the model's time", headroom)
    if launch_bound(prof):
        return OptionsFirst(f"{share:.0%} of the Triton kernels' time is in launch-bound kernels",
                            headroom, CUDA_GRAPHS)
    if total > 0 and share < 1.0 and headroom < OPTIONS_FIRST_HEADROOM:  # kernels that are not launch-bound, at the roofline
        return OptionsFirst(f"the search could save at most {headroom:.0%} of the model's time", headroom)
    return None


def launch_bound(prof: Any) -> bool:
    """Whether the host's launches set the model's speed: it runs at least
    :data:`OPTIONS_FIRST_LAUNCHES` Triton kernels and launch-bound ones take at least
    :data:`OPTIONS_FIRST_SHARE` of their time. There CUDA graphs is the option that can win, and
    there the model arms' start matters: on the H200 processes of such a network that compiled it
    ran 3-7% slower than processes that loaded it from the cache (bf16), so the run's arms that
    compiled cold are replaced by cache loads (``ModelArms.warm_load``); where the GPU sets the
    speed no such offset showed, and the replacement's seconds are saved."""
    if not prof.measured:
        return False
    timed = sum(1 for k in prof.kernels if k.time_ms)
    return timed >= OPTIONS_FIRST_LAUNCHES and launch_share(prof) >= OPTIONS_FIRST_SHARE


def launch_share(prof: Any) -> float:
    """The share of the Triton kernels' measured time that is in launch-bound kernels (0 where
    none was timed)."""
    total = sum(k.time_ms for k in prof.kernels if k.time_ms)
    launch = sum(k.time_ms for k in prof.kernels if k.time_ms and k.bound == "launch")
    return launch / total if total > 0 else 0.0


def options_later(measured: list[Any], left: float | None, compile_s: float | None, template_s: float,
                  need_s: float, candidate_s: float = 0.0, load_s: float = 0.0) -> tuple[list[str], float]:
    """The compiler's options that, measured before the search, did not start (none did: the
    share the search keeps left each too little, or the GPU no room), to measure after it instead,
    and the seconds the quickest of them needs there: its compile (estimated from ``compile_s``
    and ``template_s``) then its check and rounds (``need_s``), and at least what an option needs
    to start at all (:func:`option_start_s`, ``candidate_s`` the search's estimate of a candidate's
    gates in processes). ``([], 0.0)`` where that does not fit in what is ``left``
    of the search's time (None: no limit) beyond the ``MIN_SEARCH_S`` the search keeps, as the
    search's time would then be given up for nothing. On the H200 a small CNN's options, sent
    first, found 28 s where one needs 30 and none started; the search then ended with 39 s unused
    (small_cnn bf16, 12-04; on 12-03 its max-autotune was verified at 1.285x). ``load_s``: what a
    cold option arm's replacement by a cache load adds (``ModelArms.warm_load_s``)."""
    from kernelopt_bot.compile_options import (
        COMPILE_OPTIONS,
        MIN_BENCH_S,
        compile_estimate_s,
        not_started,
    )

    waiting = not_started(measured)
    quickest = min((compile_estimate_s(o, compile_s, template_s) + load_s for o in COMPILE_OPTIONS
                    if o.label in waiting), default=None)
    if quickest is None:
        return [], 0.0
    need = max(quickest + need_s, option_start_s(candidate_s, compile_s) + need_s - MIN_BENCH_S)
    if left is not None and need > left - MIN_SEARCH_S:
        return [], 0.0
    return waiting, need


def search_keep_s(headroom: float, left: float | None, gamma: float, candidate_s: float,
                  after_s: float = 0.0, searched: bool = True) -> tuple[float, float]:
    """What the compiler's options, measured first, leave of the search's wall time (``left``):
    ``(keep, floor)``. An option starts only with ``keep`` to spare: the share of the model's time
    the search could save at most (``headroom``, of ``left``), at least ``OPTIONS_FIRST_SEARCH_S``.
    A started option is compiled and timed into that, but never into ``floor``: where the
    searched kernels alone could pass the performance gate (a headroom of at least ``1 - 1/gamma``
    of the model's time), one kernel's first timed variants (``OPTIONS_FIRST_SEARCH_S``) and one
    tuner candidate's gates (``candidate_s``); else nothing, as a compiled option left untimed is
    the larger loss (mlp bf16 on the H200: max-autotune compiled and was not timed, and the
    search used 17 s). On the H200 the options of a convolution + group norm model left the
    search 4 s where a candidate takes 10: its Triton kernels, 43% of the time with a headroom of
    14%, were not searched (fp32, 12-04), where in bf16 the search's candidate gave 1.038x.
    Both come on top of ``after_s``, what the search holds back for the final benchmark
    (:func:`after_search_s`), where the search may need it. Where no kernel is worth a search
    (``searched`` false: each below the share threshold), the search keeps nothing, nor does the
    final benchmark beyond its reserve (an empty pack compiles nothing; the options may be timed
    in that reserve, which the baseline's rounds barely need):
    on the H200 a 37 ms fp32 transformer block's max-autotune compiled and was not timed, with
    13 s of the search's time and 20 s of the reserve left where its timing needed 19 s and the
    final benchmark 6 s; the search then took 0.3 s (gpt_block, 12-04)."""
    if left is None or not searched:
        return 0.0, 0.0
    floor = OPTIONS_FIRST_SEARCH_S + candidate_s if headroom >= 1.0 - 1.0 / gamma else 0.0
    keep = after_s + max(OPTIONS_FIRST_SEARCH_S, headroom * left, floor)
    return keep, after_s + floor if floor else 0.0


def option_start_s(candidate_s: float, compile_s: float | None) -> float:
    """The least time an option starts with (beside its check and rounds beyond MIN_BENCH_S):
    MIN_OPTION_S, or where no compile estimate sizes it (``compile_s`` None) the larger of that
    and the search's estimate for a candidate whose gates start processes (``candidate_s``: such a
    candidate's arm compiles and times the whole model as an option's does). With an estimate the
    options' waves are sized by it, as is what the search leaves them: a candidate's gates in
    processes (24-69 s each in issue 12's measurements) would keep every option from starting
    after an LLM search."""
    from kernelopt_bot.compile_options import MIN_OPTION_S

    return MIN_OPTION_S if compile_s is not None else max(MIN_OPTION_S, candidate_s)


def recommend_in_time(model_arms: Any, tgt: Any, gamma: float, rounds: int, budget: Any,
                      candidate_s: float, keep_s: float = 0.0, model_ms: float | None = None,
                      compile_s: float | None = None, template_s: float = 0.0, reserve_s: float = 0.0,
                      floor_s: float = 0.0, final_need_s: Callable[[], float] | None = None,
                      options: tuple[Any, ...] | None = None, cached: frozenset[str] = frozenset()) -> list[Any]:
    """The compiler's options, started only with time for them before the search's deadline
    less ``keep_s`` (kept for what comes after them: the search, where they go first), by
    :func:`option_start_s` (where only the final benchmark follows them, ``final_need_s`` given:
    before the run's end less what that benchmark needs), and cut off at the search's deadline
    less ``floor_s`` (what a started option leaves the search whatever it costs the option,
    :func:`search_keep_s`). A compiled
    option may also be checked and timed in the final benchmark's ``reserve_s`` less what that
    benchmark still needs (``final_need_s()``: :func:`~kernelopt_bot.final_bench.final_need_s`).
    ``compile_s``: an option's compile, estimated, and ``template_s`` what max-autotune's template
    tuning adds to it (no option starts whose compile and timing cannot finish, and no more
    compile at once than can then be timed). ``options``: those to measure (default: all of
    :data:`~kernelopt_bot.compile_options.COMPILE_OPTIONS`)."""
    from kernelopt_bot.compile_options import COMPILE_OPTIONS, MIN_OPTION_S, bench_need_s, recommend

    extra = option_start_s(candidate_s, compile_s) - MIN_OPTION_S

    def deadline_left() -> float | None:
        left = budget.wall_s_left()
        return None if left is None else left - keep_s

    def time_left() -> float | None:
        # Where only the final benchmark follows (after the search, or with nothing to search), an
        # option may start as long as it finishes before what that benchmark needs of the run's
        # end: held to the search's deadline instead, a 40 MiB network's options found none to
        # start and the run ended with 44 s of its 110 unused (tiny_vit bf16, H100 12-07h).
        left = deadline_left() if final_need_s is None else bench_left()
        return None if left is None else left - extra

    def search_left() -> float | None:  # what a started option may use of the search's time
        left = budget.wall_s_left()
        return None if left is None else left - floor_s

    def bench_left() -> float | None:
        left = run_s_left(budget, reserve_s)
        if left is None or final_need_s is None:
            return search_left()
        return left - final_need_s()

    # An option's arm must have compiled with its check and rounds still to run before their
    # deadline (``bench_left``, which may reach into the final benchmark's reserve): stopped at the
    # search's deadline instead, a small network's max-autotune compile was killed with 18 s of
    # the reserve unused, and no kernel to search (tiny_vit bf16 on the H200, 12-04). Where the
    # reserve may time them, never before the search's deadline: the final benchmark's need is
    # taken now at its largest (its arm still compiling), and shrinks once that arm is ready.
    left = bench_left()
    end = None if left is None else left - bench_need_s(model_ms, rounds)
    if end is not None and final_need_s is not None:
        end = max(end, search_left() or 0.0)
    with arms_end_by(model_arms, end):
        return recommend(model_arms, tgt, gamma=gamma, rounds=rounds, options=options or COMPILE_OPTIONS,
                         time_left=time_left, bench_left=bench_left, model_ms=model_ms, compile_s=compile_s,
                         template_s=template_s, cached=cached)


def run_s_left(budget: Any, reserve: float) -> float | None:
    """Seconds to the run's own end: the search's wall deadline plus the final benchmark's
    ``reserve`` (None: no wall limit)."""
    if budget.max_wall_s is None:
        return None
    return budget.max_wall_s + reserve - budget.elapsed_s()


@dataclass
class OptionSteps:
    """The compiler's options within one run, and the narrow context their steps share: measured
    before the search where the profile says so (:meth:`before_search`, :func:`options_first`),
    else after it, and after it too where none could start before it (:meth:`after_search`); the
    best verified one with the final pack on top at the end (:meth:`with_pack`).
    ``enabled``: the run measures them (a GPU, and the plan asks for them); ``compile_s``: the
    capture's compile, seconds (0: unknown), from which an option's is estimated
    (:data:`OPTION_COMPILE_FACTOR`), ``template_s`` what max-autotune's template tuning adds;
    ``model_ms``: the profiled model's time a call (None: not profiled), which sizes their checks
    and rounds; ``candidate_s(trusted)``: the search's estimate of a candidate's gates."""

    model_arms: Any
    target: Any
    budget: Any
    gamma: float
    rounds: int
    reserve: float  # the final benchmark's, seconds
    compile_s: float
    template_s: float
    model_ms: float | None
    candidate_s: Callable[[bool], float]
    log: Callable[[str], None]
    enabled: bool = True
    went_first: bool = False
    later: list[str] = field(default_factory=list)  # what went first and did not start
    later_need_s: float = 0.0  # what the quickest of them needs after the search (options_later)
    # Left unmeasured by the budget though others started (compile_options.short_of_time): measured
    # after the search only in time it leaves unused (none is held back from it for them), those
    # that compiled (``cached``) loading from the compiler's cache.
    leftover: list[str] = field(default_factory=list)
    cached: frozenset[str] = frozenset()
    lead: str | None = None  # the option measured first (OptionsFirst.lead)
    measured_after: bool = False

    @property
    def load_s(self) -> float:
        """What a cold option arm's replacement by a cache load adds to its start (0 where the
        model arms replace none: ``ModelArms.warm_load``)."""
        return self.model_arms.warm_load_s()

    @property
    def option_compile_s(self) -> float | None:
        """An option's compile, estimated (sizes their waves; None: unknown); ``recommend`` adds
        its replacement's load (:attr:`load_s`), which no option's ``compile_scale`` scales."""
        return OPTION_COMPILE_FACTOR * self.compile_s if self.compile_s else None

    @property
    def need_s(self) -> float:
        """An option's check and timed rounds on this model."""
        from kernelopt_bot.compile_options import bench_need_s

        return bench_need_s(self.model_ms, self.rounds)

    @property
    def after_pending(self) -> bool:
        """Whether options are still to be measured after the search."""
        return self.held_for or (self.enabled and not self.measured_after and bool(self.leftover))

    @property
    def held_for(self) -> bool:
        """Whether the search holds time back for options measured after it: all of them, where
        none went first, or those that could not start before it (:attr:`later`)."""
        return self.enabled and not self.measured_after and (not self.went_first or bool(self.later))

    def before_search(self, first: OptionsFirst, final_s: float,
                      empty_pack_need: Callable[[], float] | None = None) -> list[Any]:
        """The options, measured before the search (:func:`options_first` said why, what the
        searched kernels could save and which option leads), leaving the search its share
        (:func:`search_keep_s`); ``final_s``: the final benchmark's check and rounds.
        ``empty_pack_need``: where no kernel is worth a search, what the final benchmark of the
        pack that then stays empty needs (:func:`~kernelopt_bot.final_bench.empty_pack_need_s`):
        the options may also be timed in the rest of its reserve; None: a search follows. Those
        that could not start and would fit after the search are left for :meth:`after_search`
        (:func:`options_later`)."""
        from kernelopt_bot.capture.settings import CompileSettings
        from kernelopt_bot.compile_options import COMPILE_OPTIONS, in_report_order, led_by, short_of_time

        searched = empty_pack_need is None
        self.went_first, self.lead = True, first.lead
        after_s = after_search_s(self.compile_s, self.reserve, False, None, final_s=final_s) if searched else 0.0
        keep, floor = search_keep_s(first.headroom, self.budget.wall_s_left(), self.gamma, self.candidate_s(True),
                                    after_s=after_s, searched=searched)
        spare = (f"none starts with less than {keep:.0f} s to spare for the search" if searched
                 else "no kernel takes enough of the model's time for a search")
        users = CompileSettings(self.model_arms.mode, self.model_arms.config)
        lead = next((f"; {o.label} first" for o in COMPILE_OPTIONS
                     if o.label == first.lead and not o.is_part_of(users)), "")
        self.log(f"measuring the compiler's own options (before the search: {first.why}{lead}; {spare})")
        measured = recommend_in_time(
            self.model_arms, self.target, self.gamma, self.rounds, self.budget, self.candidate_s(False),
            keep_s=keep, model_ms=self.model_ms, compile_s=self.option_compile_s, template_s=self.template_s,
            floor_s=floor, reserve_s=0.0 if searched else self.reserve, final_need_s=empty_pack_need,
            options=led_by(first.lead))
        measured = in_report_order(measured)
        if searched:
            self.later, self.later_need_s = options_later(
                measured, self.budget.wall_s_left(), self.option_compile_s, self.template_s, self.need_s,
                self.candidate_s(False), self.load_s)
            if not self.later:
                self.leftover, self.cached = short_of_time(measured)
        if self.later:
            self.log(f"    none started: {len(self.later)} measured after the search instead")
        elif self.leftover:
            self.log(f"    {len(self.leftover)} not measured for time: after the search, in what it leaves unused")
        return measured

    def search_holdback_s(self, final_s: float) -> float:
        """What the search leaves of its time for what comes after it (:func:`after_search_s`);
        where the options that went first wait for it, at least what the quickest of them needs
        (``later_need_s``: max-autotune's template tuning included where it is the one left), and
        the final benchmark's compile beyond its reserve (no option's arm may compile beside it
        where they waited for room). The search keeps ``MIN_SEARCH_S`` whatever that costs."""
        after = after_search_s(self.compile_s, self.reserve, self.held_for, None, self.need_s, final_s,
                               self.load_s)
        if self.later:
            after = max(after, self.later_need_s + OPTION_START_SLACK_S + max(0.0, final_s - self.reserve),
                        after_search_s(self.compile_s, self.reserve, False, None, final_s=final_s))
        left = self.budget.wall_s_left()
        return after if left is None else min(after, max(0.0, left - MIN_SEARCH_S))

    def after_search(self, before: list[Any], final_need: Callable[[], float]) -> list[Any]:
        """``before`` (the recommendations so far) with the options still pending measured, in
        what is left of the search's time and what the final benchmark will not need of its
        reserve (``final_need()``, :func:`~kernelopt_bot.final_bench.final_need_s`)."""
        from kernelopt_bot.compile_options import led_by, merge_recommendations

        if not self.after_pending:
            return before
        self.log("measuring the compiler's own options")
        again = {*self.later, *self.leftover}
        pending = tuple(o for o in led_by(self.lead) if not self.went_first or o.label in again)
        measured = recommend_in_time(
            self.model_arms, self.target, self.gamma, self.rounds, self.budget, self.candidate_s(False),
            model_ms=self.model_ms, compile_s=self.option_compile_s, template_s=self.template_s,
            reserve_s=self.reserve, final_need_s=final_need, options=pending, cached=self.cached)
        if self.leftover:  # one that finds no time again keeps its first reason (what its compile took)
            measured = [r for r in measured if r.option not in self.leftover or not r.never_started]
        self.measured_after = True
        return merge_recommendations(before, measured)

    def with_pack(self, pack: Any, result: Any) -> None:
        """The best verified option with the final ``pack`` on top, in what is left of the run's
        wall time (the search's budget and the final benchmark's reserve): the figure a user who
        takes both gets, beside each alone. Added to ``result``'s recommendations as
        ``"<option> + pack"``; whatever goes wrong in it is reported in its place (the run's own
        results are measured before it)."""
        from kernelopt_bot.compile_options import measure_with_pack
        from kernelopt_bot.errors import one_line
        from kernelopt_bot.result import WITH_PACK, Recommendation

        best = result.best_recommendation
        if not self.enabled or best is None or not len(pack) or result.speedup is None:
            return

        def time_left() -> float | None:
            return run_s_left(self.budget, self.reserve)

        self.log("measuring the best option with the pack")
        try:
            with arms_end_by(self.model_arms, time_left()):
                both = measure_with_pack(self.model_arms, self.target, best, pack, gamma=self.gamma,
                                         rounds=self.rounds, time_left=time_left, model_ms=self.model_ms)
        except Exception as exc:  # noqa: BLE001 - the run's own results are measured: this figure is extra
            both = Recommendation(best.option + WITH_PACK, None, False, f"not measured: {one_line(exc)}")
        if both is not None:
            self.log(f"    {both.option}: {'-' if both.speedup is None else f'{both.speedup:.3f}x'} {both.detail}")
            result.recommendations.append(both)
