"""The device's memory roofline: copy bandwidth measured once per device and cached on disk.

Datasheet numbers are leads; the ceiling we compare kernels with is what a large device-to-device
copy achieves on this card, counting bytes read plus bytes written.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

COPY_BYTES = 1 << 28  # 256 MiB each way: five times past the L2 (H100/H200: 50 MiB), and no more than a small model holds


@dataclass(frozen=True)
class Roofline:
    device: str
    copy_gbps: float
    measured_at: float
    torch: str


def cache_dir() -> Path:
    root = os.environ.get("KERNELOPT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kernelopt"
    )
    return Path(root)


def _device_id(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} (sm_{major}{minor})"


def measure_copy_bandwidth(index: int | None = None, nbytes: int = COPY_BYTES) -> float:
    """GB/s (1e9 bytes/s) of a device-to-device copy, read + write, median of many."""
    from kernelopt_bot.harness.timing import time_cuda

    index = torch.cuda.current_device() if index is None else index
    with torch.cuda.device(index):
        buffers = {"src": torch.randn(nbytes // 4, device="cuda")}
        buffers["dst"] = torch.empty_like(buffers["src"])
        timing = time_cuda(lambda: buffers["dst"].copy_(buffers["src"]), reps=30, warmup=3)
        buffers.clear()
    assert timing.median_ms is not None
    return 2 * nbytes / (timing.median_ms * 1e-3) / 1e9


def device_roofline(index: int | None = None, *, refresh: bool = False) -> Roofline | None:
    """The cached roofline of a CUDA device (measured on first use); ``None`` without CUDA."""
    if not torch.cuda.is_available():
        return None
    index = torch.cuda.current_device() if index is None else index
    device = _device_id(index)
    path = cache_dir() / "roofline.json"
    cached: dict[str, dict[str, object]] = {}
    if path.is_file():
        try:
            cached = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            cached = {}
    entry = cached.get(device)
    if entry and not refresh:
        try:
            return Roofline(**entry)  # type: ignore[arg-type]
        except TypeError:
            pass
    roof = Roofline(device, measure_copy_bandwidth(index), time.time(), torch.__version__)
    cached[device] = asdict(roof)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cached, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs a re-measure next time
    return roof
