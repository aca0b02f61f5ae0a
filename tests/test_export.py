"""`kernelopt export PACK --format inductor`: pinned configs that stock PyTorch loads by itself.

The end-to-end test makes a pack the way `optimize` does (``candidate_pack`` for a captured
example kernel), exports it through the CLI as a user runs it, and then runs the printed
activation lines in a fresh Python process that imports torch but never kernelopt: the kernel's
autotuner must hold exactly the pinned config, on a fresh compile and on an FX-graph cache hit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelopt_bot.candidate import Candidate, candidate_pack
from kernelopt_bot.pack.export import (
    FUSED_MARK,
    inductor_lookup_key,
    inductor_table,
    lookup_key_or_none,
)
from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry, PackError
from tests.helpers import EXAMPLES, ROOT, captured

EXAMPLE = "sum_middle_dim.py"  # one persistent reduction, no libdevice call: stock interpreter runs it
PINNED = LaunchConfig({"XBLOCK": 2}, num_warps=2, num_stages=1)


def _user_env() -> dict[str, str]:
    """The environment a user has: no interpreter switch the test session turned on for itself."""
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    return env


def test_lookup_key_is_the_one_inductor_computes() -> None:
    """Both of Inductor's paths: the autotuner's (``fn.src`` of the loaded kernel, ``size_hints``)
    and the parallel-compile parent's (text after ``@triton.jit``, the ``size_hints=`` text)."""
    from torch._inductor.async_compile import size_hints_regex
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.runtime.triton_heuristics import generate_lookup_hash_from_source_code
    from triton.runtime.jit import JITFunction

    kernel = captured(EXAMPLE).artifact.kernels[0]
    ours = inductor_lookup_key(kernel.source)
    match = size_hints_regex.search(kernel.source)
    assert match is not None
    parent = generate_lookup_hash_from_source_code(match.group(1), kernel.source.split("@triton.jit\n")[1])
    autotuner = getattr(PyCodeCache.load(kernel.source), kernel.name)
    jit_fn = autotuner.fn if hasattr(autotuner.fn, "src") else JITFunction(autotuner.fn.fn)  # interpreted
    in_autotuner = generate_lookup_hash_from_source_code(str(autotuner.size_hints), jit_fn.src)
    assert ours == parent == in_autotuner
    renamed = kernel.source.replace(kernel.name, kernel.name.replace("_0", "_7"))
    assert inductor_lookup_key(renamed) == ours, "Inductor's key ignores the kernel's name"
    assert inductor_lookup_key(kernel.source.replace("r0_numel = 64", "r0_numel = 32")) != ours
    assert lookup_key_or_none("not a kernel") is None


def _entry(name: str, *, source: str | None = None, config: LaunchConfig | None = PINNED,
           lookup_key: str | None = "a" * 64) -> PackEntry:
    return PackEntry(key=name.ljust(64, "0")[:64], kernel_name=name, source=source, config=config,
                     lookup_key=lookup_key)


def test_only_config_entries_inductor_can_key_are_exported() -> None:
    pack = KernelPack()
    pack.add(_entry("triton_poi_fused_add_0"))
    pack.add(_entry("triton_poi_fused_mul_1", source="@triton.jit\ndef k(): pass\n"))
    pack.add(_entry("triton_poi_fused_sub_2", lookup_key=None))
    pack.add(_entry("triton_poi_3", lookup_key="b" * 64))
    pack.add(_entry("triton_poi_fused_div_4", config=LaunchConfig({"XBLOCK": 4, "GROUP_M": 8}),
                    lookup_key="c" * 64))
    result = inductor_table(pack)
    assert result.table == {"a" * 64: {"XBLOCK": 2, "num_warps": 2, "num_stages": 1}}
    assert [e.kernel_name for e in result.exported] == ["triton_poi_fused_add_0"]
    reasons = {e.kernel_name: reason for e, reason in result.kept}
    assert "replaces the kernel source" in reasons["triton_poi_fused_mul_1"]
    assert "no Inductor lookup key" in reasons["triton_poi_fused_sub_2"]
    assert FUSED_MARK in reasons["triton_poi_3"]
    assert "GROUP_M" in reasons["triton_poi_fused_div_4"]


def test_lookup_key_round_trips_and_is_checked() -> None:
    entry = _entry("triton_poi_fused_add_0")
    assert PackEntry.from_json(entry.to_json()) == entry
    with pytest.raises(PackError, match="lookup_key"):
        PackEntry.from_json({**entry.to_json(), "lookup_key": "not-a-hash"})
    assert PackEntry.from_json({k: v for k, v in entry.to_json().items() if k != "lookup_key"}).lookup_key is None


