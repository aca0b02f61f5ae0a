"""Which elements each program of an interpreted kernel writes and reads (CPU interpreter only).

The Triton interpreter runs a kernel's programs one after another with numpy, so a kernel that
writes into another program's block, or uses an input as scratch and restores it, produces the
right numbers here and garbage on a GPU where programs run at once. Comparing results cannot see
that; the memory accesses can. While :func:`recording_memory` is active, every store, atomic and
load of the interpreter's builder is recorded per program (grid index) as (buffer, element
offset), for the buffers we name. Used only around gate 2's launches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

Program = tuple[int, int, int]


@dataclass(frozen=True)
class _Buffer:
    name: str
    start: int
    end: int
    itemsize: int


@dataclass
class MemoryTrace:
    """What one launch did to the named buffers, per program."""

    # buffer name -> [(program, element offsets)] of plain stores, and of atomics
    stores: dict[str, list[tuple[Program, np.ndarray]]] = field(default_factory=dict)
    atomics: dict[str, list[tuple[Program, np.ndarray]]] = field(default_factory=dict)
    loads: dict[str, list[tuple[Program, np.ndarray]]] = field(default_factory=dict)
    # buffer name -> elements a program loaded from a watched (output) buffer before storing them
    early_reads: dict[str, int] = field(default_factory=dict)

    def written(self) -> set[str]:
        """Buffers stored to (plainly or atomically)."""
        return {n for n, parts in (*self.stores.items(), *self.atomics.items()) if parts}

    def elements(self, name: str) -> np.ndarray:
        """Sorted unique element offsets of ``name`` written by any program."""
        parts = [o for _, o in self.stores.get(name, [])] + [o for _, o in self.atomics.get(name, [])]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def shared_elements(self, name: str) -> tuple[int, Program, Program] | None:
        """An element of ``name`` that two programs write, at least one with a plain store (a
        race where programs run concurrently; atomics among themselves are not), with the two
        programs; ``None`` if no such element exists."""
        plain: dict[int, Program] = {}
        for program, offsets in self.stores.get(name, []):
            for offset in np.unique(offsets).tolist():
                first = plain.setdefault(offset, program)
                if first != program:
                    return offset, first, program
        for program, offsets in self.atomics.get(name, []):
            for offset in np.unique(offsets).tolist():
                writer = plain.get(offset)
                if writer is not None and writer != program:
                    return offset, writer, program
        return None

    def read_of_other_program(self, name: str) -> tuple[int, Program, Program] | None:
        """An element of ``name`` that one program loads and another writes (on a GPU the load
        sees the value before or after that write, by timing), as (element, reader, writer)."""
        writer: dict[int, Program] = {}
        for program, offsets in (*self.stores.get(name, []), *self.atomics.get(name, [])):
            for offset in np.unique(offsets).tolist():
                writer.setdefault(offset, program)
        for program, offsets in self.loads.get(name, []):
            for offset in np.unique(offsets).tolist():
                other = writer.get(offset)
                if other is not None and other != program:
                    return offset, program, other
        return None


class _Recorder:
    def __init__(self, builder: Any, buffers: list[_Buffer], watch_reads: set[str]) -> None:
        self.builder = builder
        self.buffers = buffers
        self.watch_reads = watch_reads
        self.trace = MemoryTrace()
        self._program: Program | None = None
        self._stored_here: dict[str, set[int]] = {}

    def _current(self) -> Program:
        program = tuple(self.builder.grid_idx)  # type: ignore[assignment]
        if program != self._program:
            self._program = program  # type: ignore[assignment]
            self._stored_here = {}
        return self._program  # type: ignore[return-value]

    def _split(self, ptrs: Any, mask: Any) -> Iterator[tuple[_Buffer, np.ndarray]]:
        addresses = np.asarray(ptrs.data).astype(np.uint64, copy=False).ravel()
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).ravel() \
            if mask is not None else np.ones(addresses.shape, dtype=bool)
        for buf in self.buffers:
            inside = active & (addresses >= buf.start) & (addresses < buf.end)
            if inside.any():
                yield buf, ((addresses[inside] - np.uint64(buf.start)) // np.uint64(buf.itemsize)).astype(np.int64)

    def store(self, ptrs: Any, mask: Any, *, atomic: bool) -> None:
        program = self._current()
        table = self.trace.atomics if atomic else self.trace.stores
        for buf, offsets in self._split(ptrs, mask):
            table.setdefault(buf.name, []).append((program, offsets))
            if buf.name in self.watch_reads:
                self._stored_here.setdefault(buf.name, set()).update(offsets.tolist())

    def load(self, ptrs: Any, mask: Any) -> None:
        program = self._current()
        for buf, offsets in self._split(ptrs, mask):
            self.trace.loads.setdefault(buf.name, []).append((program, offsets))
            if buf.name in self.watch_reads:
                mine = self._stored_here.get(buf.name, set())
                early = sum(1 for o in offsets.tolist() if o not in mine)
                if early:
                    self.trace.early_reads[buf.name] = self.trace.early_reads.get(buf.name, 0) + early


def _buffers(tensors: dict[str, torch.Tensor]) -> list[_Buffer]:
    """Each named tensor's whole storage (offsets count from its start); a storage shared by two
    names is attributed to the first."""
    seen: set[int] = set()
    out = []
    for name, t in tensors.items():
        storage = t.untyped_storage()
        start = storage.data_ptr()
        if start in seen or storage.nbytes() == 0:
            continue
        seen.add(start)
        out.append(_Buffer(name, start, start + storage.nbytes(), t.element_size()))
    return out


@contextmanager
def recording_memory(tensors: dict[str, torch.Tensor], watch_reads: set[str] | None = None
                     ) -> Iterator[MemoryTrace]:
    """Record the interpreter's accesses to ``tensors`` (name -> CPU tensor) while the block runs.

    ``watch_reads``: names of buffers whose loads are checked against the loading program's own
    earlier stores (outputs: reading one before writing it reads whatever was there before).
    Needs ``TRITON_INTERPRET=1``; not reentrant.
    """
    from triton.runtime.interpreter import interpreter_builder as builder

    recorder = _Recorder(builder, _buffers(tensors), set(watch_reads or ()))
    cls = type(builder)

    def masked_store(ptrs: Any, value: Any, mask: Any, cache_policy: Any) -> Any:
        recorder.store(ptrs, mask, atomic=False)
        return cls.create_masked_store(builder, ptrs, value, mask, cache_policy)

    def masked_load(ptrs: Any, mask: Any, other: Any, cache_policy: Any, is_volatile: Any) -> Any:
        recorder.load(ptrs, mask)
        return cls.create_masked_load(builder, ptrs, mask, other, cache_policy, is_volatile)

    def atomic_rmw(op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        recorder.load(ptr, mask)
        recorder.store(ptr, mask, atomic=True)
        return cls.create_atomic_rmw(builder, op, ptr, val, mask, sem, scope)

    def atomic_cas(ptr: Any, cmp: Any, val: Any, sem: Any, scope: Any) -> Any:
        recorder.load(ptr, None)
        recorder.store(ptr, None, atomic=True)
        return cls.create_atomic_cas(builder, ptr, cmp, val, sem, scope)

    hooks = {"create_masked_store": masked_store, "create_masked_load": masked_load,
             "create_atomic_rmw": atomic_rmw, "create_atomic_cas": atomic_cas}
    if any(name in vars(builder) for name in hooks):
        raise RuntimeError("recording_memory is already active")
    for name, fn in hooks.items():
        setattr(builder, name, fn)
    try:
        yield recorder.trace
    finally:
        for name in hooks:
            vars(builder).pop(name, None)


def write_discipline(original: MemoryTrace, candidate: MemoryTrace) -> str | None:
    """Why the candidate's memory accesses are not the original's, or ``None`` when they are:
    it writes only buffers the original writes, exactly the elements the original writes, each
    element from one program (unless the original itself shares), loads no element another
    program writes (unless the original does), and reads no output element before writing it
    (unless the original does)."""
    for name in sorted(candidate.written() - original.written()):
        return (f"stores to {name}, which the compiler's kernel never writes (an input used as "
                "scratch corrupts what other programs read on a GPU, even if restored)")
    for name in sorted(candidate.written()):
        shared = candidate.shared_elements(name)
        if shared is not None and original.shared_elements(name) is None:
            offset, first, second = shared
            return (f"programs {first} and {second} both write element {offset} of {name}: programs "
                    "run concurrently on a GPU, so this is a race the interpreter cannot show")
        crossed = candidate.read_of_other_program(name)
        if crossed is not None and original.read_of_other_program(name) is None:
            offset, reader, writer = crossed
            return (f"program {reader} loads element {offset} of {name}, which program {writer} writes: on a "
                    "GPU what it reads depends on which runs first (a race the interpreter cannot show)")
        mine, theirs = candidate.elements(name), original.elements(name)
        if not np.array_equal(mine, theirs):
            extra = np.setdiff1d(mine, theirs).size
            missing = np.setdiff1d(theirs, mine).size
            return (f"writes a different set of elements of {name} than the compiler's kernel "
                    f"({extra} extra, {missing} missing)")
    for name in sorted(candidate.early_reads):
        if not original.early_reads.get(name):
            return (f"loads {candidate.early_reads[name]} element(s) of output {name} before writing them "
                    "(reads whatever the buffer held before: its result depends on the prefill)")
    return None
