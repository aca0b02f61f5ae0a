"""Gate 3's references (verify/references.py): each seed's eager outputs and float64 referee are
computed once a run and kept in host memory, and the referee runs on the host where it has room.
Before, every check (each candidate, each compiler option, the final pack) ran both again on the
GPU, and the referee's float64 copy of a bf16 model was the engine's peak (4130 MiB, 3.7x the
model, on an H100, 12-07)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernelopt_bot.targets import load_target
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


def test_the_referee_of_a_gpu_target_runs_on_the_host_where_it_has_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the host has room, the device is not asked (a target that says "cuda", its tensors on
    the CPU: a GPU call would raise on this machine)."""
    target = load_target(TARGET, "cpu", "bf16")
    target.device = "cuda"
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
    target = load_target(TARGET, "cpu", "bf16")
    target.device = "cuda"
    monkeypatch.setattr(refs_module, "_available_host_bytes", lambda: 1024)
    where = _scripted(monkeypatch, {})
    ModelReferences(target).float64(101)
    assert where == ["cuda"]


def test_out_of_memory_on_the_device_falls_back_to_the_host_once(monkeypatch: pytest.MonkeyPatch) -> None:
    target = load_target(TARGET, "cpu", "bf16")
    target.device = "cuda"
    monkeypatch.setattr(refs_module, "_available_host_bytes", lambda: 1024)
    where = _scripted(monkeypatch, {"cuda": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4 GiB")})
    ModelReferences(target).float64(101)
    assert where == ["cuda", "cpu"]


def test_model_code_that_runs_only_on_the_device_gets_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host tried first fails (a model that makes its tensors on the GPU): the device decides,
    and its own failure is the one raised, the host's chained to it."""
    target = load_target(TARGET, "cpu", "bf16")
    target.device = "cuda"
    host = RuntimeError("Expected all tensors to be on the same device")
    where = _scripted(monkeypatch, {"cpu": host})
    assert ModelReferences(target).float64(101)[0].shape == (2,)
    assert where == ["cpu", "cuda"]
    where = _scripted(monkeypatch, {"cpu": host, "cuda": ValueError("no float64 kernel")})
    with pytest.raises(ValueError, match="no float64 kernel") as raised:
        ModelReferences(target).float64(101)
    assert raised.value.__cause__ is host and where == ["cpu", "cuda"]


def test_a_reference_over_the_keep_limit_is_computed_per_check(monkeypatch: pytest.MonkeyPatch) -> None:
    target = load_target(TARGET, "cpu", "bf16")
    calls = _counted(target)
    monkeypatch.setattr(refs_module, "KEEP_BYTES", 16)
    refs = ModelReferences(target)
    refs.eager(101)
    refs.eager(101)
    assert len(calls) == 2
