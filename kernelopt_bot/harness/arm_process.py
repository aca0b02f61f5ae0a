"""A compiled model in its own process, driven over a pipe.

Every end-to-end comparison (baseline against packed, baseline against baseline) runs each arm in
its own process: a clean ``torch.compile`` for the baseline, ``install(pack)`` then
``torch.compile`` for the packed arm. Nothing compiled for one arm can leak into the other
through Dynamo's or Inductor's in-process caches, every arm (model code from a PR, candidate
code) runs isolated (:func:`kernelopt_bot.harness.isolation.spawn_isolated`: no secrets, own
namespaces where the machine allows), and a crash or hang of an arm is reported, not inherited. The parent asks
the arms in turn, so only one uses the GPU at a time.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernelopt_bot.errors import KerneloptError, one_line
from kernelopt_bot.harness.failures import is_infrastructure_text
from kernelopt_bot.harness.isolation import Channel, describe_exit, spawn_isolated


class ArmError(KerneloptError):
    """An arm failed to start, crashed, hung, or raised."""


class ArmOursFailed(ArmError):
    """The arm failed for a reason of ours, not of what it runs: it could not be started, or we
    killed it at our deadline. Reported as such, never as a verdict on a candidate or an option."""


class ArmNotStarted(ArmOursFailed):
    """The arm's process could not be started (the machine refused a process: resources)."""


class ArmTimeout(ArmOursFailed):
    """The arm gave no answer within the time we gave it and was killed: our deadline, which says
    nothing about the model or a candidate by itself (reported as such, never as a verdict).
    ``budget``: that time was what the run's wall budget left (the phase's deadline), not the
    arm's own limit: on the H200 a network's max-autotune compile stopped at its phase's end was
    reported as the option having "failed" (tiny_vit bf16, 12-04)."""

    def __init__(self, message: str, *, budget: bool = False) -> None:
        super().__init__(message)
        self.budget = budget

    def __reduce__(self) -> tuple[Any, ...]:  # picklable like any exception
        return _arm_timeout, (str(self), self.budget)


def _arm_timeout(message: str, budget: bool) -> ArmTimeout:
    return ArmTimeout(message, budget=budget)


def failed_on_our_side(exc: ArmError) -> bool:
    """Whether an arm's error is ours, not a verdict on what it runs: it could not be started or
    we killed it (:class:`ArmOursFailed`), or its text says it ran out of memory or timed out."""
    return isinstance(exc, ArmOursFailed) or is_infrastructure_text(str(exc))


class ArmRaised(ArmError):
    """The arm's own code raised (the model, or a kernel a pack put in), as opposed to the arm
    dying or hanging: ``reason`` is the exception's one line, without the traceback's tail."""

    def __init__(self, label: str, payload: str) -> None:
        super().__init__(f"{label}: {payload}")
        self.label, self.payload = label, payload
        self.reason = payload.split(" | ")[0]

    def __reduce__(self) -> tuple[type[ArmRaised], tuple[str, str]]:  # picklable like any exception
        return ArmRaised, (self.label, self.payload)


