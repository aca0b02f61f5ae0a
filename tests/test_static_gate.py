"""Gate 1 (static) on real Inductor kernels: honest rewrites pass, every cheat names its rule.

The originals are compiled from the examples on the CPU interpreter (tiny sizes), once per module:
a persistent reduction (softmax, sum over the middle dim), a pointwise kernel (gelu) and a looped
reduction (sum over the middle dim with persistent reductions turned off, so ``R0_BLOCK`` is a
launch-config constexpr). Cheating candidates are made by editing the original text, so each one
differs from an accepted kernel by exactly the trick under test.
"""

from __future__ import annotations

import dataclasses

import pytest

from kernelopt_bot.capture.artifact import TritonKernel
from kernelopt_bot.device import DeviceLimits
from kernelopt_bot.pack.format import LaunchConfig
from kernelopt_bot.verify.static import check_config, check_source
from kernelopt_bot.verify.verdict import GateResult

# --------------------------------------------------------------------------------------------
# Fixtures and helpers


def _compile(example: str, options: dict[str, object] | None = None) -> TritonKernel:
    from kernelopt_bot.capture.recorder import capture
    from kernelopt_bot.targets import load_target

    cap = capture(load_target(f"examples/{example}.py", "cpu"), record=False, options=options)
    kernels = cap.artifact.kernels
    assert len(kernels) == 1, [k.name for k in kernels]
    return kernels[0]


@pytest.fixture(scope="module")
def kernels() -> dict[str, TritonKernel]:
    """Each example compiles once for the whole module."""
    return {
        "softmax": _compile("softmax"),
        "gelu": _compile("gelu"),
        "sum": _compile("sum_middle_dim"),
        "sum_looped": _compile("sum_middle_dim", {"triton.persistent_reductions": False}),
    }


@pytest.fixture(scope="module")
def softmax(kernels: dict[str, TritonKernel]) -> TritonKernel:
    return kernels["softmax"]


@pytest.fixture(scope="module")
def gelu(kernels: dict[str, TritonKernel]) -> TritonKernel:
    return kernels["gelu"]


@pytest.fixture(scope="module")
def looped(kernels: dict[str, TritonKernel]) -> TritonKernel:
    return kernels["sum_looped"]


def edit(source: str, old: str, new: str, count: int = 1) -> str:
    """Replace text that must be there: a cheat that silently did not apply would pass for the
    wrong reason."""
    assert old in source, f"{old!r} not in kernel source"
    return source.replace(old, new, count)


def add_body_line(kernel: TritonKernel, line: str) -> str:
    """Insert ``line`` as the first statement of the kernel body."""
    header_end = kernel.source.index(f"def {kernel.name}(")
    colon = kernel.source.index(":\n", kernel.source.index(")", header_end))
    return kernel.source[: colon + 2] + f"    {line}\n" + kernel.source[colon + 2 :]


def add_import(source: str, line: str) -> str:
    return edit(source, "import triton\n", f"import triton\n{line}\n")


def assert_passed(result: GateResult) -> None:
    assert result.name == "static"
    assert result.passed is True, result.reason


def assert_rejected(result: GateResult, rule: str, *words: str) -> None:
    """Rejected by ``rule``, and the reason says so (and mentions ``words``)."""
    assert result.name == "static"
    assert result.passed is False, f"expected a '{rule}' rejection, got a pass"
    assert result.reason.startswith(f"{rule}:"), result.reason
    assert result.numbers.get("rule") == rule
    for word in words:
        assert word in result.reason, (word, result.reason)


# --------------------------------------------------------------------------------------------
# check_source: honest candidates pass


@pytest.mark.parametrize("which", ["softmax", "gelu", "sum", "sum_looped"])
def test_original_passes(kernels: dict[str, TritonKernel], which: str) -> None:
    kernel = kernels[which]
    result = check_source(kernel, kernel.source)
    assert_passed(result)
    assert result.numbers["lines"] == len(kernel.source.splitlines())


def test_comments_and_blank_lines_pass(softmax: TritonKernel) -> None:
    src = edit(softmax.source, "    tmp5 = tmp0 - tmp4\n", "\n    # subtract the row max\n\n    tmp5 = tmp0 - tmp4  # stable\n")
    src = "# a rewritten softmax\n\n" + src.replace("\n\n", "\n\n\n")
    assert_passed(check_source(softmax, src))


def test_equivalent_rewrite_passes(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "tmp2 = tmp0 * tmp1", "tmp2 = tmp1 * tmp0")
    assert_passed(check_source(gelu, src))


def test_restructured_body_passes(softmax: TritonKernel) -> None:
    """A real rewrite: the exp and the division folded into one expression, local renamed."""
    src = edit(softmax.source, "    tmp11 = (tmp6 / tmp10)\n    tl.store(in_out_ptr0 + (r0_1 + 128*x0), tmp11, xmask)",
               "    result = libdevice.exp(tmp5) / tmp10\n    tl.store(in_out_ptr0 + (r0_1 + 128*x0), result, xmask)")
    assert_passed(check_source(softmax, src))


@pytest.mark.parametrize("line", ['tl.device_print("pid", tl.program_id(0))', "tl.device_print('%s%n', tmp0)",
                                  "tl.static_print('x')", "print('x')"])
def test_prints_are_rejected(gelu: TritonKernel, line: str) -> None:
    """Format strings would reach the GPU's printf or the host console; no kernel needs to print."""
    result = check_source(gelu, add_body_line(gelu, line))
    assert result.passed is False, line


def test_power_of_two_hardcoded_block_passes(softmax: TritonKernel) -> None:
    src = edit(softmax.source, "R0_BLOCK: tl.constexpr = 128", "R0_BLOCK: tl.constexpr = 256")
    assert_passed(check_source(softmax, src))


def test_size_hints_values_may_change(gelu: TritonKernel) -> None:
    assert_passed(check_source(gelu, edit(gelu.source, "size_hints={'x': 512}", "size_hints={'x': 1024}")))


def test_module_constant_literal_passes(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "\n@triton_heuristics", "\nHALF: tl.constexpr = tl.constexpr(0.5)\nSCALE = 2\n@triton_heuristics")
    src = edit(src, "tl.full([1], 0.5, tl.float32)", "tl.full([1], HALF, tl.float32)")
    assert_passed(check_source(gelu, src))


