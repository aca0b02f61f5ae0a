"""Copy liger-kernel's op modules that benchmarks/kernels' launchers call into a folder, as
``liger_<op>_ops.py``: a team's vendored copy of the kernels, which a kernel target's patch then
edits (liger-kernel's code stays out of this repository; the copy is made from the installed
package where the benchmark runs).

Usage: python scripts/vendor_liger.py DIR
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

OPS = ("rms_norm", "layer_norm", "swiglu", "geglu", "softmax", "kl_div", "fused_add_rms_norm")


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for op in OPS:
        spec = importlib.util.find_spec(f"liger_kernel.ops.{op}")
        if spec is None or spec.origin is None:
            raise SystemExit(f"liger-kernel has no ops.{op}: install liger-kernel")
        shutil.copy(spec.origin, out / f"liger_{op}_ops.py")
    print(f"copied {len(OPS)} liger-kernel op modules into {out}")


if __name__ == "__main__":
    main(sys.argv[1])
