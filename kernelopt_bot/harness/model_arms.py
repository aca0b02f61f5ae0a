"""The model arms of one target: long-lived baseline arms and short-lived candidate arms.

Starting a process and compiling the model costs seconds to tens of seconds. The baseline (and,
on a GPU, the second baseline that measures the noise floor) do not change while candidates for
the same target are verified, so they are started once and asked again and again; each candidate
gets its own fresh process, with its pack, compile mode and Inductor settings.

Arms that are not needed one after the other (the compiler's options, the final benchmark's arm)
compile at once, as many as the GPU's free memory holds (:meth:`ModelArms.room_for`), and nothing
is timed while any of them still compiles (:meth:`ModelArms.settle`): a compile beside a timed arm
takes the CPU its launches need, which on a launch-bound model is the whole measurement.

Where the run sets a memory budget (:attr:`ModelArms.memory_factor`: its GPU memory beyond the
processes' CUDA contexts, at most that many times what the compiled model alone holds), an arm
starts only where it fits in what is left of it, beside what this process holds: arms that would
not fit compile one after another instead of side by side, and the baselines compile beside the
search only where the search's own memory leaves room for them.

Where ``warm_load`` is on, every arm of a comparison starts alike: one that compiled cold is
replaced by a process that loads the compiled model from the cache, as the arms started after
the engine's capture do; :meth:`settle` and :meth:`baselines` start the replacements once every
first start is in, and let them load side by side.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

from kernelopt_bot.harness.arm_process import (
    WARM_LOAD_MIN_S,
    ArmError,
    ArmProcess,
    ArmSpec,
    compile_seconds,
    compiled_cold,
)
from kernelopt_bot.harness.failures import is_out_of_memory
from kernelopt_bot.pack.format import KernelPack

CONTEXT_MB = 600.0  # a CUDA context and Inductor's runtime, per process
ARM_HEADROOM = 1.5  # compiling (autotuning, workspaces) takes more than the arm holds once ready
RESERVE_MB = 2048.0  # left free for the engine's own work and the allocator's fragmentation
# A model is large when three copies of it (the baseline, its repeat, a candidate) would take more
# than this share of the device: the run then holds at most two model arms at once (one baseline,
# timed twice per round for the noise floor, and one other arm), so its peak stays under three
# times the model (issue 12), and a model that fills the GPU still fits.
LARGE_MODEL_SHARE = 1.0 / 3.0
LARGE_MODEL_ARMS = 2
# The memory budget never holds the run to less than this (MiB beyond the CUDA contexts): what a run
# holds whatever its model's size (flush buffers, library workspaces, kernel code, the engine's
# comparison pieces). On an H100 a 40 MiB network's run held 782 MiB beyond the contexts of four
# processes with its arms compiling one at a time (12-07g): three times such a model holds nothing
# more, and the budget only cost the options their time.
MIN_BUDGET_MB = 1024.0
BASELINE_STARTS = 2  # a baseline that failed this often is not started again: the failure is its answer
BASELINE_LABELS = ("baseline", "baseline-repeat")  # the arms that serve a whole run (a GPU's has both)


def _start_alike(workers: list[ArmProcess], *, ready: bool = True) -> None:
    """Every first start of ``workers`` in, then every cold one's replacement started, then (``ready``)
    each waited for: replacements load side by side, and none beside another arm's compile. A
    failure stays with its arm (raised again by its ``wait_ready``)."""
    steps = ("wait_compiled", "start_replacement") + (("wait_ready",) if ready else ())
    for step in steps:
        for worker in workers:
            with contextlib.suppress(ArmError):
                getattr(worker, step)()


def _mb(value: Any) -> float | None:
    """An arm's figure in MiB as a number, None where it said none (or nothing a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _idle_mb(info: dict[str, Any], peak: float) -> float:
    """MiB a ready arm holds between requests, as it said (``idle_gpu_mb``), at most ``peak``; one
    that does not say keeps its peak."""
    idle = _mb(info.get("idle_gpu_mb"))
    return peak if idle is None else min(idle, peak)