def test_helper_jit_function_allowed_when_original_has_it(softmax: TritonKernel) -> None:
    """Inductor emits module-level @triton.jit combine helpers for some scans (cummax)."""
    helper = "@triton.jit\ndef _triton_helper_fn_add0(arg0_0, arg1_0):\n    return arg0_0 + arg1_0\n\n"
    with_helper = dataclasses.replace(softmax, source=edit(softmax.source, "@triton_heuristics", helper + "@triton_heuristics"))
    assert_passed(check_source(with_helper, with_helper.source))
    renamed = edit(with_helper.source, "_triton_helper_fn_add0", "_my_helper")
    assert_rejected(check_source(with_helper, renamed), "single-kernel", "_my_helper")


def test_inline_asm_allowed_with_opt_in(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, 'y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [xnumel], '
                              "dtype=tl.int32, is_pure=True, pack=1)")
    assert_rejected(check_source(gelu, src), "inline-asm", "allow_inline_asm")
    assert_passed(check_source(gelu, src, allow_inline_asm=True))


# --------------------------------------------------------------------------------------------
# check_source: cheats and broken candidates are rejected by the rule responsible


def test_syntax_error(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, edit(gelu.source, "tmp2 = tmp0 * tmp1", "tmp2 = tmp0 * (tmp1")),
                    "syntax", "does not parse")


@pytest.mark.parametrize("text", ["x = 1\x00", "y = " + "-" * 100000 + "1", "z = " + "(" * 300 + ")" * 300])
def test_hostile_text_is_rejected_not_raised(gelu: TritonKernel, text: str) -> None:
    """Null bytes and pathological nesting make the parser fail; the gate must still answer."""
    assert_rejected(check_source(gelu, text), "syntax")


def test_wrong_name(gelu: TritonKernel) -> None:
    src = edit(gelu.source, f"def {gelu.name}(", "def triton_poi_fused_gelu_fast(")
    assert_rejected(check_source(gelu, src), "single-kernel", gelu.name)


def test_two_jit_functions(gelu: TritonKernel) -> None:
    src = gelu.source + "\n@triton.jit\ndef another_kernel(in_ptr0, XBLOCK: tl.constexpr):\n    pass\n"
    assert_rejected(check_source(gelu, src), "single-kernel", "another_kernel")


def test_no_jit_function(gelu: TritonKernel) -> None:
    src = "import triton\nimport triton.language as tl\n"
    assert_rejected(check_source(gelu, src), "single-kernel", "no @triton.jit")


def test_reordered_params(softmax: TritonKernel) -> None:
    src = edit(softmax.source, "(in_out_ptr0, in_ptr0, xnumel", "(in_ptr0, in_out_ptr0, xnumel")
    assert_rejected(check_source(softmax, src), "parameters", "order")


def test_extra_param(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "XBLOCK : tl.constexpr):", "XBLOCK : tl.constexpr, scratch_ptr):")
    assert_rejected(check_source(gelu, src), "parameters", "extra", "scratch_ptr")


def test_missing_param(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "(in_ptr0, out_ptr0, xnumel, XBLOCK", "(in_ptr0, out_ptr0, XBLOCK")
    assert_rejected(check_source(gelu, src), "parameters", "missing", "xnumel")


def test_constexpr_annotation_dropped(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "XBLOCK : tl.constexpr):", "XBLOCK):")
    assert_rejected(check_source(gelu, src), "parameters", "XBLOCK", "constexpr")


def test_param_default_value(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "XBLOCK : tl.constexpr):", "XBLOCK : tl.constexpr = 1024):")
    assert_rejected(check_source(gelu, src), "parameters", "default")


def test_import_os_and_getenv(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, 'flag = os.getenv("KERNELOPT_CHEAT")')
    assert_rejected(check_source(gelu, add_import(src, "import os")), "imports", "import os")


def test_getenv_without_import(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, 'flag = os.getenv("KERNELOPT_CHEAT")')
    assert_rejected(check_source(gelu, src), "forbidden-name", "os.getenv")


def test_import_torch(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, add_import(gelu.source, "import torch")), "imports", "import torch")


@pytest.mark.parametrize("line", ["import subprocess", "import ctypes", "from importlib import import_module",
                                  "import numpy as np", "from os import path"])
def test_host_module_imports(gelu: TritonKernel, line: str) -> None:
    assert_rejected(check_source(gelu, add_import(gelu.source, line)), "imports", "not allowed")


def test_allowed_import_not_in_original(gelu: TritonKernel) -> None:
    src = add_import(gelu.source, "from triton.language.extra import libdevice as ld")
    assert_rejected(check_source(gelu, src), "imports", "not imported by the original")


def test_import_inside_kernel(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, "import math")), "kernel-body", "import")


def test_module_level_cache_dict(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "\n@triton_heuristics", "\n_RESULTS = {}\n@triton_heuristics")
    assert_rejected(check_source(gelu, src), "module-level", "_RESULTS", "mutable")


def test_module_level_helper_function(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "\n@triton_heuristics", "\ndef helper(x):\n    return x\n\n@triton_heuristics")
    assert_rejected(check_source(gelu, src), "module-level", "helper", "host code")


def test_module_level_call(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "triton_helpers.set_driver_to_cpu()\n",
               "triton_helpers.set_driver_to_cpu()\ntl.static_print('loaded')\n")
    assert_rejected(check_source(gelu, src), "module-level", "call")


def test_module_level_class(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "\n@triton_heuristics", "\nclass State:\n    hits = 0\n\n@triton_heuristics")
    assert_rejected(check_source(gelu, src), "module-level", "class State")


def test_module_level_dunder_assignment(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "\n@triton_heuristics", "\n__builtins__ = 0\n@triton_heuristics")
    assert_rejected(check_source(gelu, src), "module-level", "__builtins__")


def test_module_level_if(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "\n@triton_heuristics", "\nif triton.__version__:\n    XB = 2\n@triton_heuristics")
    assert_rejected(check_source(gelu, src), "module-level", "If")


