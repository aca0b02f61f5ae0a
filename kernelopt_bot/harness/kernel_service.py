"""Kernel-level work on one captured model: compile variants, launch and time them (gate 2 judges
candidates with these: :mod:`kernelopt_bot.verify.kernel_gate`).

Two callers share this code. The sandbox jobs (:mod:`kernelopt_bot.verify.jobs`) build a
:class:`KernelBench` in a fresh child process for untrusted source (an LLM's, a user's). The engine
builds one :class:`KernelService` per cascade for trusted candidates (our launch configs and our
own source transformations, as trusted as the target itself): it keeps each kernel's recorded
arguments, its harness and the compiler's kernel pinned to its recorded config, compiled once, so
timing a batch or gate 2 on a candidate costs the work itself and no process start, target load or
recompile (on the H200 those were 80-93% of the tuner's wall time).

On a GPU, variants compile first in the compile process (:mod:`.compile_pool`: into the Triton
cache, killed at the deadline); this process then loads them on threads (Triton's compiler
releases the GIL), which from the cache takes milliseconds, and compiles here only what the
cache lacks. A variant that fails to compile or run is that variant's error text, never the
caller's failure. Compiled
variants are cached by a hash of their source and config, so a config timed by the tuner and then
sent to gate 2 is compiled once. In the engine an out-of-memory error is retried once after
freeing the caching allocator, then raised as an :class:`InfrastructureFailure`, never a verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.capture.recorder import KernelRecording, relocated
from kernelopt_bot.errors import one_line
from kernelopt_bot.harness.compile_pool import LATE, CompilePool, start_pool
from kernelopt_bot.harness.failures import InfrastructureFailure, is_out_of_memory
from kernelopt_bot.harness.kernel import KernelHarness
from kernelopt_bot.harness.memory import free_memory, retry_note
from kernelopt_bot.harness.timing import StepClock
from kernelopt_bot.harness.work_watch import NO_WATCH, WorkWatch
from kernelopt_bot.pack.format import LaunchConfig

COMPILE_DEADLINE_S = 30.0  # per batch of variants, compiled in parallel
PROBE_REPS = 5  # a first look at every variant before the contenders get the full repetitions
# A variant whose probe is this much slower than the best probe (or the original, if faster) is out
# of the running: it keeps its probe's time. On the H200, 56 variants of a 1.5 ms kernel took 8.4 s
# when each got the full repetitions; a probe of each costs a tenth of that.
CONTENDER_FACTOR = 1.10
VARIANT_DEADLINE_S = 60.0  # one variant's timing (a probe and its repetitions): seconds at most

Variant = tuple[str | None, LaunchConfig | None]  # (source or None for the compiler's, config or None)
T = TypeVar("T")


def compile_threads() -> int:
    """Threads for compiling variants: every core, or a multi-GPU fleet job's share of them
    (``KERNELOPT_COMPILE_THREADS``)."""
    return int(os.environ.get("KERNELOPT_COMPILE_THREADS") or os.cpu_count() or 1)


def late_text(deadline_s: float) -> str:
    return f"not compiled within {deadline_s:.0f} s; skipped"


def variant_key(source: str, config: LaunchConfig | None) -> str:
    """What makes two variants the same kernel: their source and their launch config."""
    text = json.dumps([source, config.to_json() if config else None], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class KernelBench:
    """One kernel, its recorded arguments and the compiler's kernel pinned to its recorded
    config (compiled on first use, then kept), plus every variant compiled so far."""

    def __init__(self, kernel: TritonKernel, recording: KernelRecording, device: str,
                 watch: WorkWatch = NO_WATCH, pool: CompilePool | None = None) -> None:
        self.kernel, self.recording, self.device, self.watch = kernel, recording, device, watch
        self.pool = pool  # compiles variants ahead, in a killable process (CUDA only)
        self.harness = KernelHarness(kernel, recording, device)
        self._original: Any = None
        self._compiled: dict[str, Any] = {}  # variant_key -> kernel object, or its error text

    def on_device(self) -> KernelBench:
        """This bench, its recorded arguments moved to its device where they are not there yet
        (a sandbox loads them into host memory: gate 2 needs only their layout)."""
        self.recording.args = relocated(self.recording.args, self.device)
        return self

    def original(self) -> Any:
        """The compiler's kernel pinned to the launch config its autotuning chose in the model
        (``recording.chosen_config``): loaded without it, the source would autotune again (every config
        compiled and benchmarked). Unpinned if that config is unknown or cannot be pinned."""
        if self._original is None:
            pinned = None
            if self.recording.chosen_config:
                try:
                    pinned = self.harness.load(source=self.kernel.source,
                                               config=LaunchConfig.from_json(self.recording.chosen_config))
                except Exception:  # noqa: BLE001 - fall back to the compiler's own autotuning
                    pinned = None
            self._original = pinned if pinned is not None else self.harness.load(source=self.kernel.source)
        return self._original

    def keys(self, variants: Sequence[Variant]) -> list[str]:
        return [variant_key(s if s is not None else self.kernel.source, c) for s, c in variants]

    def _compile_one(self, variant: Variant) -> Any:
        """Load and compile one variant; the error text if it does not compile."""
        source, config = variant
        try:
            kernel_obj = self.harness.load(source=source if source is not None else self.kernel.source,
                                           config=config)
            if self.device == "cuda" and hasattr(kernel_obj, "precompile"):
                kernel_obj.precompile()
            return kernel_obj
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result, not a crash
            return one_line(exc)

    def _keep(self, key: str, compiled: Any) -> None:
        """Cache a compile's outcome; an out-of-memory error is ours, so it is not kept."""
        if not (isinstance(compiled, str) and is_out_of_memory(compiled)):
            self._compiled[key] = compiled

    def compile_all(self, variants: Sequence[Variant], *, deadline_s: float | None, threads: int) -> list[Any]:
        """Each variant's kernel object, or why there is none (its error text, or the late text
        when it was still compiling at the deadline). Variants already compiled, and duplicates
        within the batch, are compiled once.

        All compile at once on ``threads`` threads; a variant still compiling at the deadline is
        left behind (its thread may go on and its kernel is kept when it finishes): one
        pathological config must not stall the whole search. Whatever failed alongside others is
        compiled again alone (a compiler that is not thread-safe costs time, never a variant),
        while the deadline lasts."""
        keys = self.keys(variants)
        for key in keys:  # what brought an earlier engine down is not compiled, let alone run
            reason = self.watch.quarantined(key)
            if reason is not None:
                self._compiled[key] = reason
        todo = {k: v for k, v in zip(keys, variants) if k not in self._compiled}
        late = late_text(deadline_s) if deadline_s is not None else "not compiled"
        deadline_at = None if deadline_s is None else time.monotonic() + deadline_s
        fresh: dict[str, Any] = {}
        if self.pool is not None and todo:  # what was still compiling there at the deadline is not tried here
            fresh = self._warm_in_pool(todo, deadline_at, late)
            todo = {k: v for k, v in todo.items() if k not in fresh}
        order = list(todo)
        threads = max(1, min(len(order), threads))
        results = self._compile_until(order, [todo[k] for k in order], threads, deadline_at, late)
        again = [i for i, r in enumerate(results) if isinstance(r, str) and r != late]
        if again and threads > 1:
            retried = self._compile_until([order[i] for i in again], [todo[order[i]] for i in again], 1,
                                          deadline_at, late)
            for i, value in zip(again, retried):
                results[i] = value if value != late else results[i]
        for key, result in zip(order, results):
            if result != late:
                self._keep(key, result)
        fresh.update(zip(order, results))
        return [self._compiled.get(k, fresh.get(k, late)) for k in keys]

    def _warm_in_pool(self, todo: dict[str, Variant], deadline_at: float | None, late: str) -> dict[str, Any]:
        """Compile ``todo`` into the Triton cache in the compile process (killed at the deadline):
        this process then only loads them. Returns the variants settled there: those still
        compiling at the deadline (``late``). If no compile process is up, nothing is settled and
        this process compiles everything, as without a pool."""
        assert self.pool is not None
        if not self.pool.ready_now():  # still starting: this batch compiles here, as without a pool
            return {}
        keys = list(todo)
        jobs = [(self.harness.variant_text(*todo[k]), self.kernel.name) for k in keys]
        left = None if deadline_at is None else max(0.0, deadline_at - time.monotonic())
        try:
            outcomes = self.pool.warm(jobs, left)
        except OSError:
            return {}
        # Only a variant still compiling at the deadline is settled there (its process was killed);
        # one that failed is compiled here once more (alone if it fails again), as a failure
        # beside other compiles is here: a compiler that is not thread-safe costs time, never a variant.
        return {key: late for key, outcome in zip(keys, outcomes) if outcome == LATE}

    def _compile_until(self, keys: list[str], variants: list[Variant], threads: int, deadline_at: float | None,
                       late: str) -> list[Any]:
        """Compile ``variants`` on ``threads`` threads; what is not done by ``deadline_at``
        (:func:`time.monotonic`; ``None``: no deadline) gets the ``late`` text instead. A late
        compile that finishes afterwards is still kept, for the next batch that asks for it."""
        if not variants:
            return []
        pool = ThreadPoolExecutor(max_workers=threads)
        futures = [pool.submit(self._compile_one, v) for v in variants]
        wait(futures, timeout=None if deadline_at is None else max(0.0, deadline_at - time.monotonic()))
        pool.shutdown(wait=False, cancel_futures=True)
        out: list[Any] = []
        for key, future in zip(keys, futures):
            if future.done() and not future.cancelled():
                out.append(future.result())
            else:
                future.add_done_callback(lambda f, k=key: self._keep_late(k, f))
                out.append(late)
        return out

    def _keep_late(self, key: str, future: Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            self._keep(key, future.result())

    def time_original(self, reps: int) -> float | None:
        return self.harness.time_kernel(self.original(), reps=reps).median_ms

    def time_compiled(self, compiled: Sequence[Any], keys: Sequence[str], original_ms: float | None,
                      reps: int) -> list[float | str | None]:
        """One time per kernel object (``keys``: their variant keys), timed one at a time and
        each watched (:class:`WorkWatch`: a variant that poisons the device ends this process
        and is skipped by the next); an error text stays the result.

        Two passes, as successive halving does: a short probe of every variant, then the full
        repetitions for the contenders only (:func:`contenders`); the others keep their probe's
        median, which already puts them out of the running."""
        unique: dict[int, tuple[Any, str]] = {}  # a kernel object shared by duplicates is timed once
        for kernel_obj, key in zip(compiled, keys):
            if not isinstance(kernel_obj, str):
                unique.setdefault(id(kernel_obj), (kernel_obj, key))
        done: dict[int, float | str | None] = {}
        for ident, (kernel_obj, key) in unique.items():
            done[ident] = self._timed(kernel_obj, key, PROBE_REPS, warmup=1)
        for ident in contenders(done, original_ms):
            kernel_obj, key = unique[ident]
            done[ident] = self._timed(kernel_obj, key, reps, warmup=5)
        return [kernel_obj if isinstance(kernel_obj, str) else done[id(kernel_obj)] for kernel_obj in compiled]

    def _timed(self, kernel_obj: Any, key: str, reps: int, warmup: int) -> float | str | None:
        """One variant's median over ``reps`` calls, watched; its error text if it fails."""
        try:
            with self.watch.watching(key, f"timing a variant of {self.kernel.name}", VARIANT_DEADLINE_S):
                return self.harness.time_kernel(kernel_obj, reps=reps, warmup=warmup).median_ms
        except Exception as exc:  # noqa: BLE001 - a failing variant is a result
            return one_line(exc)

    def time_variants(self, variants: Sequence[Variant], *, reps: int, deadline_s: float | None, threads: int,
                      steps: StepClock) -> tuple[float | None, list[float | str | None]]:
        """Kernel-level times of the compiler's kernel and of each variant (``None``: not
        measured, without CUDA; a text: why the variant has no time)."""
        original = self.time_original(reps)
        steps.done("original")
        compiled = self.compile_all(variants, deadline_s=deadline_s, threads=threads)
        steps.done("compile")
        times = self.time_compiled(compiled, self.keys(variants), original, reps)
        steps.done("timing")
        return original, times

def contenders(probes: dict[int, float | str | None], original_ms: float | None,
               factor: float = CONTENDER_FACTOR) -> list[int]:
    """The variants worth the full repetitions: those whose probe is within ``factor`` of the
    best probe, or of the original's time where that is faster. Without times (the CPU) none."""
    timed = {k: v for k, v in probes.items() if isinstance(v, float)}
    if not timed:
        return []
    best = min([*timed.values(), *([original_ms] if original_ms else [])])
    return [k for k, v in timed.items() if v <= factor * best]


@dataclass
class TimedVariants:
    """What :meth:`KernelService.time_variants` measured, and the seconds of each step."""

    original_ms: float | None
    times: list[float | str | None]
    seconds: dict[str, float] = field(default_factory=dict)


class KernelService:
    """Trusted kernel work inside the engine, which already holds the target, its capture and
    the recorded arguments: one :class:`KernelBench` per kernel, built on first use and kept.

    ``recording_of(graph, name)`` gives a kernel's recording (the capture's, its arguments in host
    memory). The kernel being timed has its arguments on the device, one kernel at a time (gate 2
    needs only their layout, gates 3 and 4 none of them: :meth:`bench_on_host`,
    :meth:`release_arguments`): the next one takes its place (a training step records every
    kernel of forward and backward; on the H200 their GPU copies were most of the engine's
    peak). Nothing here knows the cascade; only
    trusted candidates may be sent (their code runs in this process)."""

    def __init__(self, device: str, recording_of: Callable[[int, str], KernelRecording],
                 watch: WorkWatch = NO_WATCH, pool: CompilePool | None = None) -> None:
        self.device = device
        self.watch = watch
        # The compile process: the caller's, started early (its start overlaps the capture), or one
        # started now.
        self.pool = pool if pool is not None else start_pool(device, compile_threads())
        self._recording_of = recording_of
        self._benches: dict[tuple[int, str], KernelBench] = {}
        self._on_device: tuple[int, str] | None = None  # whose recorded arguments are on the device
        # Their host copy, kept: back to the host they are dropped, not copied (a copy of a large
        # model's arguments to pageable host memory took tens of seconds on the H200), and what
        # comes back is as recorded, whatever a kernel wrote into the device copy.
        self._host_args: tuple[Any, ...] = ()

    def bench(self, kernel: TritonKernel) -> KernelBench:
        """The kernel's bench, its recorded arguments on the device (back there if another
        kernel's took their place since, or gate 2 sent them to the host)."""
        key = (kernel.graph, kernel.name)
        recording = self._recording_of(*key)
        if self.device == "cuda" and self._on_device != key:  # elsewhere the arguments stay where they are
            self.release_arguments()
            self._host_args = recording.args
            recording.args = relocated(recording.args, self.device)
            self._on_device = key
        return self._bench_of(kernel, recording)

    def bench_as_is(self, kernel: TritonKernel) -> KernelBench:
        """The kernel's bench, its recorded arguments wherever they are: for what only compiles."""
        return self._bench_of(kernel, self._recording_of(kernel.graph, kernel.name))

    def bench_on_host(self, kernel: TritonKernel) -> KernelBench:
        """The kernel's bench with its recorded arguments in host memory and none on the device:
        gate 2 draws its own argument sets from their layout and needs none of their values, so
        the device holds the trials' buffers without the recorded ones beside them (on the H100
        they were a third of the engine's search peak on a softmax, 12-07). :meth:`bench` puts
        them back, for what times the kernel."""
        self.release_arguments()
        return self.bench_as_is(kernel)

    def _bench_of(self, kernel: TritonKernel, recording: KernelRecording) -> KernelBench:
        key = (kernel.graph, kernel.name)
        if key not in self._benches:
            self._benches[key] = KernelBench(kernel, recording, self.device, self.watch, self.pool)
        return self._benches[key]

    def release_arguments(self) -> None:
        """The recorded arguments on the device, if any, back to their host copy (gates 3 and 4
        run the model, not the kernel: the copy would sit beside the model's activations)."""
        if self._on_device is not None:
            last = self._recording_of(*self._on_device)
            last.args, self._host_args = relocated(self._host_args, "cpu"), ()  # a no-op for host tensors
            self._on_device = None
            free_memory(self.device)

    def time_variants(self, kernel: TritonKernel, variants: Sequence[Variant], *, reps: int = 50,
                      deadline_s: float = COMPILE_DEADLINE_S) -> TimedVariants:
        """Kernel-level times (CUDA) of the compiler's kernel and of each variant; a variant
        that ran out of memory is timed once more after freeing, then keeps its error text."""
        bench = self.bench(kernel)
        steps = StepClock()
        original, times = self.retrying_memory(
            lambda: bench.time_variants(variants, reps=reps, deadline_s=deadline_s, threads=compile_threads(),
                                        steps=steps))
        short = [i for i, t in enumerate(times) if isinstance(t, str) and is_out_of_memory(t)]
        if short:
            free_memory(self.device)
            again = [variants[i] for i in short]
            compiled = bench.compile_all(again, deadline_s=deadline_s, threads=compile_threads())
            for i, value in zip(short, bench.time_compiled(compiled, bench.keys(again), original, reps)):
                times[i] = value
            steps.done("memory retry")
        return TimedVariants(original, times, steps.seconds)

    def compiled(self, kernel: TritonKernel, source: str | None, config: LaunchConfig | None) -> Any:
        """The kernel object of a trusted candidate, as gate 2 compiled (and cached) it: what gates
        3 and 4 swap into the compiled model. Raises ``RuntimeError`` with the compile error when
        it does not compile."""
        kernel_obj = self.bench_as_is(kernel).compile_all([(source, config)], deadline_s=None, threads=1)[0]
        if isinstance(kernel_obj, str):
            raise RuntimeError(f"does not compile: {kernel_obj}")
        return kernel_obj

    def retrying_memory(self, work: Callable[[], T]) -> T:
        """``work()``; run once more after freeing memory when it ran out, then give up as ours."""
        try:
            return work()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        free_memory(self.device)
        try:
            return work()
        except Exception as exc:
            if is_out_of_memory(exc):
                raise InfrastructureFailure(
                    f"out of memory in the engine ({retry_note(self.device)}): "
                    f"{one_line(exc)}") from exc
            raise

    def close(self) -> None:
        """Drop every kernel's compiled variants and harness (their GPU memory goes with them),
        put the recorded arguments back in host memory, drop the L2 flush buffer, and end the
        compile process."""
        from kernelopt_bot.harness.timing import release_flushers

        self.release_arguments()
        self._benches.clear()
        if self.pool is not None:
            self.pool.close()
        release_flushers()  # the model arms that come next time themselves
        free_memory(self.device)
