"""Gate 3's references: the eager model's outputs and their float64 referee, per input seed.

Every gate-3 check (each candidate, each compiler option, the final pack) compares against the same
two references on the same seeds. Computed per check, on the GPU, they cost an eager run each time
and, for the referee, a float64 copy of the model and its activations: four times a bf16 model,
the engine's peak on an H100 (4130 MiB, 3.7x the compiled model on attention pooling, 12-07),
beside the model arms. Here each is computed once a run and kept in host memory; the referee runs
on the host where it has room and the model draws no random numbers on the device (the host's
generator would draw other dropout masks than the arms', and the referee judge another
computation). The comparisons still run on the GPU, a piece at a time
(:func:`~kernelopt_bot.harness.memory.float64_chunks`), so nothing of this stays on the device
between checks. Measured on an H100 (12-07e): the engine's own peak in the options phase of
attention pooling fell from 4130 MiB to 22 MiB.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from kernelopt_bot.harness.failures import is_out_of_memory
from kernelopt_bot.harness.memory import free_memory
from kernelopt_bot.targets import Target

# A reference set (one seed's outputs, in its own dtype) is kept in host memory up to this size;
# a larger one (a 30 GB activation's output) is computed per check and stays where it was made.
KEEP_BYTES = 2 * 2**30
# The float64 referee runs on the host when this many times the float64 bytes of the model's
# parameters, buffers and inputs (its activations are unknown beforehand) fit in half the host's
# available memory. More than the host can give is an engine the kernel's OOM killer ends.
HOST_ACTIVATION_FACTOR = 4


class ModelReferences:
    """One target's references, per seed. ``eager(seed)``: the model as loaded (its dtype, its
    device) on ``make_inputs(seed)``; ``float64(seed)``: the same in float64."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._kept: dict[tuple[str, int], list[torch.Tensor]] = {}
        # Whether the host may run the referee: not where the model draws random numbers on the
        # device (the host's generator would draw other dropout masks than the arms', and a
        # referee of another computation lets a wrong candidate through), nor once the host failed
        # it or its answer was too large to keep (then every check would pay the host's run again).
        self._host_allowed = target.device != "cpu" and not target.train

    def eager(self, seed: int) -> list[torch.Tensor]:
        kept = self._kept.get(("eager", seed))
        if kept is not None:
            return kept
        target = self.target
        inputs = target.make_inputs(seed)
        before = _device_draws(target.device)
        outputs = target.compared_outputs(target.model, inputs, device=target.device)
        after = _device_draws(target.device)
        if before is None or after != before:  # it drew on the device, or we cannot tell
            self._host_allowed = False
        return self._keep(("eager", seed), outputs)

    def float64(self, seed: int, arm_mb: float | None = None) -> list[torch.Tensor]:
        """On the host where it may and has room (the GPU's memory is planned for the model's
        arms); on the device otherwise, or where the model's code runs only there. Out of memory
        on the device: on the host after all, if not tried. Out of memory there too is raised:
        ours. ``arm_mb``: what an arm of the compiled model holds at its peak (its activations
        included), where known: the host's room is judged from it."""
        kept = self._kept.get(("float64", seed))
        if kept is not None:
            return kept
        target = self.target
        if self._host_allowed and ("eager", seed) not in self._kept:
            self.eager(seed)  # whether the model draws on the device decides where the referee runs
        inputs = target.make_inputs(seed)
        on_host: Exception | None = None  # why the host could not, where it was tried
        if self._host_allowed and _host_has_room(target, inputs, arm_mb):
            try:
                return self._referee(seed, inputs, "cpu")
            except Exception as exc:  # noqa: BLE001 - device-only code, or the host said no: the device decides
                on_host = exc
                self._host_allowed = False
        try:
            return self._referee(seed, inputs, target.device)
        except Exception as exc:
            if on_host is not None:
                raise exc from on_host
            if target.device == "cpu" or not is_out_of_memory(exc):
                raise
        free_memory(target.device)
        return self._referee(seed, inputs, "cpu")

    def _referee(self, seed: int, inputs: tuple[Any, ...], device: str) -> list[torch.Tensor]:
        target = self.target
        model64 = copy.deepcopy(target.model).to(device=device, dtype=torch.float64)
        args64 = tuple(_float64(x, device) for x in inputs)
        outputs = target.compared_outputs(model64, args64, model64, device=device)
        del model64, args64
        return self._keep(("float64", seed), outputs)

    def _keep(self, key: tuple[str, int], outputs: list[torch.Tensor]) -> list[torch.Tensor]:
        if sum(t.numel() * t.element_size() for t in outputs) > KEEP_BYTES:
            self._host_allowed = False  # not kept: the next check would run it on the host again
            return outputs
        kept = [t.to("cpu") for t in outputs]
        del outputs
        free_memory(self.target.device)  # the eager run's activations and outputs: the arms' room
        self._kept[key] = kept
        return kept


def references_of(target: Target) -> ModelReferences:
    """The target's references, made on first use and kept with it for the run: every gate-3
    check in this process shares them."""
    if target.references is None:
        target.references = ModelReferences(target)
    refs: ModelReferences = target.references
    return refs


def _float64(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.float64) if x.is_floating_point() else x.to(device)
    return x


def _host_has_room(target: Target, inputs: tuple[Any, ...], arm_mb: float | None = None) -> bool:
    """Do the float64 model, its inputs and activations (estimated) fit in half the host's
    available memory? The estimate is the larger of :data:`HOST_ACTIVATION_FACTOR` times the
    float64 parameters, buffers and inputs, and, where ``arm_mb`` is known, eager's activations
    taken as :data:`HOST_ACTIVATION_FACTOR` times what the compiled model held at its peak, in
    float64 (activations that grow faster than the inputs, an attention's scores, show there).
    Unknown (no ``/proc/meminfo``): assumed so. More than the host can give does not raise: the
    kernel's OOM killer ends the engine, and the run with it."""
    tensors = [*target.model.parameters(), *target.model.buffers(), *(x for x in inputs if isinstance(x, torch.Tensor))]
    need = HOST_ACTIVATION_FACTOR * sum(8 * t.numel() for t in tensors)
    if arm_mb:
        widen = 8 / torch.empty(0, dtype=target.dtype).element_size()
        need = max(need, int(HOST_ACTIVATION_FACTOR * widen * arm_mb * 2**20))
    available = _available_host_bytes()
    return available is None or need <= available // 2


def _device_draws(device: str) -> bytes | None:
    """The state of the current device's CUDA generator (its seed and offset), to tell whether a
    call drew random numbers there; None where it cannot be read."""
    if device != "cuda":
        return b""
    try:
        return bytes(torch.cuda.get_rng_state().tolist())
    except Exception:  # noqa: BLE001 - unreadable (no CUDA here): the referee stays on the device
        return None


def _available_host_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
