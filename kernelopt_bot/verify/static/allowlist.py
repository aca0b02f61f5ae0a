"""What a candidate kernel may name, written down as data (gate 1 is an allowlist, not a denylist).

Triton's code generator executes plain Python it finds in a kernel (at GPU compile time as well
as under ``TRITON_INTERPRET=1``), so every name a kernel body can reach is host code we run.
A denylist of dangerous names always has holes (``tl.extra.modules`` is ``sys.modules``), so the
body may use only what is listed here: its parameters and locals, numeric literals, and these
device functions by their plain dotted paths. The sets come from what Inductor emits (the real
kernels in ``tests/fixtures/output_code`` and ``torch/_inductor/codegen``) plus the rest of
Triton's documented device API that cannot reach the host or memory outside the kernel's
pointers. A name missing here is a false rejection to add after review, never a hole.
"""

from __future__ import annotations

# ``tl.<name>`` (also ``triton.language.<name>``): device functions that take only tensors,
# numbers and dtypes. Left out on purpose: ``str_to_ty`` / ``to_tensor`` / ``map_elementwise``
# (host-side or arbitrary callables), ``device_print`` / ``static_print`` (format strings reach the
# device's printf and the host's console), ``atomic_load`` / ``atomic_store`` / ``atomic_poll`` /
# ``expect_zero`` / ``aggregate_replace`` (not emitted, not needed), ``extra`` / ``core`` /
# ``math`` / ``random`` / ``standard`` as values (module objects lead back to the host).
TL_FUNCTIONS = frozenset({
    "abs", "add", "arange", "argmax", "argmin", "associative_scan", "assume", "broadcast",
    "broadcast_to", "cast", "cat", "cdiv", "ceil", "clamp", "cos", "cumprod", "cumsum",
    "debug_barrier", "device_assert", "div_rn", "dot", "dot_scaled", "erf", "exp",
    "exp2", "expand_dims", "fdiv", "flip", "floor", "fma", "full", "gather", "histogram",
    "interleave", "join", "log", "log2", "make_block_ptr", "advance", "max", "max_constancy",
    "max_contiguous", "maximum", "min", "minimum", "mul", "multiple_of", "num_programs", "permute",
    "philox", "program_id", "rand", "rand4x", "randint", "randint4x", "randn", "randn4x", "ravel",
    "reduce", "reduce_or", "reshape", "rsqrt", "sigmoid", "sin", "softmax", "sort", "split", "sqrt",
    "sqrt_rn", "squeeze", "static_assert", "sub", "sum", "swizzle2d", "topk",
    "trans", "umulhi", "unsqueeze", "view", "where", "xor_sum", "zeros", "zeros_like",
    # memory access: checked by the write/read discipline (access.py)
    "load", "store", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min",
    "atomic_or", "atomic_xchg", "atomic_xor",
    # types and type constructors
    "constexpr", "pointer_type",
    # loop iterators (only as ``for`` iterables, where their trip counts are capped)
    "range", "static_range",
})

# ``tl.<name>`` values that are not called: dtypes and enum members.
TL_VALUES = frozenset({
    "bfloat16", "float16", "float32", "float64", "float8e4b15", "float8e4b8", "float8e4nv", "float8e5",
    "float8e5b16", "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bool", "void",
    "PropagateNan.ALL", "PropagateNan.NONE",
})

# ``tl.math.<name>`` and ``tl_math.<name>`` (Inductor's ``from triton_helpers import math as tl_math``).
MATH_FUNCTIONS = frozenset({
    "abs", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log", "log2", "rsqrt",
    "sin", "sqrt", "sqrt_rn", "umulhi",
})