def test_driver_call_not_in_original(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "triton_helpers.set_driver_to_cpu()", "triton_helpers.set_driver_to_gpu()")
    assert_rejected(check_source(gelu, src), "module-level", "set_driver_to_gpu", "not in the original")


def test_builtin_open(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, 'cached = open("/tmp/reference.bin", "rb")')
    assert_rejected(check_source(gelu, src), "forbidden-name", "open")


def test_builtin_print(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, 'print("hello")')), "forbidden-name", "print")


def test_getattr_escape(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, 'g = getattr(tl, "load")')
    assert_rejected(check_source(gelu, src), "forbidden-name", "getattr")


def test_dunder_attribute(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, "g = tl.load.__globals__")
    assert_rejected(check_source(gelu, src), "forbidden-name", "__globals__")


def test_triton_runtime_in_body(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, "d = triton.runtime.driver.active")
    assert_rejected(check_source(gelu, src), "forbidden-name", "runtime")


def test_stream_in_body(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, "side_stream = tl.program_id(0)")
    assert_rejected(check_source(gelu, src), "streams", "side_stream")


def test_module_aliased_into_local(gelu: TritonKernel) -> None:
    """A module object in a local is a path to host modules (``m.core.inspect.os``)."""
    assert_rejected(check_source(gelu, add_body_line(gelu, "m = tl")), "kernel-body", "'tl'", "used as a value")


def test_submodule_aliased_into_local(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, "m = tl.standard")), "kernel-body", "tl.standard")


def test_interpreter_tensor_handle(gelu: TritonKernel) -> None:
    """Under TRITON_INTERPRET=1 a tensor's ``.handle`` is host memory (numpy: ``.tofile``)."""
    src = edit(gelu.source, "    tmp2 = tmp0 * tmp1\n", "    tmp2 = tmp0 * tmp1\n    tmp0.handle.data.tofile('/tmp/x')\n")
    assert_rejected(check_source(gelu, src), "forbidden-name", "handle")


def test_global_statement(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, "global SEEN")), "kernel-body", "global")


def test_call_outside_allowed_namespaces(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, "tmp99 = fast_gelu(xnumel)")
    assert_rejected(check_source(gelu, src), "kernel-body", "fast_gelu")


def test_non_power_of_two_r0_block(softmax: TritonKernel) -> None:
    src = edit(softmax.source, "R0_BLOCK: tl.constexpr = 128", "R0_BLOCK: tl.constexpr = 96")
    assert_rejected(check_source(softmax, src), "block-size", "R0_BLOCK", "96")


def test_non_power_of_two_xblock_in_body(gelu: TritonKernel) -> None:
    src = add_body_line(gelu, "XBLOCK: tl.constexpr = 100")
    assert_rejected(check_source(gelu, src), "block-size", "XBLOCK", "100")


def test_non_power_of_two_arange(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "tl.arange(0, XBLOCK)", "tl.arange(0, 48)")
    assert_rejected(check_source(gelu, src), "block-size", "48")


def test_changed_mutated_arg_names(softmax: TritonKernel) -> None:
    src = edit(softmax.source, "'mutated_arg_names': ['in_out_ptr0']", "'mutated_arg_names': []")
    assert_rejected(check_source(softmax, src), "decorator", "mutated_arg_names")


def test_changed_grid_type(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "'grid_type': 'Grid1D'", "'grid_type': 'Grid2D'")
    assert_rejected(check_source(gelu, src), "decorator", "grid_type")


def test_changed_heuristic(softmax: TritonKernel) -> None:
    src = edit(softmax.source, "@triton_heuristics.persistent_reduction(", "@triton_heuristics.reduction(")
    assert_rejected(check_source(softmax, src), "decorator", "heuristic changed")


def test_unknown_heuristic(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "@triton_heuristics.pointwise(", "@triton_heuristics.user_autotune(")
    assert_rejected(check_source(gelu, src), "decorator", "user_autotune")


def test_decorator_removed(gelu: TritonKernel) -> None:
    start = gelu.source.index("@triton_heuristics")
    end = gelu.source.index("@triton.jit")
    src = gelu.source[:start] + gelu.source[end:]
    assert_rejected(check_source(gelu, src), "decorator", "missing")


def test_host_code_in_decorator_argument(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "filename=__file__", "filename=__import__('os').getcwd()")
    assert_rejected(check_source(gelu, src), "decorator", "host code")


def test_host_method_in_decorator_argument(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "'device': DeviceProperties(", "'device': DeviceProperties.create(0), 'old': DeviceProperties(")
    assert_rejected(check_source(gelu, src), "decorator", "DeviceProperties.create")


def test_specialized_constants_changed(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "'constants': {}", "'constants': {'xnumel': 512}")
    assert_rejected(check_source(gelu, src), "decorator", "constants")


def test_size_hints_keys_changed(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "size_hints={'x': 512}", "size_hints={'x': 512, 'y': 2}")
    assert_rejected(check_source(gelu, src), "decorator", "size_hints")


def test_signature_changed(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "'out_ptr0': '*fp32'", "'out_ptr0': '*fp16'")
    assert_rejected(check_source(gelu, src), "decorator", "signature")


# --------------------------------------------------------------------------------------------
# check_config

LIMITS = DeviceLimits()


def test_config_doubled_xblock_passes(softmax: TritonKernel, gelu: TritonKernel) -> None:
    assert_passed(check_config(softmax, LaunchConfig({"XBLOCK": 2}, num_warps=4, num_stages=1), LIMITS))
    assert_passed(check_config(gelu, LaunchConfig({"XBLOCK": 1024}, num_warps=8, num_stages=1), LIMITS))


def test_config_looped_reduction_passes(looped: TritonKernel) -> None:
    result = check_config(looped, LaunchConfig({"XBLOCK": 2, "R0_BLOCK": 64}, num_warps=2, num_stages=2), LIMITS)
    assert_passed(result)
    assert result.numbers["tile"] == 128


def test_config_r0_block_on_persistent_reduction(softmax: TritonKernel) -> None:
    result = check_config(softmax, LaunchConfig({"XBLOCK": 1, "R0_BLOCK": 128}), LIMITS)
    assert_rejected(result, "config-key", "R0_BLOCK", "persistent reduction")