class Arm(Protocol):
    """What gates 3 and 4 ask of a compiled model: a :class:`ArmProcess` (its own process) or an
    :class:`~kernelopt_bot.harness.swap_arm.EngineArm` (the engine's model, a kernel swapped in).
    ``where`` says which ("process" or "engine"): only numbers measured on processes are reported."""

    where: str
    info: dict[str, Any]
    ready: bool

    def request(self, *message: Any, timeout_s: float = ...) -> Any: ...

    def wait_ready(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass
class ArmSpec:
    """What one arm compiles: the target, and optionally a pack, a compile mode and Inductor
    config settings (``{"coordinate_descent_tuning": True}``, ``{"force_disable_caches": True}``)
    applied for the whole life of the arm's process."""

    label: str
    target: str
    device: str
    dtype: str
    pack: dict[str, Any] | None = None
    mode: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    train: bool = False  # each call is a training step (targets.Target.run)


def flatten_outputs(out: Any, device: str = "cpu") -> list[Any]:
    """A model's output tensors (nested tuples, lists, dicts) as one flat list, on ``device``
    (the CPU for sending through a pipe), in the order a training step labels them."""
    from kernelopt_bot.training import tensors

    return [t.detach().to(device) for t in tensors(out)]


@dataclass
class CompiledArm:
    """A model arm's compiled target, as it stands ready: what the arm times and what it reports."""

    target: Any  # targets.Target
    compiled: Any  # the compiled call
    configs: dict[str, str]  # each kernel's launch config as this compile settled it
    cache: dict[str, int]  # the compiler's cache: graphs loaded from it, compiled anew, or not cacheable
    cache_keys: list[dict[str, Any]]  # each cache lookup's key, hit or miss, and what went into the key
    # Seconds of the start's parts: loading the target (its module run, the model built and put on
    # the device, the CUDA context made), the setup (compile settings, the pack installed, the
    # first inputs made) and the first call (Dynamo's trace, the compile or the cache's load, the
    # kernels' loads and their first run, to its end on the GPU).
    phases: dict[str, float] = field(default_factory=dict)
    # The setup's parts: settings, pack, inputs, hooks (on the H100 the setup took 5.9 s where the
    # CPU takes 1.0 s: which part?).
    setup_parts: dict[str, float] = field(default_factory=dict)


def compile_arm(spec: ArmSpec) -> CompiledArm:
    """Load ``spec``'s module target, compile it as the arm's settings say (the target file's own
    compile settings unless the spec names some; the pack installed first) and run it once."""
    import torch

    from kernelopt_bot.capture.chosen_configs import seeing_kernels
    from kernelopt_bot.capture.recorder import compile_fresh, counting_cache_use, recording_cache_keys
    from kernelopt_bot.capture.settings import target_settings
    from kernelopt_bot.device import prepare_device
    from kernelopt_bot.pack import runtime
    from kernelopt_bot.pack.format import KernelPack
    from kernelopt_bot.targets import load_target

    # The engine checked the target runs eagerly; an arm does not run it eagerly again (on a large
    # model that is the arm's memory peak, beside the others).
    began = time.monotonic()
    target = load_target(spec.target, spec.device, spec.dtype, check=False, train=spec.train)
    prepare_device(target.device)
    loaded = time.monotonic()
    # The compiler's modules, paid for here by name: on the H100 an arm's setup took 6-10 s where
    # the CPU takes 1 s, in whichever later step first imported them (the pack's install, or the
    # hooks), so their cost is a part of its own.
    import torch._inductor.codecache
    import torch._inductor.compile_fx
    import torch._inductor.runtime.triton_heuristics

    imported = time.monotonic()
    if target.device == "cuda":  # Triton's driver (its launcher stub, the device's properties)
        import triton

        triton.runtime.driver.active.get_current_device()
    driven = time.monotonic()
    mode, config = spec.mode, spec.config
    own = target_settings(target.torch_compile, spec.target)
    if mode is None and not config and own is not None:  # as the target's file says
        mode, config = own.mode, own.config
    if target.train:
        from kernelopt_bot.training import COMPILE_CONFIG

        config = {**config, **COMPILE_CONFIG}
    if config:
        torch._inductor.config.patch(config).__enter__()  # this process only, for its lifetime
    settled = time.monotonic()
    if spec.pack is not None:
        runtime.install(KernelPack.from_json(spec.pack))
    packed = time.monotonic()
    inputs = target.make_inputs(0)
    made = time.monotonic()
    with seeing_kernels() as seen, counting_cache_use() as cache, recording_cache_keys() as keys:
        compiled = compile_fresh(target.model, mode=mode)
        called = time.monotonic()
        target.run(compiled, inputs)
        if target.device == "cuda":  # the first call's GPU work is part of it
            torch.cuda.synchronize()
    done = time.monotonic()
    phases = {"target": round(loaded - began, 2), "setup": round(called - loaded, 2),
              "first_call": round(done - called, 2)}
    setup_parts = {"compiler": round(imported - loaded, 2), "driver": round(driven - imported, 2),
                   "settings": round(settled - driven, 2), "pack": round(packed - settled, 2),
                   "inputs": round(made - packed, 2), "hooks": round(called - made, 2)}
    return CompiledArm(target, compiled, seen.configs(), dict(cache), keys, phases, setup_parts)


def _serve(spec: ArmSpec, conn: Channel) -> None:
    started = time.monotonic()  # what the arm's start costs, torch's import included (the options' estimates)
    import torch

    from kernelopt_bot.harness.cpu_pin import time_on_one_core
    from kernelopt_bot.harness.timing import time_model, time_request
    from kernelopt_bot.pack import runtime
    from kernelopt_bot.target_kinds import target_kind

    if target_kind(spec.target) != "module":
        return _serve_kernel_target(spec, conn)
    imported = time.monotonic()
    arm = compile_arm(spec)
    target, compiled = arm.target, arm.compiled
    if target.device == "cuda":  # compiled (with every core): its timing keeps to one (harness.cpu_pin)
        time_on_one_core()
    peak_mb = torch.cuda.max_memory_reserved() / 2**20 if target.device == "cuda" else None
    idle_mb = _idle(target.device)
    conn.send(("ready", {
        "applied": [a.kernel_name for a in runtime.applied()],
        "skipped": [f"{s.kernel_name}: {s.reason}" for s in runtime.skipped()],
        "configs": arm.configs,  # each kernel's launch config as this compile settled it
        # What this arm holds on the GPU (model, inputs, compiled workspace; the CUDA context not
        # included): the target's model arms size how many arms may compile at once from it.
        "gpu_mb": peak_mb,
        "idle_gpu_mb": idle_mb,  # what it keeps between requests (a large model's arm gives the rest back)
        "compile_s": round(time.monotonic() - started, 2),  # torch's import, the target's load, the compile
        "cache": arm.cache,  # the compiler's cache: graphs loaded from it, compiled anew, or not cacheable
        "cache_keys": arm.cache_keys,  # under which keys (a cold start beside a stored compile: why it missed)
        # where the start's seconds went (on the H200 a cache load took 10-19 s: which part?)
        "start_phases_s": {"import": round(imported - started, 2), **arm.phases},
        "setup_parts_s": arm.setup_parts,
    }))
    while True:
        op, *args = conn.recv()
        if op == "quit":
            return
        if op == "time":  # ("time", seed, reps[, part[, hide_host]]): see harness.timing.time_request
            seed, reps, part, hide_host = time_request(args)
            inputs = target.make_inputs(seed)
            timing = time_model(target.device, functools.partial(target.run, compiled, inputs, part=part),
                                reps=reps, hide_host=hide_host)
            del inputs
            _idle(target.device)
            conn.send(("ok", timing.reply()))
        elif op == "outputs":
            (seed,) = args
            # Made ready to send (large outputs copied once, straight from the GPU, into sealed
            # files), then the GPU's memory given back, then the reply: the parent asks the next
            # arm as soon as this one answers, and a 30 GB model's next arm ran out of memory while
            # this one, its outputs still on the GPU, was sending (H100, 12-06). Copied to the host
            # first, then into the files, an answer of 14 GiB took 16 s.
            message = conn.prepare(("ok", target.compared_outputs(compiled, target.make_inputs(seed))))
            try:
                _idle(target.device)
            except BaseException:
                message.close()
                raise
            conn.send_prepared(message)
        else:
            conn.send(("error", f"unknown request {op!r}"))


# Every arm gives its allocator's cached blocks, and its L2 flush buffer, back between requests:
# the arms of a comparison take turns on the GPU, so an idle arm need hold only what persists (the
# weights, the compiled model's constants), and the free memory the next arms are sized by
# (:meth:`~kernelopt_bot.harness.model_arms.ModelArms.room_for`) says so. On the H100 three arms of
# the 30 GB RMS norm, each keeping its 28 GB peak cached while idle, left the third out of memory
# (12-06); on small models the arms that kept theirs were most of the run's peak, 2.2x the model
# each beside the timed one (attention pooling, 12-07c). A request's first call allocates anew,
# before anything is timed.
def _idle(device: str) -> float | None:
    """Between requests: the arm's cached blocks and flush buffer back to the GPU; returns the MiB
    the arm then holds (None without CUDA). No garbage collection: a request's tensors go when
    their last reference does, and a full collection in an arm (torch and Inductor loaded) takes
    0.25 s or more, on every request: on the H100 an option's check and timing took 27 s where
    they had taken 4 (12-07d)."""
    if device != "cuda":
        return None
    import torch

    from kernelopt_bot.harness.timing import release_flushers

    release_flushers()
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved() / 2**20


def _serve_kernel_target(spec: ArmSpec, conn: Channel) -> None:
    """An arm for a kernel target (a launcher file, a Helion kernel): the file as it is in its
    folder (an original, or a copy with a patch applied), run as written."""
    import torch

    from kernelopt_bot.harness.cpu_pin import time_on_one_core
    from kernelopt_bot.harness.timing import time_model
    from kernelopt_bot.helion_targets import load_helion
    from kernelopt_bot.launchers import load_launcher
    from kernelopt_bot.target_kinds import target_kind

    load = load_launcher if target_kind(spec.target) == "triton" else load_helion
    target = load(spec.target, spec.device, spec.dtype)
    target.run(0)
    if target.device == "cuda":
        time_on_one_core()
    conn.send(("ready", {"applied": [], "skipped": [],
                         "gpu_mb": torch.cuda.max_memory_reserved() / 2**20 if target.device == "cuda" else None}))
    while True:
        op, *args = conn.recv()
        if op == "quit":
            return
        if op == "time":
            seed, reps = args
            inputs = target.make_inputs(seed)
            conn.send(("ok", time_model(target.device, functools.partial(target.run, seed, None, inputs, sync=False),
                                        reps=reps, hide_host=True).reply()))
        elif op == "outputs":
            conn.send(("ok", flatten_outputs(target.run(args[0]))))
        else:
            conn.send(("error", f"unknown request {op!r}"))


def worker_main(conn: Channel, spec: ArmSpec) -> None:
    """Child entry point: serve requests until told to quit; report any failure and exit."""
    try:
        _serve(spec, conn)
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
        tail = traceback.format_exc().strip().splitlines()[-3:]
        with contextlib.suppress(OSError, ValueError):
            conn.send(("error", one_line(exc) + " | " + " / ".join(tail)))
    finally:
        conn.close()


def compile_seconds(info: dict[str, Any] | None) -> float | None:
    """How long an arm took from its start to ready, as its ready message (``info``) says
    (``compile_s``: torch's import, the target's load, the compile and its first call), or None
    where it said nothing usable: an arm runs the pack's kernels, so what it says is checked like
    any input (a finite, non-negative number)."""
    value = (info or {}).get("compile_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


# A warm replacement is not started with less of the start's limit left than this (or than the
# load is expected to take): it imports torch, loads the target and the compiled model again (a
# few seconds on the H200); the cold arm answers instead, and says so.
WARM_LOAD_MIN_S = 10.0
# What stopping a ready arm may take (it is asked to quit, then killed): a replacement's start
# counts it, since the cold process is stopped before its replacement starts.
STOP_WAIT_S = 10.0


def cache_counts(info: dict[str, Any] | None) -> dict[str, int] | None:
    """The compiler-cache counts of an arm's ready message (``info["cache"]``:
    :func:`~kernelopt_bot.capture.recorder.counting_cache_use`): ``hit``, ``miss``, ``bypass`` and
    ``unstored``, one the message left out read as 0; None where it says none or they are not counts."""
    cache = (info or {}).get("cache")
    if not isinstance(cache, dict):
        return None
    counts = {key: cache.get(key, 0) for key in ("hit", "miss", "bypass", "unstored")}
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts.values()):
        return None
    return counts


def compiled_cold(info: dict[str, Any] | None) -> bool:
    """Whether an arm compiled some graph anew and stored it in the compiler's cache, as its ready
    message (``info``) says: a process started after it would load that graph instead. A graph the
    cache cannot hold ("bypass") or could not store is compiled anew by every arm alike: not cold."""
    counts = cache_counts(info)
    return counts is not None and counts["miss"] > counts["unstored"]


def effective_start(info: dict[str, Any] | None) -> str | None:
    """How the process that answers for an arm started, as its ready message (``info``) says:
    ``"compiled"`` where it compiled some graph itself (anew, or one the cache cannot hold),
    ``"loaded"`` where every graph came from the compiler's cache (a cold arm's replacement
    included: ``cache`` is the replacement's own), None where it does not say."""
    counts = cache_counts(info)
    if counts is None:
        return None
    if counts["miss"] or counts["bypass"]:
        return "compiled"
    return "loaded" if counts["hit"] else None


def started_unlike(info: dict[str, Any] | None, baseline: dict[str, Any] | None) -> str | None:
    """Where an arm (``info``) and its baseline (``baseline``) were timed started unlike (one as it
    compiled, the other loaded from the compiler's cache), which way that leans, and why a cold
    one was not replaced where its ``warm_load`` says; None where they started alike or either
    does not say. On a launch-bound network an arm started one way ran 3-7% apart from arms
    started the other (tiny_vit bf16 on the H200, 12-05b), so a verdict across the two is not a
    fair one, whichever way it went."""
    mine, theirs = effective_start(info), effective_start(baseline)
    if mine is None or theirs is None or mine == theirs:
        return None
    why = [f"{who}: {reason}" for who, reason in (("the arm", (info or {}).get("warm_load")),
                                                  ("the baseline", (baseline or {}).get("warm_load")))
           if isinstance(reason, str)]
    lean = ("timed as it compiled, against baselines loaded from the compiler's cache, which may read "
            "a launch-bound model a few percent slow" if mine == "compiled" else
            "timed loaded from the compiler's cache, against baselines timed as they compiled, which may "
            "read a launch-bound model a few percent fast")
    return lean + (f" ({'; '.join(why)})" if why else "")


def unlike_where_asked(arm: Any, baseline: Any) -> str | None:
    """:func:`started_unlike` for two arm handles, where the run asked for arms started alike
    (warm loads on either: ``kernelopt bench`` and ``modes`` on a GPU, a run on a launch-bound
    model); None otherwise. A run that does not replace cold arms (a model that is not
    launch-bound, where no such bias was seen) times every compiler option, whose mode compiles
    cold, against baselines loaded from the engine's compile: a note on each would be noise."""
    if not (getattr(arm, "warm_load", False) or getattr(baseline, "warm_load", False)):
        return None
    return started_unlike(getattr(arm, "info", None), getattr(baseline, "info", None))


def configs_unlike(info: dict[str, Any] | None, other: dict[str, Any] | None) -> list[str] | None:
    """The kernels for which two arms' compiles settled on different launch configs (each arm's
    ``info["configs"]``; kernels only one of them reports are left out), None where either arm
    does not say (no configs, or something else than a kernel-to-config map). Two processes of one
    model autotune each kernel with several configs on its first call, each under whatever else
    runs then (an arm compiling beside others, or one loading alone later): a pick that differs
    between the two baselines is an offset between processes, not noise of the rounds."""
    mine, theirs = (i.get("configs") if isinstance(i, dict) else None for i in (info, other))
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return None
    return sorted(str(name) for name, config in mine.items() if name in theirs and theirs[name] != config)


def how_started(info: dict[str, Any] | None) -> str | None:
    """How an arm started, as its ready message (``info``) says: ``"replaced"`` (it compiled cold
    and a cache load replaced it: ``ArmProcess``'s ``warm_load``), ``"compiled"`` (it compiled some
    graph anew, or its replacement did again), ``"loaded"`` (every graph from the compiler's cache), or None where it does not say
    (a kernel target's arm, or a torch that counts nothing)."""
    warm = (info or {}).get("warm_load")
    if isinstance(warm, dict):  # replaced, unless the replacement compiled again
        return "compiled" if warm.get("replacement_cold") is True else "replaced"
    return effective_start(info)


def arm_process_name(label: str) -> str:
    """The name an arm's process is started (and counted) under."""
    return f"kernelopt-{label}"


class ArmProcess:
    """Parent-side handle of one arm.

    ``warm_load``: an arm whose compile stored a graph in the compiler's cache (:func:`compiled_cold`)
    is replaced, once, by a fresh process that loads it from there, as every arm started after
    it does: so the arms of a comparison start alike. The cold process is stopped before its
    replacement starts (never two copies of one model on the GPU); the replacement's failure is
    ours (:class:`ArmOursFailed`, never a verdict), whatever it is: the model compiled and ran in
    the cold process, so a load that raises, dies, hangs or cannot start is the load's we added.
    Where less of the start's limit is left than the load needs (``load_s``, at least
    :data:`WARM_LOAD_MIN_S`) and the cold process's stop (:data:`STOP_WAIT_S`) when the
    replacement is due to start, the cold
    arm answers, and ``info["warm_load"]`` says why. Why: on the H200
    (12-05b, ``scripts/process_offsets.py``) six processes of a launch-bound bf16 network ran 3-7%
    faster when started once the first three were ready, from the cache those had filled, than
    those three, pack or no pack, while processes started alike agreed within 1.5-2% (whether
    the cache load or the wave is the cause is what ``gpu_check.sh offsets`` measures next).
    :meth:`wait_compiled`, :meth:`start_replacement` and :meth:`wait_ready` are the three steps,
    so the model arms can let every first start finish before any replacement starts."""

    where = "process"

    def __init__(self, spec: ArmSpec, *, start_timeout_s: float = 900.0, budget_limited: bool = False,
                 warm_load: bool = False, load_s: float = WARM_LOAD_MIN_S) -> None:
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        self.budget_limited = budget_limited  # start_timeout_s is what the wall budget left, not its own limit
        self.warm_load, self.load_s = warm_load, max(WARM_LOAD_MIN_S, load_s)
        # The compile must end within start_timeout_s of the start, however many waits come
        # between: measured from each wait, a model's option arm waited for after its baselines
        # had been waited for got both waits (on the H200 an option phase given 41 s took 58 s
        # and pushed the run's end 25 s past its wall budget: a training step, 12-04).
        self._start_deadline = time.monotonic() + start_timeout_s
        self._proc = self._spawn()
        self._conn = self._proc.conn
        self._cold: dict[str, Any] | None = None  # the cold start's ready message, while it is replaced
        self._replacing = False  # the replacement is started (the cold process is stopped)
        self.info: dict[str, Any] = {}
        self.ready = False  # compiled and answering (after wait_ready)
        self.start_error: ArmError | None = None  # why it failed to start, once waited for
        self.closed = False

    def _spawn(self) -> Any:
        try:
            return spawn_isolated("kernelopt_bot.harness.arm_process.worker_main", self.spec,
                                  name=arm_process_name(self.spec.label))
        except OSError as exc:
            raise ArmNotStarted(f"{self.spec.label}: could not be started ({exc})") from exc

    def _await_start(self, doing: str) -> dict[str, Any]:
        """The current process's ready message, within what is left of the start's limit."""
        try:
            kind, payload = self._receive(max(0.0, self._start_deadline - time.monotonic()), "start",
                                          limit_s=self.start_timeout_s, budget=self.budget_limited, doing=doing)
            if kind != "ready":
                raise ArmError(f"{self.spec.label}: unexpected reply {kind!r} while starting")
        except ArmError as exc:
            self.start_error = exc
            raise
        return payload

    def wait_compiled(self) -> None:
        """Wait for the first start's ready message. The arm is then ready, unless it compiled cold
        and is to be replaced (:meth:`start_replacement`, or :meth:`wait_ready` does both)."""
        self._check_open()
        if self.ready or self.start_error is not None or self._cold is not None:
            return
        payload = self._await_start("compiling")
        if not (self.warm_load and compiled_cold(payload)):
            self._become_ready(payload)
            return
        self._cold = payload
        self._answer_cold_without_time()

    def _answer_cold_without_time(self) -> bool:
        """Where less of the start's limit is left than the replacement's load needs, the cold arm
        (still up: not stopped before its replacement starts) answers, and says why."""
        left = self._start_deadline - time.monotonic()
        if self._cold is None or self._replacing or left >= self.load_s + STOP_WAIT_S:
            return False
        cold, self._cold = self._cold, None
        self._become_ready({**cold, "warm_load": f"not replaced: {max(0.0, left):.0f} s of its start's limit "
                                                 f"left, its load needs {self.load_s:.0f} and the stop {STOP_WAIT_S:.0f}"})
        return True

    def _check_open(self) -> None:
        if self.closed:  # a request after close is our sequencing, never the arm's verdict
            raise ArmOursFailed(f"{self.spec.label}: closed")

    def start_replacement(self) -> None:
        """Where the first start compiled cold: stop it and start the process that loads the model
        from the cache it filled (returns at once; :meth:`wait_ready` waits for it)."""
        self._check_open()
        if self._cold is None or self._replacing or self.ready or self.start_error is not None:
            return
        if self._answer_cold_without_time():  # the other arms' first starts took its time meanwhile
            return
        self._stop(self._proc)  # never two copies of one model on the GPU
        try:
            replacement = self._spawn()
        except Exception as exc:  # ours, whatever it is: the model compiled
            self.start_error = exc if isinstance(exc, ArmOursFailed) else ArmOursFailed(
                f"{self.spec.label}: compiled; its replacement could not be started ({exc})")
            raise self.start_error from exc
        self._proc, self._conn, self._replacing = replacement, replacement.conn, True

    def wait_ready(self) -> dict[str, Any]:
        """Wait for the arm's start (its compile, and a cold one's replacement); a second call
        after a failed start raises the same error (the model arms may have waited for it first,
        to keep the machine quiet while others time)."""
        if self.ready:
            return self.info
        if self.start_error is not None:
            raise self.start_error
        self.wait_compiled()
        if self.ready:
            return self.info
        self.start_replacement()
        if self.ready:
            return self.info
        cold = self._cold or {}
        try:
            payload = self._await_start("loading from the cache")
        except ArmError as exc:  # the model compiled and ran in the cold process: a load we added failed
            if not isinstance(exc, ArmOursFailed):
                what = "raised while loading" if isinstance(exc, ArmRaised) else "failed to load"
                self.start_error = ArmOursFailed(f"{self.spec.label}: compiled and ran; its replacement {what} "
                                                 f"from the compiler's cache ({exc})")
                raise self.start_error from exc
            raise
        cold_s, load_s = compile_seconds(cold), compile_seconds(payload)
        merged = {**payload, "warm_load": {"cold_compile_s": cold_s, "load_s": load_s, "cold_cache": cold.get("cache"),
                                           "cold_cache_keys": cold.get("cache_keys"),
                                           "cold_start_phases_s": cold.get("start_phases_s"),
                                           "replacement_cold": compiled_cold(payload)}}
        if cold_s is not None and load_s is not None:  # what the arm's start cost: both starts
            merged["compile_s"] = round(cold_s + load_s, 2)
        gpu_mb = [v for v in (cold.get("gpu_mb"), payload.get("gpu_mb")) if isinstance(v, (int, float))]
        if gpu_mb:  # what an arm of this model needs: its compile's peak (a load's is lower)
            merged["gpu_mb"] = max(gpu_mb)
        self._cold = None
        return self._become_ready(merged)

    def _become_ready(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.info = payload
        self.ready = True
        return payload

    @property
    def compiling(self) -> bool:
        """Started, neither ready nor failed nor closed: it is using the CPU (and GPU) now, or its
        cold start waits for its replacement to start."""
        return not (self.ready or self.closed or self.start_error is not None)

    def request(self, *message: Any, timeout_s: float = 600.0) -> Any:
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:
            raise ArmError(f"{self.spec.label}: process is gone ({exc})") from exc
        kind, payload = self._receive(timeout_s, str(message[0]))
        if kind != "ok":
            raise ArmError(f"{self.spec.label}: unexpected reply {kind!r}")
        return payload

    def _receive(self, timeout_s: float, what: str, limit_s: float | None = None,
                 budget: bool = False, doing: str = "compiling") -> tuple[str, Any]:
        """The arm's next message within ``timeout_s`` (what is left of ``limit_s``, the limit
        the error names; default: ``timeout_s``), else the arm is killed (:class:`ArmTimeout`;
        ``budget``: the limit was what the wall budget left; ``doing``: what it was still doing)."""
        if not self._conn.poll(timeout_s):
            self.kill()
            limit = timeout_s if limit_s is None else limit_s
            if budget:
                raise ArmTimeout(f"{self.spec.label}: still {doing} when the {limit:.0f} s the wall budget "
                                 "left it ran out (stopped)", budget=True)
            raise ArmTimeout(f"{self.spec.label}: no answer to {what} within {limit:.0f} s (killed)")
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError) as exc:
            code = self._proc.wait(5)
            raise ArmError(f"{self.spec.label}: process died during {what} ({describe_exit(code)})") from exc
        if kind == "error":
            raise ArmRaised(self.spec.label, str(payload))
        return kind, payload

    @property
    def alive(self) -> bool:
        return self._proc.alive()

    def kill(self) -> None:
        """Kill the arm's whole process group."""
        self._proc.kill()

    @staticmethod
    def _stop(proc: Any, ready: bool = True) -> None:
        """Ask a ready process to quit (one still compiling reads its pipe only once ready, so
        asking would only wait out the join: it is killed) and release it."""
        if proc.alive() and ready:
            with contextlib.suppress(OSError, ValueError):
                proc.conn.send(("quit",))
            proc.wait(STOP_WAIT_S)
        proc.close()

    def close(self) -> None:
        """Ask a ready arm to quit; kill one still compiling. Closing twice is harmless."""
        if self.closed:
            return
        # A cold start waiting for its replacement is ready (it sent its message) and idle
        self._stop(self._proc, self.ready or (self._cold is not None and not self._replacing))
        self.closed = True

    def __enter__(self) -> ArmProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
