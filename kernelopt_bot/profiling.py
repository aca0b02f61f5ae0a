"""Profile: which kernels are worth a search.

Per Triton kernel: its in-model device time per model call (from the PyTorch profiler), its share
of model time, the bytes it must move, the bandwidth that implies against the measured copy
roofline, and a bound class. Vendor calls (cuBLAS, cuDNN, ATen fallbacks) are one bucket: they are
preserved, and only their weight matters here.

Bound classes:
* ``launch``: the kernel is so short (< 10 us) that launch and tail effects dominate;
* ``compute``: it does matrix work (``tl.dot``) or reaches under a quarter of the memory roofline;
* ``memory``: everything else; the roofline fraction says how much headroom is left.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from kernelopt_bot.capture.recorder import Capture
from kernelopt_bot.harness.kernel import KernelHarness
from kernelopt_bot.harness.roofline import Roofline, device_roofline

LAUNCH_BOUND_MS = 0.010
COMPUTE_BOUND_FRACTION = 0.25


@dataclass
class KernelProfile:
    name: str
    graph: int
    kind: str
    calls: int
    time_ms: float | None
    share: float | None
    bytes_moved: int
    achieved_gbps: float | None
    roofline_fraction: float | None
    bound: str | None

    @property
    def headroom_ms(self) -> float:
        """Milliseconds a faster kernel could save at most: a pointwise kernel reads and writes its
        bytes once, as the copy does, so it cannot run faster than the copy roofline and its
        headroom is its time above it; a reduction mostly reads, which can beat the copy (an H200
        std kernel measured at 104% of it still got 6% faster), so its whole time counts, as does
        a kernel of unknown bandwidth. A launch-bound kernel counts nothing: launching, not the
        kernel, takes its time."""
        if not self.time_ms or self.bound == "launch":
            return 0.0
        if self.kind == "pointwise" and self.roofline_fraction is not None:
            return self.time_ms * max(0.0, 1.0 - self.roofline_fraction)
        return self.time_ms

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Profile:
    target: str
    device: str
    model_ms: float | None
    vendor_ms: float | None
    roofline: Roofline | None
    kernels: list[KernelProfile] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return self.model_ms is not None

    def kernel(self, graph: int, name: str) -> KernelProfile | None:
        return next((k for k in self.kernels if k.graph == graph and k.name == name), None)

    def ranked(self) -> list[KernelProfile]:
        """Kernels by what a search could save of them (:attr:`KernelProfile.headroom_ms`), then by
        share of model time, largest first (unmeasured ones last). By share alone, on the H200 a
        convolution + group norm model's search spent its time on a pointwise kernel at 57% of
        the copy roofline (20% of the time, 9% to gain) and never reached the group norm's
        reduction (14%, all of it to gain: fp32, 12-04)."""
        return sorted(self.kernels, key=lambda k: (-k.headroom_ms, -(k.share or 0.0)))

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "device": self.device,
            "model_ms": self.model_ms,
            "vendor_ms": self.vendor_ms,
            "copy_gbps": self.roofline.copy_gbps if self.roofline else None,
            "kernels": [k.to_json() for k in self.kernels],
        }


def classify(kind: str, source: str, time_ms: float | None, fraction: float | None) -> str | None:
    if time_ms is None:
        return None
    if time_ms < LAUNCH_BOUND_MS:
        return "launch"
    if kind == "template" or "tl.dot(" in source:
        return "compute"
    if fraction is not None and fraction < COMPUTE_BOUND_FRACTION:
        return "compute"
    return "memory"


def profile(cap: Capture, *, iters: int = 10) -> Profile:
    """Profile a captured model. Without CUDA every time is ``None`` (not measured)."""
    kernels = cap.artifact.kernels
    bytes_by_kernel = {}
    for k in kernels:
        rec = cap.recordings.get((k.graph, k.name))
        bytes_by_kernel[(k.graph, k.name)] = (
            KernelHarness(k, rec, cap.target.device).bytes_moved() if rec else 0
        )
    calls = {key: rec.calls for key, rec in cap.recordings.items()}

    if cap.target.device != "cuda":
        return Profile(cap.target.spec, cap.target.device, None, None, None, [
            KernelProfile(k.name, k.graph, k.kind, calls.get((k.graph, k.name), 0), None, None,
                          bytes_by_kernel[(k.graph, k.name)], None, None, None)
            for k in kernels
        ])

    roof = device_roofline()
    device_ms, model_ms = _profiled_device_times(cap, iters)
    names = {k.name for k in kernels}
    per_name_launches: dict[str, int] = defaultdict(int)
    for k in kernels:
        per_name_launches[k.name] += calls.get((k.graph, k.name), 0)
    vendor_ms = sum(ms for name, ms in device_ms.items() if name not in names)
    # Shares are of the model's time; the profiler's busy time can exceed the flushed wall median
    # slightly, and a share must never exceed 100%.
    denominator = max(model_ms, sum(device_ms.values()))
    out: list[KernelProfile] = []
    for k in kernels:
        n = calls.get((k.graph, k.name), 0)
        total = device_ms.get(k.name)
        # A name shared by several graphs splits its time by launches.
        t = None if total is None or not per_name_launches[k.name] else total * n / per_name_launches[k.name]
        nbytes = bytes_by_kernel[(k.graph, k.name)]
        gbps = nbytes * max(n, 1) / (t * 1e-3) / 1e9 if t else None
        frac = gbps / roof.copy_gbps if gbps and roof else None
        out.append(KernelProfile(
            k.name, k.graph, k.kind, n, t, t / denominator if t is not None and denominator else None,
            nbytes, gbps, frac, classify(k.kind, k.source, t / max(n, 1) if t else t, frac),
        ))
    return Profile(cap.target.spec, "cuda", model_ms, vendor_ms, roof, out)


def _profiled_device_times(cap: Capture, iters: int) -> tuple[dict[str, float], float]:
    """Device time per kernel name per model call, and the model's own median time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from kernelopt_bot.harness.timing import time_cuda

    def call() -> Any:  # one model call as the target is used (a training step for a training target)
        return cap.target.run(cap.compiled, cap.inputs)

    model_timing = time_cuda(call, reps=max(iters, 20))
    for _ in range(2):
        call()
    torch.cuda.synchronize()
    per_name: dict[str, float] = defaultdict(float)
    try:
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                call()
            torch.cuda.synchronize()
        events = list(prof.events())
    except RuntimeError:  # no CUPTI here: kernel times stay unknown, the model time stands
        events = []
    for evt in events:
        if _is_device_event(evt):
            per_name[evt.name] += _device_us(evt) / 1000.0 / iters
    assert model_timing.median_ms is not None
    return dict(per_name), model_timing.median_ms


def _is_device_event(evt: Any) -> bool:
    device_type = getattr(evt, "device_type", None)
    return device_type is not None and str(device_type).endswith("CUDA")


def _device_us(evt: Any) -> float:
    for attr in ("device_time", "cuda_time", "self_device_time_total"):
        value = getattr(evt, attr, None)
        if value:
            return float(value)
    return 0.0