def test_config_unknown_kwarg(gelu: TritonKernel) -> None:
    assert_rejected(check_config(gelu, LaunchConfig({"XBLOCK": 256, "SPLIT": 2}), LIMITS), "config-key", "SPLIT")


def test_config_non_power_of_two_block(gelu: TritonKernel) -> None:
    assert_rejected(check_config(gelu, LaunchConfig({"XBLOCK": 48}), LIMITS), "config-value", "XBLOCK=48")


def test_config_bool_is_not_a_block_size(gelu: TritonKernel) -> None:
    assert_rejected(check_config(gelu, LaunchConfig({"XBLOCK": True}), LIMITS), "config-value", "XBLOCK")


def test_config_missing_block(looped: TritonKernel) -> None:
    assert_rejected(check_config(looped, LaunchConfig({"XBLOCK": 2}), LIMITS), "config-missing", "R0_BLOCK")


def test_config_num_warps_not_power_of_two(gelu: TritonKernel) -> None:
    assert_rejected(check_config(gelu, LaunchConfig({"XBLOCK": 256}, num_warps=3), LIMITS), "num_warps", "num_warps=3")


def test_config_num_warps_too_many_threads(gelu: TritonKernel) -> None:
    result = check_config(gelu, LaunchConfig({"XBLOCK": 256}, num_warps=64), LIMITS)
    assert_rejected(result, "num_warps", "2048", "1024")


def test_config_num_warps_respects_wavefront_size(gelu: TritonKernel) -> None:
    """On a 64-wide wavefront device, 16 warps already fill 1024 threads; 32 does not fit."""
    amd = DeviceLimits(max_threads_per_block=1024, warp_size=64)
    assert_passed(check_config(gelu, LaunchConfig({"XBLOCK": 256}, num_warps=16), amd))
    assert_rejected(check_config(gelu, LaunchConfig({"XBLOCK": 256}, num_warps=32), amd), "num_warps", "64")


@pytest.mark.parametrize("stages", [0, 9])
def test_config_num_stages_range(gelu: TritonKernel, stages: int) -> None:
    result = check_config(gelu, LaunchConfig({"XBLOCK": 256}, num_stages=stages), LIMITS)
    assert_rejected(result, "num_stages", f"num_stages={stages}")


def test_config_tile_too_large_counts_hardcoded_r0_block(softmax: TritonKernel) -> None:
    """Softmax fixes R0_BLOCK=128 in its body: XBLOCK=16384 makes a 2**21-element tile."""
    result = check_config(softmax, LaunchConfig({"XBLOCK": 2**14}), LIMITS)
    assert_rejected(result, "tile-size", "R0_BLOCK=128", str(2**21))


def test_config_wrapper_constant_is_not_a_knob(gelu: TritonKernel) -> None:
    """A constexpr the wrapper passes itself (triton_meta constants) must not be set by a config."""
    src = edit(gelu.source, "'xnumel': 'i32'", "'xnumel': 'constexpr'")
    src = edit(src, "'constants': {}", "'constants': {'xnumel': 512}")
    fixed = dataclasses.replace(gelu, source=src, signature={**gelu.signature, "xnumel": "constexpr"})
    result = check_config(fixed, LaunchConfig({"XBLOCK": 256, "xnumel": 512}), LIMITS)
    assert_rejected(result, "config-key", "xnumel", "constant")


def test_device_limits_default_without_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        limits = DeviceLimits.from_current_device()
        assert limits.warp_size in (32, 64) and limits.max_threads_per_block >= 256
    else:
        assert DeviceLimits.from_current_device() == DeviceLimits()
        assert DeviceLimits().max_shared_memory == 232448


# --------------------------------------------------------------------------------------------
# The original always passes its own gate: every real kernel Inductor wrote (fixtures of four
# torch versions, CUDA codegen) and every example compiled here.


def _fixture_kernels() -> list[TritonKernel]:
    from pathlib import Path

    from kernelopt_bot.capture.artifact import parse_output_code

    root = Path(__file__).resolve().parent / "fixtures" / "output_code"
    return [k for path in sorted(root.rglob("*.py")) for k in parse_output_code(path.read_text()).kernels]


def test_every_fixture_kernel_passes_its_own_gate() -> None:
    kernels = _fixture_kernels()
    assert len(kernels) >= 60
    failures = {k.name: check_source(k, k.source).reason for k in kernels if not check_source(k, k.source).passed}
    assert not failures, failures


# --------------------------------------------------------------------------------------------
# The allowlist: one test per rule, several spellings of each class of attack


def _after_load(kernel: TritonKernel, line: str) -> str:
    """Insert ``line`` (which may use ``tmp0``, the loaded value) right after the first load."""
    marker = "    tmp0 = tl.load(in_ptr0 + (x0), xmask)\n"
    return edit(kernel.source, marker, marker + f"    {line}\n")


@pytest.mark.parametrize("line", [
    "m = tl.extra.modules",
    "m = triton.language.extra.modules",
    "m = tl.core.sys",
    "m = tl.math.core",
    "m = libdevice.core",
    "m = triton_helpers.triton",
    "m = triton_helpers.tl.extra",
    "m = tl_math.core",
])
def test_module_attribute_chains_off_the_allowlist(gelu: TritonKernel, line: str) -> None:
    """``tl.extra.modules`` is ``sys.modules``: only listed device paths are kernel code."""
    result = check_source(gelu, add_body_line(gelu, line))
    assert result.passed is False and result.numbers["rule"] in ("kernel-body", "forbidden-name"), result.reason


@pytest.mark.parametrize("line", [
    "m = (xnumel if xnumel else tl).extra",
    "m = (tl if xnumel else tl).extra",
    "m = [tl][0].extra",
    "m = (tl,)[0].math",
    "m = [tl, tl][xnumel - 512].float32",
    "m = (tl or xnumel).load",
    "m = (tl if xnumel else tl).sum(1)",
    "m = [tl][0].to(tl.float32)",
])
def test_module_behind_an_expression_is_rejected(gelu: TritonKernel, line: str) -> None:
    """A conditional or a subscript in front of an attribute chain used to skip the chain check:
    now the attribute must be a tensor method, and a module is never a value."""
    result = check_source(gelu, add_body_line(gelu, line))
    assert_rejected(result, "kernel-body")
    assert "used as a value" in result.reason or "on a value only" in result.reason