# ``libdevice.<name>`` (and ``tl.extra.cuda.libdevice.<name>`` / ``tl.extra.libdevice.<name>``).
LIBDEVICE_FUNCTIONS = frozenset({
    "abs", "acos", "acosh", "add_rd", "add_rn", "add_ru", "add_rz", "asin", "asinh", "atan", "atan2", "atanh",
    "brev", "byte_perm", "cbrt", "ceil", "clz", "copysign", "cos", "cosh", "cospi", "cyl_bessel_i0",
    "cyl_bessel_i1", "div_rd", "div_rn", "div_ru", "div_rz", "double2float_rd", "double2float_rn",
    "double2float_ru", "double2float_rz", "double2hiint", "double2int_rd", "double2int_rn", "double2int_ru",
    "double2int_rz", "double2ll_rd", "double2ll_rn", "double2ll_ru", "double2ll_rz", "double2loint",
    "double2uint_rd", "double2uint_rn", "double2uint_ru", "double2uint_rz", "double2ull_rd", "double2ull_rn",
    "double2ull_ru", "double2ull_rz", "double_as_longlong", "erf", "erfc", "erfcinv", "erfcx", "erfinv", "exp",
    "exp10", "exp2", "expm1", "fast_cosf", "fast_dividef", "fast_exp10f", "fast_expf", "fast_log10f",
    "fast_log2f", "fast_logf", "fast_powf", "fast_sinf", "fast_tanf", "fast_tanhf", "fdim", "ffs", "finitef",
    "float2int_rd", "float2int_rn", "float2int_ru", "float2int_rz", "float2ll_rd", "float2ll_rn",
    "float2ll_ru", "float2ll_rz", "float2uint_rd", "float2uint_rn", "float2uint_ru", "float2uint_rz",
    "float2ull_rd", "float2ull_rn", "float2ull_ru", "float2ull_rz", "float_as_int", "float_as_uint", "floor",
    "fma", "fma_rd", "fma_rn", "fma_ru", "fma_rz", "fmod", "hadd", "hiloint2double", "hypot", "ilogb",
    "int2double_rn", "int2float_rd", "int2float_rn", "int2float_ru", "int2float_rz", "int_as_float",
    "isfinited", "isinf", "isnan", "j0", "j1", "jn", "ldexp", "lgamma", "ll2double_rd", "ll2double_rn",
    "ll2double_ru", "ll2double_rz", "ll2float_rd", "ll2float_rn", "ll2float_ru", "ll2float_rz", "llrint",
    "llround", "log", "log10", "log1p", "log2", "logb", "longlong_as_double", "mul24", "mul_rd", "mul_rn",
    "mul_ru", "mul_rz", "mulhi", "nearbyint", "nextafter", "norm3d", "norm4d", "normcdf", "normcdfinv",
    "popc", "pow", "rcbrt", "rcp64h", "rcp_rd", "rcp_rn", "rcp_ru", "rcp_rz", "remainder", "rhadd", "rhypot",
    "rint", "rnorm3d", "rnorm4d", "round", "rsqrt", "rsqrt_rn", "sad", "saturatef", "scalbn", "signbit", "sin",
    "sinh", "sinpi", "sqrt", "sqrt_rd", "sqrt_rn", "sqrt_ru", "sqrt_rz", "sub_rd", "sub_rn", "sub_ru",
    "sub_rz", "tan", "tanh", "tgamma", "trunc", "uint2double_rn", "uint2float_rd", "uint2float_rn",
    "uint2float_ru", "uint2float_rz", "uint_as_float", "ull2double_rd", "ull2double_rn", "ull2double_ru",
    "ull2double_rz", "ull2float_rd", "ull2float_rn", "ull2float_ru", "ull2float_rz", "y0", "y1", "yn",
})

# ``triton_helpers.<name>``: the pure device helpers Inductor emits.
HELPER_FUNCTIONS = frozenset({
    "any", "bucketize_binary_search", "device_assert_then", "div_floor_integer", "exp", "fp8e4m3fn_to_float32",
    "frexp", "is_floating", "max2", "max_with_index", "maximum", "maximum_with_index", "min2", "min_with_index",
    "minimum", "minimum_with_index", "online_softmax_combine", "online_softmax_combine_with_sum",
    "online_softmax_reduce", "pack_value_flag", "pow_integer", "prod", "promote_to_tensor", "rand4x",
    "randint64", "randn4x", "remainder_integer", "select_one", "sort_with_index", "unpack_flag", "unpack_value",
    "welford", "welford_combine", "welford_reduce",
})