class ModelArms:
    """The model arms of one target on ``device``: each a process that compiled the model (with a pack,
    a compile mode or Inductor config), the baselines started on first use, all closed together."""

    def __init__(self, target: str, device: str, dtype: str, *, timeout_s: float = 600.0,
                 mode: str | None = None, config: dict[str, Any] | None = None, train: bool = False,
                 warm_load: bool | None = None) -> None:
        self.target, self.device, self.dtype, self.train = target, device, dtype, train
        self.timeout_s = timeout_s
        # Arms started from now on that compiled cold are replaced by a cache load
        # (:class:`~kernelopt_bot.harness.arm_process.ArmProcess`'s ``warm_load``), so every arm of a
        # comparison starts alike: ``kernelopt bench`` on a GPU, a run on a launch-bound model
        # (:func:`kernelopt_bot.schedule.launch_bound`). Off by default: it costs a process start.
        self.warm_load = bool(warm_load)
        # Option and pack arms must also be compiled by then (time.monotonic(); None: no deadline):
        # set by the run for a phase that must end on time; baseline arms keep their own limit.
        self.end_by: float | None = None
        self.mode, self.config = mode, dict(config or {})
        self._baselines: dict[str, ArmProcess] = {}
        self._started: list[ArmProcess] = []  # candidate arms, for settle() and room_for()
        # MiB an arm is expected to hold before any has said (the engine's own peak after its
        # compile: an arm loads, compiles and runs the same model); the ready baseline's figure
        # replaces it.
        self.arm_mb_hint: float | None = None
        self._one_baseline: bool | None = None  # decided when the baselines first start
        self._baseline_failures: list[ArmError] = []  # each failed start of a baseline arm
        self._repeat_retried = False  # the repeat ran short beside the others and started once more alone
        # The run's GPU memory beyond the CUDA contexts, in models (RunPlan.gpu_memory_factor): arms
        # start within it (room_for). None: no budget but the device's free memory (`kernelopt bench`).
        self.memory_factor: float | None = None

    def _spec(self, label: str, **overrides: Any) -> ArmSpec:
        fields: dict[str, Any] = {"mode": self.mode, "config": dict(self.config), "train": self.train}
        fields.update(overrides)
        return ArmSpec(label, self.target, self.device, self.dtype, **fields)

    def _baseline_labels(self) -> list[str]:
        first, repeat = BASELINE_LABELS
        return [first] + ([repeat] if self.device == "cuda" and not self.one_baseline else [])

    @property
    def one_baseline(self) -> bool:
        """A large model (:data:`LARGE_MODEL_SHARE`) gets one baseline arm, not two, and at most
        :data:`LARGE_MODEL_ARMS` model arms at once. Decided once, from what an arm is expected
        to hold (the engine's peak after its compile, or the ready baseline's figure), and at the
        latest when the baselines start (a repeat already running is not left out later); with
        nothing known then (``kernelopt bench``), two, and the repeat gives way if the device runs
        short (:meth:`one_baseline_only`)."""
        if self._one_baseline is None:
            large = self._is_large()
            if large is None:  # nothing known yet: not decided
                return False
            self._one_baseline = large
        return self._one_baseline

    def _is_large(self) -> bool | None:
        """Whether three arms of the model would overfill the device; ``None`` while no figure
        of what an arm holds is known."""
        if self.device != "cuda":
            return False
        held = self.arm_mb()
        if not held:
            return None
        from kernelopt_bot.harness.memory import device_memory

        info = device_memory(self.device)
        return info is not None and 3 * held > LARGE_MODEL_SHARE * info[1] / 2**20

    def holds(self, arms: int) -> bool | None:
        """Whether the device holds ``arms`` arms of the model taking turns, with :data:`RESERVE_MB`
        to spare: one at its peak (the ready baseline's ``gpu_mb``), the others idle (its
        ``idle_gpu_mb``; a large model's arm gives its cached blocks back between requests, one
        that does not say keeps its peak), each with its CUDA context (:data:`CONTEXT_MB`), beside
        what the rest of the device's users hold now: the memory in use that our ready arms, idle
        between requests, do not account for (this process, another job). ``None`` while no
        figure is known."""
        info = self.baseline_info()
        peak = self.arm_mb()
        if self.device != "cuda" or not peak:
            return None if self.device == "cuda" else True
        from kernelopt_bot.harness.memory import device_memory

        device = device_memory(self.device)
        if device is None:
            return True
        free_mb, total_mb = device[0] / 2**20, device[1] / 2**20
        idle = _idle_mb(info, peak)
        ready = [w for w in [*self._baselines.values(), *self._started] if w.ready and not w.closed and w.alive]
        ours = sum(_idle_mb(w.info, _mb(w.info.get("gpu_mb")) or peak) + CONTEXT_MB for w in ready)
        others = max(0.0, total_mb - free_mb - ours)
        more = max(0, arms - len(ready)) * (idle + CONTEXT_MB)  # the arms to start, idle
        return others + ours + more + (peak - idle) + RESERVE_MB <= total_mb

    def prestart(self, beside_mb: float = 0.0) -> bool:
        """Start the baseline arms compiling now, as many as the GPU's free memory and the run's
        memory budget hold beside this process and the ``beside_mb`` more it is to hold (the
        search's), and return at once: the search runs while they compile, and :meth:`baselines`
        later only waits for what is left of their start and starts the others, after the search
        gave its memory back. True where every baseline started."""
        if len(self._baseline_failures) >= BASELINE_STARTS:  # they will not start: baselines() says why
            return False
        self._decide_baselines()
        missing = self._missing_baselines()
        now = missing[:self._fit(len(missing), beside_mb, within_budget=True)]
        self._start(now)
        return len(now) == len(missing)

    def baselines_fit(self, beside_mb: float = 0.0, *, within_budget: bool = True) -> bool:
        """Whether the baselines not running may all start now, beside this process and the
        ``beside_mb`` more it is to hold (:meth:`room_for`; ``within_budget=False``: the
        device's free memory alone)."""
        missing = self._missing_baselines()
        return self._fit(len(missing), beside_mb, within_budget=within_budget) >= len(missing)

    def _decide_baselines(self) -> None:
        """How many baselines (:attr:`one_baseline`), decided for good once any is to start."""
        if self._one_baseline is None:
            self._one_baseline = bool(self._is_large())

    def _missing_baselines(self) -> list[str]:
        return [label for label in self._baseline_labels()
                if label not in self._baselines or not self._baselines[label].alive]

    def _start(self, labels: list[str]) -> None:
        for label in labels:
            worker = self._baselines.get(label)
            if worker is not None:
                worker.close()
            self._baselines[label] = ArmProcess(self._spec(label), start_timeout_s=self.timeout_s,
                                                warm_load=self.warm_load, load_s=self.warm_load_s())

    def _start_baselines(self) -> None:
        """Start the baselines not running, together where the memory budget holds them, else as
        many as it holds, each batch compiled before the next starts (a baseline still compiling
        from :meth:`prestart` is waited for first where the budget holds no more beside it)."""
        self._decide_baselines()
        for _ in range(2 * BASELINE_STARTS):  # a baseline that dies once ready is not started without end
            missing = self._missing_baselines()
            if not missing:
                return
            room = self.room_for(len(missing))
            compiling = [w for w in self._baselines.values() if w.compiling]
            if room == 0 and compiling:
                _start_alike(compiling)
                if any(not w.ready for w in compiling):
                    return  # a failed start: baselines() raises it (or gives the repeat up)
                continue
            now = missing[:max(1, room)]
            self._start(now)
            if len(now) == len(missing):
                return
            _start_alike([self._baselines[label] for label in now])  # compiled before the next start
            if any(not self._baselines[label].ready for label in now):
                return  # a failed start: baselines() raises it (or gives the repeat up), the rest wait

    def baselines(self) -> tuple[ArmProcess, ArmProcess | None]:
        """The baseline and, on a GPU, the repeat baseline (started together, compiled in parallel;
        ``None`` for a large model: :attr:`one_baseline`). A failed start is tried once more on
        the next call (out of memory beside an arm that has since ended, say); after
        :data:`BASELINE_STARTS` failures the last one is raised again without a new start: the
        compiler options, the final benchmark and gate 4 each ask, and a model whose compile
        fails would otherwise be compiled for each of them."""
        if len(self._baseline_failures) >= BASELINE_STARTS:
            raise self._baseline_failures[-1]
        short = [label for label, w in self._baselines.items()
                 if w.start_error is not None and is_out_of_memory(str(w.start_error))]
        if BASELINE_LABELS[1] in self._baselines and short:
            # The device did not hold both beside the other arms: the repeat starts again alone where
            # three arms fit taking turns, else gives its memory back (or is not started again), and
            # the first, if it ran short, starts again alone.
            first = self._baselines.get(BASELINE_LABELS[0])  # gone where it ran short on an earlier call
            if short == [BASELINE_LABELS[1]] and first is not None and first.ready:
                self._baselines.pop(BASELINE_LABELS[1]).close()
                if not self._repeat_alone():
                    self.one_baseline_only()
            else:
                self.one_baseline_only()
        self._start_baselines()
        _start_alike(self.compiling(), ready=False)  # every arm's first start, so none loads beside a compile
        for label in self._baseline_labels():
            if label not in self._baselines:  # not started: the wait before it ended on another's failure
                self._start([label])
            worker = self._baselines[label]
            if not worker.ready:
                try:
                    worker.wait_ready()
                except ArmError as exc:
                    self._baselines.pop(label).close()  # a later call starts it afresh
                    if label != "baseline" and is_out_of_memory(str(exc)) and self._baselines["baseline"].ready:
                        if not self._repeat_alone():
                            self.one_baseline_only()  # the device holds one baseline: it is timed twice
                        continue
                    if not is_out_of_memory(str(exc)):  # out of memory may pass once memory is freed
                        self._baseline_failures.append(exc)
                    raise
                except BaseException:
                    self._baselines.pop(label).close()
                    raise
        return self._baselines["baseline"], self._baselines.get("baseline-repeat")

    def _repeat_alone(self) -> bool:
        """The repeat baseline, which ran out of memory compiling beside the other arms, started once
        more once none compiles, where the ready baseline's figures say the device holds three arms
        taking turns (:meth:`holds`: a large model's idle arm gives its memory back, and on the
        H100 a 30 GB model's three arms ran short only while compiling together, 12-06). False:
        not tried again, or it ran short again."""
        if self._repeat_retried or self.holds(3) is not True:
            return False
        self._repeat_retried = True
        _start_alike(self.compiling())  # nothing compiles beside it
        self._start_baselines()
        repeat = self._baselines[BASELINE_LABELS[1]]
        try:
            repeat.wait_ready()
        except ArmError as exc:
            self._baselines.pop(BASELINE_LABELS[1]).close()
            if not is_out_of_memory(str(exc)):
                raise
            return False
        return True

    def one_baseline_only(self) -> None:
        """From now on one baseline arm, timed twice per round: the repeat is closed, its memory
        given back (an arm that ran out of memory beside it starts again in its place)."""
        self._one_baseline = True
        repeat = self._baselines.pop(BASELINE_LABELS[1], None)
        if repeat is not None:
            repeat.close()

    def candidate(self, pack: KernelPack | None, *, label: str = "candidate", mode: str | None = None,
                  config: dict[str, Any] | None = None, wait: bool = True) -> ArmProcess:
        """A fresh arm with ``pack`` installed (and optionally its own mode/settings); the caller
        closes it (it is a context manager). ``wait=False`` returns it while it still compiles:
        the caller calls ``wait_ready`` when it needs it (and closes it either way)."""
        overrides: dict[str, Any] = {"pack": pack.to_json() if pack is not None else None}
        if mode is not None:
            overrides["mode"] = mode
        if config is not None:
            overrides["config"] = {**self.config, **config}
        limit = self.candidate_limit_s()
        worker = ArmProcess(self._spec(label, **overrides), start_timeout_s=limit,
                            budget_limited=limit < self.timeout_s, warm_load=self.warm_load,
                            load_s=self.warm_load_s())
        self._started = [w for w in self._started if not w.closed] + [worker]
        if not wait:
            return worker
        try:
            worker.wait_ready()
        except BaseException:
            worker.close()
            raise
        return worker

    def arm_mb(self) -> float | None:
        """MiB an arm of this model holds at its start's peak: the ready baseline's figure, else
        :attr:`arm_mb_hint`; None while neither is known."""
        return self.baseline_info().get("gpu_mb") or self.arm_mb_hint

    def baseline_info(self) -> dict[str, Any]:
        """What the baseline arm reported when ready (``gpu_mb``: the compiled model's GPU memory),
        or ``{}`` before that."""
        base = self._baselines.get("baseline")
        return base.info if base is not None and base.ready else {}

    def compiling(self) -> list[ArmProcess]:
        """The arms (baselines included) still compiling."""
        return [w for w in [*self._baselines.values(), *self._started] if w.compiling]

    def candidate_limit_s(self) -> float:
        """Seconds a candidate or option arm started now may take to compile: its own limit, and
        no later than ``end_by`` (at least a second)."""
        if self.end_by is None:
            return self.timeout_s
        return max(1.0, min(self.timeout_s, self.end_by - time.monotonic()))

    def settle(self) -> None:
        """Wait until no arm compiles any more (each is ready or has failed; a failure stays with
        the arm, for its owner's ``wait_ready``): call before timing anything."""
        _start_alike(self.compiling())

    def warm_load_s(self) -> float:
        """Seconds a cold arm's warm replacement is expected to add to its start (0 where arms are
        not replaced): the ready baseline's start where it loaded from the cache (a start of the
        same model from the same cache), at least :data:`~kernelopt_bot.harness.arm_process.WARM_LOAD_MIN_S`."""
        if not self.warm_load:
            return 0.0
        info = self.baseline_info()
        replaced = info.get("warm_load")
        if isinstance(replaced, dict):
            loaded = compile_seconds({"compile_s": replaced.get("load_s")})
        else:
            loaded = compile_seconds(info) if info and not compiled_cold(info) else None
        return max(WARM_LOAD_MIN_S, loaded or 0.0)  # as the arm itself plans it (ArmProcess.load_s)

    def room_for(self, wanted: int, beside_mb: float = 0.0, *, within_budget: bool = True) -> int:
        """How many of ``wanted`` new arms may start compiling now. On a GPU, each needs about what
        the ready baseline arm holds (times :data:`ARM_HEADROOM`, plus a context), arms still
        compiling count as already holding theirs, and :data:`RESERVE_MB` stays free; within the
        run's memory budget (:meth:`_budget_room`; ``beside_mb``: what this process is about to
        hold beyond what it holds now). At least one when nothing compiles, so the run goes on
        (an out-of-memory error is then reported as an infrastructure failure, not a verdict)."""
        fit = self._fit(wanted, beside_mb, within_budget=within_budget)
        if self.device != "cuda":
            return fit
        if self.one_baseline:  # a large model: the plan's cap and the device's memory, no floor
            if fit == 0 and within_budget and not self.compiling():
                return min(1, self._fit(wanted, beside_mb, within_budget=False))  # the budget never stops the run
            return fit
        return max(fit, 0 if self.compiling() else min(1, wanted))

    def _fit(self, wanted: int, beside_mb: float, *, within_budget: bool) -> int:
        """:meth:`room_for` without its floor: how many of ``wanted`` arms the device's free memory
        (and, ``within_budget``, the run's memory budget) hold now."""
        if self.device != "cuda" or wanted <= 0:
            return max(0, wanted)
        held = self.arm_mb()
        if not held:
            return wanted
        from kernelopt_bot.harness.memory import device_memory

        info = device_memory(self.device)
        if info is None:
            return wanted
        free_mb = info[0] / 2**20
        per_arm = held * ARM_HEADROOM + CONTEXT_MB
        fit = int((free_mb - RESERVE_MB - beside_mb) // per_arm) - len(self.compiling())
        budget = self._budget_room(held, beside_mb) if within_budget else None
        if budget is not None:
            fit = min(fit, budget)
        if self.one_baseline:  # a large model: at most LARGE_MODEL_ARMS arms hold it at once
            live = [w for w in [*self._baselines.values(), *self._started] if not w.closed]
            fit = min(fit, LARGE_MODEL_ARMS - len(live))
        return min(wanted, max(0, fit))

    def _budget_room(self, model_mb: float, beside_mb: float) -> int | None:
        """How many more arms the run's memory budget (:attr:`memory_factor` times ``model_mb``,
        what the compiled model alone holds, at least :data:`MIN_BUDGET_MB`) has room for, each counted at what its compile is
        expected to hold (:data:`ARM_HEADROOM` times the model), beside this process's allocator
        (and ``beside_mb`` more), each ready arm's idle figure and each compiling arm's expected
        one. None where the run sets no budget. On the H100 a softmax's run held 6.3x its model
        beyond the contexts while two baselines compiled beside the search (12-07)."""
        if self.memory_factor is None:
            return None
        import torch

        # The allocator reuses what it has cached before it asks for more: this process at its
        # coming peak holds what it reserved now, or what is in use now and ``beside_mb`` more.
        own = max(torch.cuda.memory_reserved(), torch.cuda.memory_allocated() + beside_mb * 2**20) / 2**20
        per_arm = ARM_HEADROOM * model_mb
        arms = 0.0
        for worker in [*self._baselines.values(), *self._started]:
            if worker.compiling:
                arms += per_arm
            elif worker.ready and worker.alive and not worker.closed:
                arms += _idle_mb(worker.info, _mb(worker.info.get("gpu_mb")) or model_mb)
        budget = max(self.memory_factor * model_mb, MIN_BUDGET_MB)
        return max(0, int((budget - own - arms) // per_arm))

    def close(self) -> None:
        for worker in self._started:
            worker.close()
        self._started.clear()
        for worker in self._baselines.values():
            worker.close()
        self._baselines.clear()

    def __enter__(self) -> ModelArms:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