@pytest.mark.parametrize("line, rule", [
    ("s = '{0.__class__}'.format(tmp0)", "forbidden-name"),
    ("s = '{0.x}'.format(tmp0)", "forbidden-name"),
    ("s = 'abc' % tmp0", "strings"),
    ("s = f'{tmp0}'", "kernel-body"),
    ("s = tmp0.format_map", "forbidden-name"),
    ("tmp0 = tl.load(in_ptr0 + (x0), xmask, eviction_policy='evict_' + 'last')", "strings"),
    ("tmp0 = tl.load(in_ptr0 + (x0), xmask, eviction_policy='{x}')", "strings"),
])
def test_string_formatting_and_stray_strings(gelu: TritonKernel, line: str, rule: str) -> None:
    """``str.format`` reaches dunders; strings are allowed only as literal arguments of calls."""
    assert_rejected(check_source(gelu, _after_load(gelu, line)), rule)


@pytest.mark.parametrize("line", [
    "g = getattr(tl, 'extra')",
    "g = tl.__builtins__",
    "g = tl.load.__globals__",
    "g = tmp0.__class__",
    "g = __builtins__",
    "g = __import__('os')",
    "g = eval('1')",
    "g = exec('x = 1')",
    "g = globals()",
    "g = vars(tl)",
    "g = setattr(tl, 'x', 1)",
])
def test_reflection_and_builtins_are_rejected(gelu: TritonKernel, line: str) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, line)), "forbidden-name")


@pytest.mark.parametrize("line", [
    "x = open('/proc/self/environ').read()",
    "x = os.environ",
    "x = sys.modules",
    "x = tl.extra.cuda.libdevice.os",
    "x = triton.runtime.driver",
    "x = tl.extra.modules['kernelopt_bot']",
])
def test_host_access_any_spelling(gelu: TritonKernel, line: str) -> None:
    """Files, the environment, and the verifier's own module names (detecting the verifier)."""
    result = check_source(gelu, add_body_line(gelu, line))
    assert result.passed is False and result.numbers["rule"] in ("kernel-body", "forbidden-name"), result.reason


@pytest.mark.parametrize("line, words", [
    ("tmp0 = tl.load(in_ptr0 + (x0), xmask).item()", ".item()"),
    ("tmp0 = tmp0.store(tmp0)", ".store()"),
    ("tmp0 = tmp0.atomic_add(tmp0)", ".atomic_add()"),
    ("tmp0 = tmp0.handle", "handle"),
    ("tmp0 = tmp0.type.scalar", "scalar"),
])
def test_only_allowlisted_tensor_methods(gelu: TritonKernel, line: str, words: str) -> None:
    result = check_source(gelu, _after_load(gelu, line))
    assert result.passed is False and result.numbers["rule"] in ("kernel-body", "forbidden-name"), result.reason
    assert words.strip("().") in result.reason


@pytest.mark.parametrize("line, why", [
    ("while xnumel > 0:\n        xnumel = xnumel - 1", "while"),
    ("try:\n        pass\n    except Exception:\n        pass", "exception"),
    ("with tl.extra:\n        pass", "context"),
    ("del tmp0", "del"),
    ("f = lambda v: v", "lambda"),
    ("xs = [v for v in range(4)]", "comprehension"),
    ("d = {}", "dict"),
    ("nonlocal tmp0", "nonlocal"),
    ("raise ValueError", "exception"),
    ("if (n := xnumel):\n        pass", ":="),
])
def test_statements_off_the_allowlist(gelu: TritonKernel, line: str, why: str) -> None:
    result = check_source(gelu, _after_load(gelu, line))
    assert result.passed is False and result.numbers["rule"] in ("kernel-body", "forbidden-name"), result.reason
    assert why in result.reason.lower() or why in result.reason, result.reason


def test_nested_function_rejected(gelu: TritonKernel) -> None:
    src = _after_load(gelu, "def inner(v):\n        return v")
    assert_rejected(check_source(gelu, src), "kernel-body", "nested functions")


@pytest.mark.parametrize("line", ["tmp0 = tl.str_to_ty('fp32')", "tmp0 = tl.map_elementwise(tmp0)",
                                  "tmp0 = triton_helpers.get_backend_options()", "tmp0 = libdevice.not_a_function(tmp0)",
                                  "tmp0 = tl.make_tensor_descriptor(in_ptr0, [1], [1], [1])"])
def test_device_functions_off_the_allowlist(gelu: TritonKernel, line: str) -> None:
    result = check_source(gelu, _after_load(gelu, line))
    assert result.passed is False and result.numbers["rule"] in ("kernel-body", "strings"), result.reason


def test_allowlisted_device_api_passes(gelu: TritonKernel) -> None:
    """Other spellings of the same device functions, tensor methods, string keywords."""
    src = edit(gelu.source, "tmp10 = libdevice.tanh(tmp9)",
               "tmp10 = tl.extra.cuda.libdevice.tanh(tl.math.exp(tmp9) * 0.0 + tmp9)\n"
               "    tmp10 = tl_math.abs(tmp10) * 0.0 + tmp10.to(tl.float32)\n"
               "    tmp10 = tl.where(tmp10 != tmp10, float('nan'), tmp10)\n"
               "    tmp10 = triton_helpers.maximum(tmp10, tmp10)")
    src = edit(src, "tl.load(in_ptr0 + (x0), xmask)", "tl.load(in_ptr0 + (x0), xmask, eviction_policy='evict_last')")
    assert_passed(check_source(gelu, src))


def test_shadowing_an_import_is_rejected(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, "tl = xnumel")), "kernel-body", "shadows")


# --------------------------------------------------------------------------------------------
# Caps: rejection is immediate


def test_huge_source_is_rejected_fast(gelu: TritonKernel) -> None:
    import time

    huge = gelu.source + ("    tmp99 = tmp0 + 1.0\n" * 700_000)  # ~14.7 MB
    assert len(huge) > 14_000_000
    start = time.perf_counter()
    result = check_source(gelu, huge)
    assert time.perf_counter() - start < 1.0
    assert_rejected(result, "source-size")