# Dotted paths (relative to the binding's kind) that touch memory in ways the pointer-provenance
# check cannot follow (scratch buffers, tensor descriptors, grid barriers, packed inline asm).
# A candidate may use one only where the original kernel uses the same path.
ORIGINAL_ONLY = frozenset({
    "tl.make_tensor_descriptor", "tl.load_tensor_descriptor", "tl.store_tensor_descriptor",
    "triton_helpers.exclusive_scan_decoupled_lookback", "triton_helpers.exclusive_scan_decoupled_lookback_64",
    "triton_helpers.x_grid_barrier", "triton_helpers.inline_asm_pack", "triton_helpers.inline_asm_unpack",
})

# ``tl.inline_asm_elementwise`` is opaque to every later check: allowed only with the opt-in.
INLINE_ASM = "inline_asm_elementwise"

# ``triton.<name>`` inside a kernel (besides ``triton.language.<...>``).
TRITON_FUNCTIONS = frozenset({"cdiv"})

# Methods and attributes of tensors (and of the values of the functions above) a kernel may use on
# its locals, parameters and call results. Left out: ``store`` / ``atomic_*`` (writes that bypass
# the provenance check), ``item`` (host value), anything private.
TENSOR_METHODS = frozenset({
    "abs", "advance", "argmax", "argmin", "associative_scan", "broadcast_to", "cast", "cdiv", "ceil", "cos",
    "cumprod", "cumsum", "erf", "exp", "exp2", "expand_dims", "flip", "floor", "gather", "histogram", "log",
    "log2", "logical_and", "logical_or", "max", "min", "permute", "ravel", "reduce", "reduce_or", "reshape",
    "rsqrt", "sigmoid", "sin", "softmax", "sort", "split", "sqrt", "sqrt_rn", "sum", "to", "trans", "view",
    "xor_sum",
})
TENSOR_ATTRIBUTES = frozenset({"dtype", "shape", "T", "numel"})

# Builtins the Triton frontend understands in a kernel (``float("-inf")``, ``range`` loops).
BUILTINS = frozenset({"range", "float", "int", "bool", "min", "max", "abs", "len"})
# The only strings ``float(...)`` may parse.
FLOAT_STRINGS = frozenset({"inf", "-inf", "+inf", "nan", "-nan", "+nan"})

# String literals are allowed only as these arguments of allowed calls: keyword name -> allowed
# values (None: any literal, e.g. a message).
STRING_KEYWORDS: dict[str, frozenset[str] | None] = {
    "eviction_policy": frozenset({"", "evict_first", "evict_last", "evict_normal"}),
    "cache_modifier": frozenset({"", ".ca", ".cg", ".cs", ".cv", ".wb", ".wt", ".lu"}),
    "padding_option": frozenset({"", "zero", "nan"}),
    "sem": frozenset({"acquire", "release", "acq_rel", "relaxed"}),
    "scope": frozenset({"gpu", "cta", "sys"}),
    "rounding": frozenset({"rtne", "rtz"}),
    "fp_downcast_rounding": frozenset({"rtne", "rtz"}),
    "input_precision": frozenset({"tf32", "tf32x3", "ieee", "bf16x3", "bf16x6"}),
    "msg": None,
    "prefix": None,
}
# Positional string arguments: dotted call path -> indices that may be string literals.
STRING_POSITIONAL: dict[str, frozenset[int]] = {
    "tl.device_print": frozenset({0}),
    "tl.static_print": frozenset({0, 1, 2, 3}),
    "tl.static_assert": frozenset({1}),
    "tl.device_assert": frozenset({1}),
    "tl.inline_asm_elementwise": frozenset({0, 1}),
    "float": frozenset({0}),
}

# Calls that read or write memory through their first argument (or ``pointer=``).
LOAD_CALLS = frozenset({"tl.load"})
WRITE_CALLS = frozenset({"tl.store", "tl.atomic_add", "tl.atomic_and", "tl.atomic_cas", "tl.atomic_max",
                         "tl.atomic_min", "tl.atomic_or", "tl.atomic_xchg", "tl.atomic_xor"})

# ``tl.range`` keyword arguments (small int/bool literals).
RANGE_KEYWORDS = frozenset({"num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten",
                            "warp_specialize", "disable_licm"})
