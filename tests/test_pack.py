"""KernelPack files: round trip, validation, guards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_bot.pack.format import Guard, KernelPack, LaunchConfig, PackEntry, PackError


def _pack() -> KernelPack:
    pack = KernelPack(target="examples/softmax.py", created_by="test", measured={"speedup": 1.1})
    pack.add(PackEntry("a" * 64, "triton_per_fused__softmax_0",
                       config=LaunchConfig({"XBLOCK": 8}, num_warps=4, num_stages=1),
                       guard=Guard("2.11.0+cu130", "3.6.0", "NVIDIA H200", "9.0"),
                       measured={"kernel_ms": 0.1}))
    pack.add(PackEntry("b" * 64, "triton_poi_fused_gelu_0", source="@triton.jit\ndef k(): pass\n"))
    return pack


def test_round_trip(tmp_path: Path) -> None:
    pack = _pack()
    path = tmp_path / "pack.json"
    pack.save(path)
    again = KernelPack.load(path)
    assert again.to_json() == pack.to_json()
    assert again.entries["a" * 64].config == LaunchConfig({"XBLOCK": 8}, 4, 1)
    data = json.loads(path.read_text())
    assert data["format"] == "kernelopt-pack" and data["version"] == 1


def test_guard_matching() -> None:
    guard = Guard("2.11.0+cu130", "3.6.0", "NVIDIA H200", "9.0")
    assert guard.matches(Guard("2.11.0", "3.6.0", "NVIDIA H200", "9.0"))
    assert not guard.matches(Guard("2.13.0", "3.6.0", "NVIDIA H200", "9.0"))
    assert "gpu" in (guard.mismatch(Guard("2.11.0", "3.6.0", "NVIDIA H100", "9.0")) or "")
    assert Guard().matches(Guard("2.13.0", "3.9.0", "cpu", None))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="other"), "not a kernelopt pack"),
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d.update(entries={}), "must be a list"),
        (lambda d: d["entries"][0].pop("key"), "key"),
        (lambda d: d["entries"][0].update(source=None, config=None), "neither source nor config"),
        (lambda d: d["entries"][0]["config"]["kwargs"].update(XBLOCK="8"), "XBLOCK=.8. must be a"),
        (lambda d: d["entries"][0]["guard"].update(cuda="12"), "bad guard"),
    ],
)
def test_invalid_packs(mutate: object, message: str) -> None:
    data = _pack().to_json()
    mutate(data)  # type: ignore[operator]
    with pytest.raises(PackError, match=message):
        KernelPack.from_json(data)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="cannot read"):
        KernelPack.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PackError, match="not valid JSON"):
        KernelPack.load(bad)
