"""Reading output code into an Artifact: kernels, kinds, launches, preserved vendor calls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelopt_bot.capture.artifact import OutputCodeError, kernel_kind, parse_output_code
from kernelopt_bot.pack.keys import kernel_key, source_sha256
from tests.helpers import captured

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "output_code"
FIXTURE_FILES = sorted(FIXTURES.glob("torch-*/*.py"))


def test_capture_of_a_gemm_with_epilogue() -> None:
    art = captured("linear_epilogue.py").artifact
    assert len(art.graphs) == 1
    (kernel,) = art.kernels
    assert kernel.kind == "persistent_reduction"
    assert kernel.heuristic == "persistent_reduction"
    assert kernel.sha256 == source_sha256(kernel.source)
    assert kernel.key == kernel_key(kernel.source)
    assert kernel.params[-1] == "XBLOCK" and kernel.constexprs == ["XBLOCK"]
    assert kernel.signature["XBLOCK"] == "constexpr"
    assert kernel.mutated_args == ["in_out_ptr1"]
    assert kernel.size_hints == {"x": 8, "r0_": 32}
    assert len(kernel.launches) == 1 and kernel.launches[0].args[-2:] == ["8", "32"]
    assert [(c.op, c.kind, c.preserved) for c in art.extern_calls] == [("extern_kernels.addmm", "extern", True)]
    # one rule says what a parameter is, for gate 2's comparison and the search's "writes nothing"
    roles = {name: kernel.param_role(name) for name in kernel.params}
    assert roles["in_out_ptr1"] == "inout" and roles["XBLOCK"] == "other"
    assert {roles[n] for n in kernel.params if n.startswith("in_ptr")} == {"in"} and kernel.writes
    assert kernel.param_role("out_ptr3") == "out" and kernel.param_role("ws_ptr") == "other"


def test_kinds_across_examples() -> None:
    kinds = {k.kind for ex in ("gelu.py", "mlp.py", "softmax.py") for k in captured(ex).artifact.kernels}
    assert {"pointwise", "persistent_reduction"} <= kinds
    assert all(k.kind == "pointwise" for k in captured("gelu.py").artifact.kernels)


def test_graph_breaks_give_several_graphs() -> None:
    art = captured("graph_break.py").artifact
    assert len(art.graphs) == 2
    assert [k.graph for k in art.kernels] == [0, 1]
    assert art.kernel("g1:" + art.kernels[1].name) is art.kernels[1]


def test_kernel_lookup_errors() -> None:
    art = captured("graph_break.py").artifact
    with pytest.raises(KeyError, match="no kernel"):
        art.kernel("triton_missing")


def test_conv_keeps_the_vendor_call() -> None:
    art = captured("conv_bn_gelu.py").artifact
    assert "extern_kernels.convolution" in [c.op for c in art.extern_calls]
    assert all(c.preserved for c in art.extern_calls)


def test_kind_falls_back_to_name_prefix() -> None:
    assert kernel_kind("triton_red_fused_sum_0", None) == "reduction"
    assert kernel_kind("triton_tem_fused_mm_0", None) == "template"
    assert kernel_kind("triton_for_fused_0", None) == "other"
    assert kernel_kind("triton_poi_fused_0", "split_scan") == "other"


def test_docstring_copies_are_not_kernels() -> None:
    code = captured("gelu.py").artifact.graphs[0].code
    decoy = '"""\nfake = async_compile.triton(\'fake\', \'\'\'x\'\'\', device_str=\'cuda\')\n"""\n'
    graph = parse_output_code(decoy + code)
    assert [k.name for k in graph.kernels] == [k.name for k in captured("gelu.py").artifact.kernels]


def test_broken_output_code_is_a_clear_error() -> None:
    with pytest.raises(OutputCodeError, match="does not parse"):
        parse_output_code("def call(:\n")


@pytest.mark.skipif(not FIXTURE_FILES, reason="no output-code fixtures")
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_output_code_parses(path: Path) -> None:
    """Output code captured on other torch versions (the H200's among them) reads the same way."""
    manifest = json.loads((path.parent / "MANIFEST.json").read_text())
    expected = manifest["files"][path.name]
    graph = parse_output_code(path.read_text())
    assert [k.name for k in graph.kernels] == expected["kernels"]
    assert [c.op for c in graph.extern_calls] == expected["extern_calls"]
    for kernel in graph.kernels:
        assert kernel.launches, f"{kernel.name} has no launch site"
        prefix_kind = kernel_kind(kernel.name, None)
        if prefix_kind != "other":
            assert kernel.kind == prefix_kind
        assert kernel.key == kernel_key(kernel.source)


H200_FIXTURES = FIXTURES / "torch-2.11.0"


@pytest.mark.skipif(not H200_FIXTURES.is_dir(), reason="no H200 fixtures")
def test_h200_output_code_details() -> None:
    """Output code captured on the H200 (torch 2.11): CUDA kernels, cuBLAS/cuDNN calls kept."""
    manifest = json.loads((H200_FIXTURES / "MANIFEST.json").read_text())
    assert "H200" in (manifest["device_target"] or "")
    graph = parse_output_code((H200_FIXTURES / "linear_epilogue_bf16.py").read_text())
    assert any(c.op.startswith("extern_kernels.") for c in graph.extern_calls)
    for kernel in graph.kernels:
        assert "device_str='cuda'" in graph.code
        assert kernel.signature and all(kernel.launches)
    conv = parse_output_code((H200_FIXTURES / "conv_bn_gelu.py").read_text())
    assert "extern_kernels.convolution" in [c.op for c in conv.extern_calls]
    breaks = sorted(H200_FIXTURES.glob("graph_break_g*.py"))
    assert len(breaks) == 2


@pytest.mark.skipif(not H200_FIXTURES.is_dir(), reason="no H200 fixtures")
def test_pack_rewrite_applies_to_h200_kernel_text() -> None:
    """The runtime's key lookup works on real CUDA kernel text, also after a flag flip."""
    from kernelopt_bot.pack import runtime
    from kernelopt_bot.pack.format import KernelPack, LaunchConfig, PackEntry

    kernel = parse_output_code((H200_FIXTURES / "rmsnorm.py").read_text()).kernels[0]
    pack = KernelPack()
    pack.add(PackEntry(kernel.key, kernel.name, config=LaunchConfig({"XBLOCK": 1, "R0_BLOCK": 2048}, 8, 1)))
    flipped = kernel.source.replace("'force_disable_caches': False", "'force_disable_caches': True, "
                                    "'coordinate_descent_tuning': True")
    assert flipped != kernel.source
    runtime.install(pack, reset=False)
    try:
        for text in (kernel.source, flipped):
            out = runtime.rewrite(kernel.name, text, "cuda")
            assert runtime.PIN_MARKER in out and "'R0_BLOCK': 2048" in out
        other = runtime.rewrite(kernel.name, kernel.source.replace("r0_numel = 4096", "r0_numel = 2048"), "cuda")
        assert runtime.PIN_MARKER not in other
    finally:
        runtime.uninstall(reset=False)
