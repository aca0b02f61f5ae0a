"""GPU memory, planned rather than hoped for: give back what a process caches, size what it holds,
and walk large tensors in bounded pieces.

Every process of a run (the engine, the model arms, the sandbox) shares one GPU. A comparison of
two outputs in float64 over every element at once needs several times an output's size in
temporaries; on a 7.5 GB output that alone exhausted an H200 next to the arms. Comparisons therefore
go through :func:`float64_chunks`, whose extra memory is bounded by :data:`CHUNK_ELEMENTS` whatever
the output's size, and after a burst of work the caching allocator's blocks go back to the GPU with
:func:`free_memory` so the other processes can use them.

Imports only torch: everything above (verify, harness, bench) may use it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import torch

# Elements per piece when comparing large tensors. A comparison holds about 90 bytes of
# temporaries an element (both sides in float64, their finite parts, the error, the bound, the
# bias's copies, masks): at 2**26 elements that measured 6 GB on the H200 for any output over
# 512 MB, the engine's search peak; at 2**22, 376 MB, as much as a 3000 x 16384 float32 softmax's
# input and output together (the whole model, 12-07). At 2**20 it is 94 MB, and a piece of 4 MB
# to 8 MB is still large enough that its launches and one host sync cost little against reading it.
CHUNK_ELEMENTS = 2**20


def free_memory(device: str = "cuda") -> None:
    """Collect garbage and give the CUDA caching allocator's unused blocks back to the GPU (a no-op
    for the GPU without CUDA): before a retry after running out of memory, and after temporaries
    that other processes need the room of."""
    gc.collect()
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def device_memory(device: str = "cuda") -> tuple[int, int] | None:
    """(free, total) bytes of the current CUDA device, or None without one."""
    if device != "cuda" or not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return int(free), int(total)


def retry_note(device: str = "cuda") -> str:
    """What an out-of-memory failure's reason says after its one retry: that it was retried, and
    the GPU's free and total memory then (with CUDA), so the log shows how full the device was."""
    info = device_memory(device)
    if info is None:
        return "retried once after freeing"
    free, total = info
    return f"retried once after freeing; GPU memory: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free"


def flat_pieces(*tensors: torch.Tensor, chunk: int | None = None) -> Iterator[tuple[torch.Tensor, ...]]:
    """Matching flat pieces of ``tensors`` (same number of elements, in their logical order), at
    most ``chunk`` elements each (default :data:`CHUNK_ELEMENTS`, read at call time): the one walk
    every bounded pass over large tensors takes."""
    sizes = {t.numel() for t in tensors}
    if len(sizes) > 1:
        raise ValueError(f"{tensors[0].numel()} elements against " + " against ".join(str(t.numel()) for t in tensors[1:]))
    step = max(1, int(chunk or CHUNK_ELEMENTS))
    flats = [t.reshape(-1) for t in tensors]
    for start in range(0, sizes.pop() if sizes else 0, step):
        yield tuple(f[start:start + step] for f in flats)


def float64_chunks(a: torch.Tensor, b: torch.Tensor, *, device: torch.device | str | None = None,
                   chunk: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Matching flat pieces of ``a`` and ``b`` (:func:`flat_pieces`), each converted to float64 on
    ``device`` (default: ``b``'s). A tensor on another device (an arm's output that came through a
    pipe) moves one piece at a time, never whole, in its own dtype, and is converted where it
    lands: ``to(device, dtype)`` at once converts on the host first, and a GPU's comparison of
    host outputs then moved twice the bytes and left the conversion to a CPU core."""
    where = torch.device(device) if device is not None else b.device
    for piece_a, piece_b in flat_pieces(a, b, chunk=chunk):
        yield (piece_a.to(where).to(torch.float64), piece_b.to(where).to(torch.float64))