# A fresh process with stock PyTorch only: interpreter mode set up by hand, as
# kernelopt_bot.device.prepare_device("cpu") does (no libdevice shim: the example
# kernel calls none), then the activation lines exactly as `kernelopt export` printed them.
# One shim more than prepare_device: Inductor's lookup reads ``fn.src``, which triton's
# JITFunction has on a GPU and its InterpretedFunction lacks (AttributeError with a non-empty
# table, torch 2.13 + triton 3.9); triton's own JITFunction computes it here.
_STOCK_SCRIPT = """\
import importlib.util, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
os.environ["KERNELOPT_EXAMPLE_SIZE"] = "tiny"
import torch
import torch._inductor.config as inductor_config
import torch.utils._triton as torch_triton
import torch._inductor.runtime.triton_helpers as triton_helpers
torch_triton.triton_hash_with_backend = lambda: "KERNELOPT_INTERPRETER"
triton_helpers.set_driver_to_gpu = lambda: None
inductor_config.cpu_backend = "triton"
inductor_config.compile_threads = 1
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction
InterpretedFunction.src = property(lambda self: JITFunction(self.fn).src)

{activation}

from torch._dynamo.utils import counters
from torch._inductor.codecache import PyCodeCache
spec = importlib.util.spec_from_file_location("example", {example!r})
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
model = example.Model(*example.get_init_inputs())
inputs = example.get_inputs()
with torch.no_grad():
    out = torch.compile(model)(*inputs)
    torch.testing.assert_close(out, model(*inputs))
# The kernel's autotuner (the kernel module and the output module that loaded it both name it).
autotuners = {{id(a): a for a in (getattr(m, {kernel!r}, None) for m in PyCodeCache.modules) if a is not None}}
assert len(autotuners) == 1, autotuners
configs = [
    {{"kwargs": dict(c.kwargs), "num_warps": c.num_warps, "num_stages": c.num_stages}}
    for c in next(iter(autotuners.values())).configs
]
print(json.dumps({{"configs": configs, "fx_cache_hits": counters["inductor"]["fxgraph_cache_hit"],
                  "kernelopt_imported": any(m.startswith("kernelopt") for m in sys.modules)}}))
"""


def test_exported_table_pins_the_config_in_a_fresh_stock_process(tmp_path: Path) -> None:
    cap = captured(EXAMPLE)
    kernel = cap.artifact.kernels[0]
    default = cap.recording(kernel.graph, kernel.name).chosen_config
    assert default is not None and default != PINNED.to_json(), "the pin must differ from the compiler's choice"
    pack = candidate_pack(cap, kernel, Candidate("pinned", config=PINNED))  # what `optimize` writes
    replaced = PackEntry(key="f" * 64, kernel_name="triton_poi_fused_other_0", source=kernel.source)
    pack.add(replaced)
    pack_path = tmp_path / "pack.json"
    pack.save(pack_path)

    cli = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "export", str(pack_path), "--format",
                          "inductor"], capture_output=True, text=True, cwd=ROOT, env=_user_env(), timeout=300)
    assert cli.returncode == 0, cli.stderr
    table_path = tmp_path / "pack.inductor.json"
    assert f"wrote {table_path}: 1 of 2 pack entries" in cli.stdout
    assert "triton_poi_fused_other_0: replaces the kernel source" in cli.stdout
    assert json.loads(table_path.read_text()) == {inductor_lookup_key(kernel.source): {
        "XBLOCK": 2, "num_warps": 2, "num_stages": 1}}
    printed = cli.stdout.split("(no kernelopt import):\n", 1)[1].splitlines()
    activation = "\n".join(line.strip() for line in printed if line.startswith("  "))
    assert "autotune_lookup_table" in activation and "kernelopt" not in activation

    script = tmp_path / "stock.py"
    script.write_text(_STOCK_SCRIPT.format(activation=activation, example=str(EXAMPLES / EXAMPLE),
                                           kernel=kernel.name))
    env = {**_user_env(), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")}
    runs = []
    for _ in range(2):  # a fresh compile, then an FX-graph cache hit
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    for run in runs:
        assert run["configs"] == [PINNED.to_json()]
        assert run["kernelopt_imported"] is False
    assert runs[0]["fx_cache_hits"] == 0 and runs[1]["fx_cache_hits"] >= 1


def test_export_rejects_a_file_that_is_not_a_pack(tmp_path: Path) -> None:
    bad = tmp_path / "nope.json"
    bad.write_text(textwrap.dedent('{"entries": []}'))
    cli = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "export", str(bad)], capture_output=True,
                         text=True, cwd=ROOT, env=_user_env(), timeout=300)
    assert cli.returncode == 2
    assert cli.stderr.startswith("error: not a kernelopt pack")
    assert not (tmp_path / "nope.inductor.json").exists()


def test_a_pin_made_by_hand_exports(tmp_path: Path) -> None:
    """`kernelopt pin` (the hand-pinning user's path) records the key `export` needs."""
    kernel = captured(EXAMPLE).artifact.kernels[0]
    pack_path = tmp_path / "pinned.json"
    pin = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "pin", str(EXAMPLES / EXAMPLE), "--kernel",
                          kernel.name, "--config", json.dumps(PINNED.to_json()), "--out", str(pack_path)],
                         capture_output=True, text=True, cwd=ROOT, env=_user_env(), timeout=300)
    assert pin.returncode == 0, pin.stderr
    out = tmp_path / "table.json"
    cli = subprocess.run([sys.executable, "-m", "kernelopt_bot.cli", "export", str(pack_path), "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, env=_user_env(), timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(out.read_text()) == {inductor_lookup_key(kernel.source): PINNED.to_json()["kwargs"] | {
        "num_warps": 2, "num_stages": 1}}
