"""Gate 3's references (verify/references.py): each seed's eager outputs and float64 referee are
computed once a run and kept in host memory, and the referee runs on the host where it has room.
Before, every check (each candidate, each compiler option, the final pack) ran both again on the
GPU, and the referee's float64 copy of a bf16 model was the engine's peak (4130 MiB, 3.7x the
model, on an H100, 12-07)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernelopt_bot.targets import Target, load_target
from kernelopt_bot.verify import references as refs_module
from kernelopt_bot.verify.model import check_model
from kernelopt_bot.verify.references import ModelReferences, references_of
from tests.helpers import ROOT

TARGET = str(ROOT / "benchmarks" / "unseen" / "attention_pool.py")


def _counted(target: Any) -> list[int]:
    """A list that grows by one on every forward of the target's model (and of its float64 copies,
    which carry the hook along)."""
    calls: list[int] = []
    target.model.register_forward_hook(lambda *_: calls.append(1))
    return calls


class _OutputsArm:
    """An arm that answers "outputs" with ``make(seed)``."""

    where = "process"

    def __init__(self, make: Any) -> None:
        self.make = make
        self.info = {"applied": ["k"], "skipped": []}

    def request(self, what: str, seed: int, timeout_s: float = 600.0) -> Any:
        assert what == "outputs"
        return self.make(seed)


def test_each_reference_is_computed_once_per_seed_and_kept_on_the_host() -> None:
    target = load_target(TARGET, "cpu", "bf16")
    calls = _counted(target)
    refs = references_of(target)
    assert references_of(target) is refs  # one per target
    first = refs.eager(101)
    assert refs.eager(101) is first and len(calls) == 1
    f64 = refs.float64(101)
    assert refs.float64(101) is f64 and len(calls) == 2
    assert all(t.dtype == torch.float64 and t.device.type == "cpu" for t in f64)
    refs.eager(102)
    assert len(calls) == 3  # another seed is another computation
    fresh = target.compared_outputs(target.model, target.make_inputs(101), device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(first, fresh))


def test_check_model_shares_them_across_checks() -> None:
    """Two candidates' gate 3 on two seeds, each needing the referee (their outputs are off by more
    than the tight tolerance): two eager runs and two referees in all, not eight runs."""
    target = load_target(TARGET, "cpu", "bf16")
    plain = load_target(TARGET, "cpu", "bf16")  # answers for the arms, outside the count
    calls = _counted(target)

    def eager(seed: int) -> list[torch.Tensor]:
        return plain.compared_outputs(plain.model, plain.make_inputs(seed), device="cpu")

    def nudged(seed: int) -> list[torch.Tensor]:  # off by a few bf16 rounding units: the referee decides
        return [(t.double() * (1 + 3 * 2**-8 * (-1) ** torch.arange(t.numel()).reshape(t.shape))).to(t.dtype)
                for t in eager(seed)]

    for _ in range(2):
        result = check_model(target, _OutputsArm(eager), _OutputsArm(nudged), "k", seeds=(101, 102))
        assert result.numbers["tight"] is False, result.reason
    assert len(calls) == 4


def _gpu_labelled(monkeypatch: pytest.MonkeyPatch, *, train: bool = False, draws: bool = False) -> Any:
    """A target that says "cuda", its tensors on the CPU (a GPU call would raise on this machine):
    its compared outputs asked for on "cuda" stay on the CPU, and the device's generator is a
    counter its model's forward moves when ``draws`` (dropout on the GPU)."""
    target = load_target(TARGET, "cpu", "bf16", train=train)
    target.device = "cuda"
    plain = Target.compared_outputs

    def compared(call: Any, inputs: Any, model: Any = None, *, device: str | None = None) -> Any:
        return plain(target, call, inputs, model, device="cpu" if device == "cuda" else device)

    target.compared_outputs = compared
    offset = [0]
    if draws:
        target.model.register_forward_hook(lambda *_: offset.__setitem__(0, offset[0] + 4))
    monkeypatch.setattr(refs_module, "_device_draws", lambda device: offset[0])
    return target