def test_too_many_nodes_is_rejected(gelu: TritonKernel) -> None:
    line = "    tmp99 = " + " + ".join(["tmp0"] * 400) + "\n"
    src = edit(gelu.source, "    tmp2 = tmp0 * tmp1\n", "    tmp2 = tmp0 * tmp1\n" + line * 70)
    assert len(src.encode()) < 256 * 1024
    assert_rejected(check_source(gelu, src), "source-size", "syntax nodes")


@pytest.mark.parametrize("loop", [
    "for i in tl.static_range(0, 2**40):",
    "for i in tl.static_range(0, 1 << 40):",
    "for i in tl.static_range(0, 1024):",
    "for i in tl.static_range(XBLOCK):",
    "for i in range(0, 1099511627776):",
    "for i in tl.range(0, 2**31 + 1, XBLOCK):",
    "for i in range(0, 1 << 20):",
    "for i in range(0, xnumel * xnumel * xnumel * 65536 * 65536):",
    "for i in range(0, tmp0):",
    "for i in range(0, in_ptr0):",
    "for i in [1, 2, 3]:",
    "for i in tl.range(0, 8, num_stages=100000):",
    "for i in tl.range(0, 8, num_stages=xnumel):",  # a runtime value, not a constexpr
    "for i in tl.range(0, 8, loop_unroll_factor=XBLOCK):",  # only num_stages takes a constexpr
    # min() bounds a stop from above only: not a start, and max() bounds nothing from above
    "for i in tl.range(min(0, xnumel - tl.program_id(0) * XBLOCK), xnumel):",
    "for i in tl.range(0, max(XBLOCK, xnumel - tl.program_id(0) * XBLOCK), XBLOCK):",
    "for i in tl.range(0, min(tl.program_id(0) * XBLOCK, tl.program_id(1) * 2), XBLOCK):",
    "for i in tl.range(0, min(XBLOCK, 0 - tl.program_id(0) * XBLOCK), -1):",  # counting down past it
    "for i in range(0, 8, 0):",
])
def test_loop_trip_counts_are_static_and_bounded(gelu: TritonKernel, loop: str) -> None:
    src = _after_load(gelu, f"{loop}\n        tmp0 = tmp0 + 0.0")
    result = check_source(gelu, src)
    assert result.passed is False, loop
    assert result.numbers["rule"] in ("loop-bounds", "literal-cap"), result.reason


def test_huge_local_bound_is_seen_through(gelu: TritonKernel) -> None:
    src = _after_load(gelu, "n = 1 << 36\n    for i in range(0, n):\n        tmp0 = tmp0 + 0.0")
    assert_rejected(check_source(gelu, src), "loop-bounds")


@pytest.mark.parametrize("loop", ["for i in tl.static_range(4):", "for i in tl.range(0, xnumel, XBLOCK):",
                                  "for i in range(0, 16, 2):", "for i in tl.range(0, 64, 8, num_stages=2):",
                                  # Inductor's mix-order reductions: ``num_stages=NUM_STAGES``, a constexpr
                                  # (the H200 rejected a layer norm's backward here as Inductor wrote it)
                                  "for i in tl.range(0, xnumel, XBLOCK, num_stages=XBLOCK):",
                                  # and their loop, as Inductor writes it (a local stop bounded by min())
                                  "split_size = min(XBLOCK, xnumel - tl.program_id(0) * XBLOCK)\n"
                                  "    for _ in tl.range(0, split_size, XBLOCK, num_stages=XBLOCK):"])
def test_bounded_loops_pass(gelu: TritonKernel, loop: str) -> None:
    assert_passed(check_source(gelu, _after_load(gelu, f"{loop}\n        tmp0 = tmp0 + 0.0")))


def test_a_pipelining_constexpr_is_capped_in_the_launch_config(looped: TritonKernel) -> None:
    """A constexpr that sets a loop's ``num_stages`` gets its value from the launch config, which
    gate 1 caps as it caps the launch's own num_stages."""
    staged = dataclasses.replace(looped, params=[*looped.params, "NUM_STAGES"],
                                 signature={**looped.signature, "NUM_STAGES": "constexpr"})
    blocks = {"XBLOCK": 2, "R0_BLOCK": 64}
    assert_passed(check_config(staged, LaunchConfig({**blocks, "NUM_STAGES": 4}, num_warps=4, num_stages=1), LIMITS))
    result = check_config(staged, LaunchConfig({**blocks, "NUM_STAGES": 64}, num_warps=4, num_stages=1), LIMITS)
    assert_rejected(result, "config-value", "NUM_STAGES=64")


@pytest.mark.parametrize("line", ["x = 10 ** 10 ** 10", "x = 1 << (1 << 30)", "x = 2 ** 65 * 2 ** 65",
                                  "x = 99999999999999999999999999"])
def test_literal_arithmetic_is_capped_without_computing_it(gelu: TritonKernel, line: str) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, line)), "literal-cap")


@pytest.mark.parametrize("line", ["z = tl.arange(0, 2**21)", "z = tl.zeros([XBLOCK, 3], tl.float32)",
                                  "z = tl.full([4096, 4096], 0, tl.float32)", "z = tl.arange(0, 96 - 48)",
                                  "R0_BLOCK: tl.constexpr = 2**22"])
def test_tile_sizes_are_powers_of_two_within_cap(gelu: TritonKernel, line: str) -> None:
    assert_rejected(check_source(gelu, add_body_line(gelu, line)), "block-size")


# --------------------------------------------------------------------------------------------
# Write/read discipline


def test_store_into_an_input_is_rejected(gelu: TritonKernel) -> None:
    """An input used as scratch (even if restored) is read by other programs in between."""
    src = _after_load(gelu, "tl.store(in_ptr0 + (x0), tmp0 * 2.0, xmask)")
    assert_rejected(check_source(gelu, src), "memory-access", "in_ptr0", "never writes")


def test_atomic_into_an_input_is_rejected(gelu: TritonKernel) -> None:
    src = _after_load(gelu, "tl.atomic_add(in_ptr0 + (x0), tmp0, xmask)")
    assert_rejected(check_source(gelu, src), "memory-access", "in_ptr0")


