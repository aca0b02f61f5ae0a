"""The pack key survives flags that do not change a kernel, and moves when the kernel does."""

from __future__ import annotations

import pytest

from kernelopt_bot.pack.keys import KernelSourceError, kernel_key, normalized_form, source_sha256
from tests.helpers import captured


@pytest.fixture(scope="module")
def kernel_source() -> str:
    return captured("linear_epilogue.py").artifact.kernels[0].source


def _flip(source: str, flag: str, old: str, new: str) -> str:
    needle = f"'{flag}': {old}"
    assert needle in source, f"{needle} not in source"
    return source.replace(needle, f"'{flag}': {new}")


@pytest.mark.parametrize(
    ("flag", "old", "new"),
    [
        ("force_disable_caches", "False", "True"),
        ("max_autotune", "False", "True"),
        ("max_autotune_pointwise", "False", "True"),
        ("autotune_local_cache", "True", "False"),
    ],
)
def test_config_flags_do_not_move_the_key(kernel_source: str, flag: str, old: str, new: str) -> None:
    flipped = _flip(kernel_source, flag, old, new)
    assert source_sha256(flipped) != source_sha256(kernel_source)
    assert kernel_key(flipped) == kernel_key(kernel_source)


def test_added_meta_entry_and_backend_hash_do_not_move_the_key(kernel_source: str) -> None:
    extra = kernel_source.replace("inductor_meta={", "inductor_meta={'coordinate_descent_tuning': True, ", 1)
    assert kernel_key(extra) == kernel_key(kernel_source)


def test_renumbered_kernel_keeps_its_key(kernel_source: str) -> None:
    name = captured("linear_epilogue.py").artifact.kernels[0].name
    assert name.endswith("_0")
    renumbered = kernel_source.replace(name, name[:-2] + "_1")
    assert renumbered != kernel_source
    assert kernel_key(renumbered) == kernel_key(kernel_source)


def test_comments_and_spacing_do_not_move_the_key(kernel_source: str) -> None:
    noisy = kernel_source.replace("    tmp2 = tmp0 + tmp1", "    # a comment\n    tmp2 = tmp0  +  tmp1")
    assert noisy != kernel_source
    assert kernel_key(noisy) == kernel_key(kernel_source)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("tmp2 = tmp0 + tmp1", "tmp2 = tmp0 - tmp1"),  # the computation
        ("'x': 8", "'x': 16"),  # size hints
        ("'mutated_arg_names': ['in_out_ptr1']", "'mutated_arg_names': []"),  # mutation contract
        ("'grid_type': 'Grid1D'", "'grid_type': 'Grid2D'"),  # launch contract
        ("'in_ptr0': '*fp32'", "'in_ptr0': '*bf16'"),  # signature dtypes
    ],
)
def test_semantic_changes_move_the_key(kernel_source: str, old: str, new: str) -> None:
    assert old in kernel_source, old
    assert kernel_key(kernel_source.replace(old, new)) != kernel_key(kernel_source)


def test_normalized_form_names_no_kernel(kernel_source: str) -> None:
    form = normalized_form(kernel_source)
    assert "triton_" not in form["fn"].split("(")[0]
    assert form["heuristic"] == "persistent_reduction"
    assert form["meta"]["grid_type"] == "Grid1D"


def test_not_a_kernel_is_an_error() -> None:
    with pytest.raises(KernelSourceError):
        kernel_key("x = 1\n")
    with pytest.raises(KernelSourceError):
        kernel_key("def broken(:\n")