def test_the_referee_of_a_gpu_target_runs_on_the_host_where_it_has_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the host has room, the device is not asked."""
    target = _gpu_labelled(monkeypatch)
    where: list[str] = []
    referee = ModelReferences._referee

    def spy(self: ModelReferences, seed: int, inputs: Any, device: str) -> Any:
        where.append(device)
        return referee(self, seed, inputs, device)

    monkeypatch.setattr(ModelReferences, "_referee", spy)
    outputs = ModelReferences(target).float64(101)
    assert where == ["cpu"] and all(t.device.type == "cpu" for t in outputs)


def _scripted(monkeypatch: pytest.MonkeyPatch, fails: dict[str, BaseException]) -> list[str]:
    """``_referee`` replaced: it records where it was asked to run, and raises ``fails[device]``."""
    where: list[str] = []

    def scripted(self: ModelReferences, seed: int, inputs: Any, device: str) -> Any:
        where.append(device)
        if device in fails:
            raise fails[device]
        return [torch.zeros(2, dtype=torch.float64)]

    monkeypatch.setattr(ModelReferences, "_referee", scripted)
    return where


def test_without_room_on_the_host_the_device_runs_the_referee(monkeypatch: pytest.MonkeyPatch) -> None:
    target = _gpu_labelled(monkeypatch)
    monkeypatch.setattr(refs_module, "_available_host_bytes", lambda: 1024)
    where = _scripted(monkeypatch, {})
    ModelReferences(target).float64(101)
    assert where == ["cuda"]


def test_out_of_memory_on_the_device_falls_back_to_the_host_once(monkeypatch: pytest.MonkeyPatch) -> None:
    target = _gpu_labelled(monkeypatch)
    monkeypatch.setattr(refs_module, "_available_host_bytes", lambda: 1024)
    where = _scripted(monkeypatch, {"cuda": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4 GiB")})
    ModelReferences(target).float64(101)
    assert where == ["cuda", "cpu"]


def test_model_code_that_runs_only_on_the_device_gets_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host tried first fails (a model that makes its tensors on the GPU): the device decides,
    and its own failure is the one raised, the host's chained to it."""
    target = _gpu_labelled(monkeypatch)
    host = RuntimeError("Expected all tensors to be on the same device")
    where = _scripted(monkeypatch, {"cpu": host})
    refs = ModelReferences(target)
    assert refs.float64(101)[0].shape == (2,)
    assert where == ["cpu", "cuda"]
    refs.float64(102)
    assert where == ["cpu", "cuda", "cuda"]  # the host failed once: not asked again
    where = _scripted(monkeypatch, {"cpu": host, "cuda": ValueError("no float64 kernel")})
    with pytest.raises(ValueError, match="no float64 kernel") as raised:
        ModelReferences(target).float64(101)
    assert raised.value.__cause__ is host and where == ["cpu", "cuda"]


def test_a_model_that_draws_on_the_device_gets_its_referee_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropout on the GPU draws from the device's generator; on the host the referee would draw
    other masks, a referee of another computation (the compiler's error against it large, and a
    wrong candidate's within 10x of it). A training step draws so; an inference model may."""
    where = _scripted(monkeypatch, {})
    ModelReferences(_gpu_labelled(monkeypatch, draws=True)).float64(101)
    assert where == ["cuda"]
    where = _scripted(monkeypatch, {})
    ModelReferences(_gpu_labelled(monkeypatch, train=True)).float64(101)
    assert where == ["cuda"]
    where = _scripted(monkeypatch, {})
    ModelReferences(_gpu_labelled(monkeypatch)).float64(101)
    assert where == ["cpu"]


def test_the_hosts_room_is_judged_from_the_compiled_models_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """Activations that grow faster than the inputs (an attention's scores) are not in the
    parameters and inputs: where the baseline arm said what it held at its peak, that counts, in
    float64 (a bf16 arm's 100 MiB is 400 MiB wide, 1.6 GiB with the activation factor)."""
    target = load_target(TARGET, "cpu", "bf16")
    inputs = target.make_inputs(101)
    monkeypatch.setattr(refs_module, "_available_host_bytes", lambda: 4 * 2**30)  # half of it, 2 GiB, for the referee
    assert refs_module._host_has_room(target, inputs)
    assert refs_module._host_has_room(target, inputs, arm_mb=100.0)
    assert not refs_module._host_has_room(target, inputs, arm_mb=200.0)


def test_the_hosts_allocator_running_out_is_out_of_memory() -> None:
    from kernelopt_bot.harness.failures import is_out_of_memory

    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: "
                                         "can't allocate memory: you tried to allocate 70368744177664 bytes."))
    assert not is_out_of_memory(RuntimeError("Expected all tensors to be on the same device"))


def test_a_reference_over_the_keep_limit_is_computed_per_check(monkeypatch: pytest.MonkeyPatch) -> None:
    target = load_target(TARGET, "cpu", "bf16")
    calls = _counted(target)
    monkeypatch.setattr(refs_module, "KEEP_BYTES", 16)
    refs = ModelReferences(target)
    refs.eager(101)
    refs.eager(101)
    assert len(calls) == 2