def test_load_from_an_output_is_rejected(gelu: TritonKernel) -> None:
    """Reading the output before writing it reads the verifier's prefill."""
    src = _after_load(gelu, "tmp0 = tmp0 + tl.load(out_ptr0 + (x0), xmask) * 0.0")
    assert_rejected(check_source(gelu, src), "memory-access", "out_ptr0", "prefill")


@pytest.mark.parametrize("line", [
    "p = in_ptr0 + (out_ptr0 - in_ptr0)\n    tl.store(p + (x0), tmp0, xmask)",
    "p = in_ptr0 if xnumel > 0 else out_ptr0\n    tl.store(p + (x0), tmp0, xmask)",
    "tl.store(tl.where(xmask, out_ptr0, in_ptr0) + (x0), tmp0, xmask)",
])
def test_mixed_pointer_provenance_is_rejected(gelu: TritonKernel, line: str) -> None:
    assert_rejected(check_source(gelu, _after_load(gelu, line)), "memory-access", "mixes")


def test_pointer_laundered_through_locals_is_tracked(gelu: TritonKernel) -> None:
    src = _after_load(gelu, "p = in_ptr0\n    q = p + 1\n    tl.store(q + (x0), tmp0, xmask)")
    assert_rejected(check_source(gelu, src), "memory-access", "in_ptr0")


def test_store_address_without_pointer_is_rejected(gelu: TritonKernel) -> None:
    assert_rejected(check_source(gelu, _after_load(gelu, "tl.store(x0, tmp0, xmask)")), "memory-access", "derive")


def test_in_out_pointer_may_be_loaded_and_stored(softmax: TritonKernel) -> None:
    """Softmax loads and stores in_out_ptr0: the original does both, so the candidate may."""
    assert "in_out_ptr0" in softmax.source
    assert_passed(check_source(softmax, softmax.source))


def test_local_pointer_alias_passes(gelu: TritonKernel) -> None:
    src = edit(gelu.source, "    tl.store(out_ptr0 + (x0), tmp13, xmask)",
               "    dst = out_ptr0 + x0\n    tl.store(dst, tmp13, xmask)")
    assert_passed(check_source(gelu, src))


# --------------------------------------------------------------------------------------------
# Strict launch configs: LaunchConfig.from_json and check_config


@pytest.mark.parametrize("data, words", [
    ({"kwargs": {"XBLOCK": 256}, "num_warps": 4.9}, "num_warps"),
    ({"kwargs": {"XBLOCK": 256}, "num_warps": True}, "num_warps"),
    ({"kwargs": {"XBLOCK": 256}, "num_warps": "4"}, "num_warps"),
    ({"kwargs": {"XBLOCK": 256}, "num_warps": -4}, "num_warps"),
    ({"kwargs": {"XBLOCK": 256}, "num_warps": 64}, "num_warps"),
    ({"kwargs": {"XBLOCK": 256}, "num_stages": True}, "num_stages"),
    ({"kwargs": {"XBLOCK": 256}, "num_stages": 2.0}, "num_stages"),
    ({"kwargs": {"XBLOCK": 256}, "num_stages": 0}, "num_stages"),
    ({"kwargs": {"XBLOCK": 256}, "num_stages": 9}, "num_stages"),
    ({"kwargs": {"XBLOCK": 256}, "maxnreg": 128}, "unknown key"),
    ({"kwargs": {"XBLOCK": 256}, "pre_hook": "os.system"}, "unknown key"),
    ({"kwargs": {"XBLOCK": 48}}, "XBLOCK"),
    ({"kwargs": {"XBLOCK": True}}, "XBLOCK"),
    ({"kwargs": {"XBLOCK": "256"}}, "XBLOCK"),
    ({"kwargs": {"XBLOCK": -256}}, "XBLOCK"),
    ({"kwargs": {"XBLOCK": 2**21}}, "XBLOCK"),
    ({"kwargs": {"__class__": 2}}, "__class__"),
    ({"kwargs": [256]}, "kwargs"),
    ([256], "object"),
])
def test_launch_config_from_json_is_strict(data: object, words: str) -> None:
    from kernelopt_bot.pack.format import PackError

    with pytest.raises(PackError, match="launch config") as info:
        LaunchConfig.from_json(data)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


def test_launch_config_from_json_round_trip() -> None:
    config = LaunchConfig({"XBLOCK": 256, "R0_BLOCK": 64}, num_warps=8, num_stages=3)
    assert LaunchConfig.from_json(config.to_json()) == config
    assert LaunchConfig.from_json({"kwargs": {"XBLOCK": 8}}) == LaunchConfig({"XBLOCK": 8}, 4, 1)


@pytest.mark.parametrize("config, rule", [
    (LaunchConfig({"XBLOCK": 256}, num_warps=4.9), "num_warps"),  # type: ignore[arg-type]
    (LaunchConfig({"XBLOCK": 256}, num_warps=True), "num_warps"),
    (LaunchConfig({"XBLOCK": 256}, num_stages=True), "num_stages"),
    (LaunchConfig({"XBLOCK": 256}, num_stages=2.0), "num_stages"),  # type: ignore[arg-type]
    (LaunchConfig({"XBLOCK": "256"}), "config-value"),  # type: ignore[dict-item]
    (LaunchConfig({"XBLOCK": 2**21}), "config-value"),
    (LaunchConfig({"XBLOCK": 256, "num_ctas": 1}), "config-key"),
])
def test_check_config_is_strict(gelu: TritonKernel, config: LaunchConfig, rule: str) -> None:
    big = DeviceLimits(max_threads_per_block=1 << 20)
    assert_rejected(check_config(gelu, config, big), rule)


# --------------------------------------------------------------------------------------------
# Red-team review of issue 11 (each a bypass found against the first allowlist)


