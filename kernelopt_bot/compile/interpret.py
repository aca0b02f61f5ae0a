"""CPU interpreter mode: every compatibility shim the pipeline needs without a GPU, in one place.

With no CUDA device, Inductor can still emit Triton kernels for CPU tensors
(``cpu_backend = "triton"``) and ``TRITON_INTERPRET=1`` runs them with numpy. Three gaps in the
stock stack need patching (FINDINGS.md section 4):

* ``torch.utils._triton.triton_hash_with_backend`` asks the active GPU driver for a hash;
* ``triton.language.extra.libdevice`` functions are ``...`` stubs that return ``None`` when
  interpreted, so a numpy-backed table stands in for them;
* compile workers would not inherit these patches, so compilation stays in-process.

Times measured in this mode mean nothing and are never reported as numbers.
"""

from __future__ import annotations

import math
import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

_ENABLED = False


def enable_interpreter_mode() -> None:
    """Idempotently switch this process to CPU-interpreter mode."""
    global _ENABLED
    if _ENABLED:
        return
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        # Triton and Inductor build their @triton.jit helpers at import; built outside
        # interpreter mode they refuse to run inside interpreted kernels.
        raise RuntimeError(
            "interpreter mode must be enabled before triton is imported "
            "(call enable_interpreter_mode() first, or set TRITON_INTERPRET=1)"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton

    torch_triton.triton_hash_with_backend = lambda: "KERNELOPT_INTERPRETER"
    inductor_config.cpu_backend = "triton"
    inductor_config.compile_threads = 1
    try:
        import torch._inductor.runtime.triton_helpers as triton_helpers

        # Kernels generated for a CUDA target call this at import; there is no GPU driver here.
        triton_helpers.set_driver_to_gpu = lambda: None
    except (ImportError, AttributeError):  # pragma: no cover - older layouts
        pass
    _install_libdevice_shim()
    _ENABLED = True


def _wrap(np_fn: Callable[..., Any], out_bool: bool = False) -> Callable[..., Any]:
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def shim(*args: Any, **_: Any) -> Any:
        ref = next(a for a in args if isinstance(a, tl.tensor))
        datas = [a.handle.data if isinstance(a, tl.tensor) else a for a in args]
        with np.errstate(all="ignore"):
            out = np.asarray(np_fn(*datas))
        scalar_ty = tl.int1 if out_bool else ref.type.scalar
        if not out_bool:
            out = out.astype(ref.handle.data.dtype, copy=False)
        ty = tl.block_type(scalar_ty, list(out.shape)) if ref.type.is_block() else scalar_ty
        return tl.tensor(TensorHandle(out, scalar_ty), ty)

    return shim


def _libdevice_table() -> dict[str, Callable[..., Any]]:
    import numpy as np

    erf = np.vectorize(math.erf, otypes=[np.float64])
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    return {
        "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
        "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
        "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "fast_tanhf": np.tanh,
        "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin, "acos": np.arccos,
        "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
        "atan2": np.arctan2, "erf": erf, "erfc": erfc, "lgamma": lgamma, "floor": np.floor,
        "ceil": np.ceil, "trunc": np.trunc, "nearbyint": np.rint, "rint": np.rint,
        "llrint": np.rint, "round": np.round, "abs": np.abs, "pow": np.power, "fmod": np.fmod,
        "hypot": np.hypot, "copysign": np.copysign, "nextafter": np.nextafter,
        "ldexp": lambda x, e: np.ldexp(x, np.asarray(e).astype(np.int32)),
        "fma": lambda a, b, c: a * b + c, "div_rn": np.divide, "fdiv_rn": np.divide,
        "isnan": np.isnan, "isinf": np.isinf, "signbit": np.signbit, "isfinited": np.isfinite,
    }


_BOOL_RESULTS = {"isnan", "isinf", "signbit", "isfinited"}


def _install_libdevice_shim() -> None:
    """Patch the generic stub module in place; Inductor and Helion both resolve to it."""
    import triton.language.extra.libdevice as stub

    shim = types.SimpleNamespace(
        **{n: _wrap(f, out_bool=n in _BOOL_RESULTS) for n, f in _libdevice_table().items()}
    )
    for name, fn in vars(shim).items():
        setattr(stub, name, fn)