@pytest.mark.parametrize("line", [
    # the pointer's integer value comes back through a load's other= with no root, then
    # ``out_ptr0 + (that - out_ptr0 as int)`` writes into in_ptr0 while deriving from out_ptr0 alone
    "ia = tl.load(in_ptr0.to(tl.pointer_type(tl.int64)) + x0, x0 < 0, other=in_ptr0.to(tl.int64))\n"
    "    tl.store(out_ptr0 + (ia - out_ptr0.to(tl.int64)) // 4 + x0, tmp0, xmask)",
    # through an atomic's value and return
    "ia = tl.atomic_xchg(out_ptr0.to(tl.pointer_type(tl.int64)) + x0, in_ptr0.to(tl.int64), xmask)",
    # through a cast, a pointer difference, a comparison, an if (implicit flow), a mask
    "d = tl.cast(in_ptr0, tl.int64)",
    "d = out_ptr0 - in_ptr0",
    "d = tl.where(in_ptr0 < out_ptr0, 1, 0)",
    "d = 0\n    if in_ptr0.to(tl.int64) > 0:\n        d = 1",
    "tmp0 = tl.load(in_ptr0 + x0, (x0 + in_ptr0.to(tl.int64)) % 2 == 0)",
    "tl.store(out_ptr0 + x0, in_ptr0.to(tl.int64).to(tl.float32), xmask)",
])
def test_pointer_value_cannot_be_laundered_into_an_offset(gelu: TritonKernel, line: str) -> None:
    assert_rejected(check_source(gelu, _after_load(gelu, line)), "memory-access", "used as a value")


@pytest.mark.parametrize("line", [
    "p = out_ptr0 + x0\n    p += 0\n    tl.store(p, tmp0, xmask)",
    "p = tl.broadcast_to(out_ptr0 + x0, [XBLOCK])\n    tl.store(p, tmp0, xmask)",
    "tl.store((out_ptr0 + x0).to(tl.pointer_type(tl.float32)), tmp0, xmask)",
    "dt = out_ptr0.dtype",
])
def test_pointer_in_pointer_position_passes(gelu: TritonKernel, line: str) -> None:
    assert_passed(check_source(gelu, _after_load(gelu, line)))


def test_module_string_constant_is_not_a_kernel_value(gelu: TritonKernel) -> None:
    """A module-level string constant would smuggle strings past the literal-argument rule
    (``eviction_policy=EP`` with any text, ``'__class__'`` unchecked)."""
    src = edit(gelu.source, "@triton_heuristics", 'EP = "__class__"\n@triton_heuristics')
    src = edit(src, "tl.load(in_ptr0 + (x0), xmask)", "tl.load(in_ptr0 + (x0), xmask, eviction_policy=EP)")
    assert_rejected(check_source(gelu, src), "strings", "EP")


@pytest.mark.parametrize("loops", [
    ["for a in range(65536):", "for b in range(65536):", "for c in range(65536):"],
    ["for a in tl.static_range(256):", "for b in tl.static_range(256):"],
    ["for a in tl.static_range(64):", "for b in range(4096):"],
])
def test_nested_loop_caps_hold_for_the_product(gelu: TritonKernel, loops: list[str]) -> None:
    nested = "".join(f"{'    ' * i}{loop}\n    " for i, loop in enumerate(loops))
    src = _after_load(gelu, f"{nested}{'    ' * len(loops)}tmp0 = tmp0 + 0.0")
    assert_rejected(check_source(gelu, src), "loop-bounds")


def test_nested_loops_within_caps_pass(gelu: TritonKernel) -> None:
    src = _after_load(gelu, "for a in range(16):\n        for b in tl.static_range(4):\n"
                            "            for c in tl.range(0, 2 * XBLOCK, 4):\n                tmp0 = tmp0 + 0.0")
    assert_passed(check_source(gelu, src))


@pytest.mark.parametrize("bound", ["xnumel * xnumel", "XBLOCK * XBLOCK * XBLOCK", "XBLOCK * 4096"])
def test_loop_bound_is_at_most_a_small_multiple_of_a_size(gelu: TritonKernel, bound: str) -> None:
    src = _after_load(gelu, f"for i in range({bound}):\n        tmp0 = tmp0 + 0.0")
    assert_rejected(check_source(gelu, src), "loop-bounds")


def test_doubling_chain_loop_bound_is_rejected_fast(gelu: TritonKernel) -> None:
    """``a1 = a0 + a0`` 60 times is 2**59 sizes, and checking it without memoizing took 2**60 steps."""
    import time

    chain = "\n    ".join(f"a{i} = a{i - 1} + a{i - 1}" for i in range(1, 60))
    src = _after_load(gelu, f"a0 = XBLOCK\n    {chain}\n    for i in range(a59):\n        tmp0 = tmp0 + 0.0")
    start = time.monotonic()
    assert_rejected(check_source(gelu, src), "loop-bounds")
    assert time.monotonic() - start < 2.0


def test_long_assignment_chains_are_checked_in_linear_time(gelu: TritonKernel) -> None:
    """4,000 locals chained in reverse order: the sweep-until-stable fixpoints took ~30 s."""
    import time

    ints = "\n    ".join(f"a{i} = a{i + 1} + 1" for i in range(2000))
    ptrs = "\n    ".join(f"p{i} = p{i + 1} + 1" for i in range(2000))
    src = _after_load(gelu, f"{ints}\n    a2000 = 1\n    {ptrs}\n    p2000 = out_ptr0 + x0\n    tmp0 = tmp0 + a0")
    start = time.monotonic()
    assert_passed(check_source(gelu, src))
    assert time.monotonic() - start < 5.0


@pytest.mark.parametrize("old,new", [
    ("filename=__file__", "filename='/home/user/.bashrc'"),
    ("'autotune_remote_cache': None", "'autotune_remote_cache': True"),
    ("'store_cubin': False", "'store_cubin': False, 'profile_bandwidth_output': '/tmp/out'"),
])
def test_decorator_host_settings_are_the_originals(gelu: TritonKernel, old: str, new: str) -> None:
    """The launcher writes ``<filename stem>.best_config`` and obeys inductor_meta's cache and
    profiling switches on the host: a candidate cannot pick them."""
    assert_rejected(check_source(gelu, edit(gelu.source, old, new)), "decorator")


def test_decorator_counters_may_change(gelu: TritonKernel) -> None:
    assert_passed(check_source(gelu, edit(gelu.source, "'num_load': 1", "'num_load': 2")))
