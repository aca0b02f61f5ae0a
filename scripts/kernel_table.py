"""The before/after table for kernel targets (issue 14): for each ``optimize`` run of a launcher or
Helion file under DIR/out/<name>/ and its re-measurement with the patch applied to a clean copy
(DIR/bench_<name>.json, from ``kernelopt bench FILE --patch patch.diff --json``), one row: the
kernel, the config it ran and the verified one, gate 4's speedup inside ``optimize``, the
re-measured speedup and its noise floor, and the run's seconds.

Usage: python scripts/kernel_table.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("target", "kernel", "verdict", "verified config", "optimize speedup", "re-measured (clean copy)",
           "as it is ms", "patched ms", "noise floor", "optimize s")


def rows(folder: Path) -> list[list[str]]:
    out = []
    for result_path in sorted((folder / "out").glob("*/result.json")):
        name = result_path.parent.name
        result = json.loads(result_path.read_text())
        bench_path = folder / f"bench_{name}.json"
        bench = json.loads(bench_path.read_text()) if bench_path.is_file() and bench_path.stat().st_size else {}
        for kernel in result.get("kernels") or [{"name": "-", "status": result.get("error") or result.get("status")}]:
            out.append([name, kernel.get("name", "-"), str(kernel.get("status", "-"))[:60],
                        str(kernel.get("detail") or "-")[:80] if kernel.get("status") == "accepted" else "-",
                        _x(kernel.get("speedup")), _x(bench.get("speedup")), _ms(bench.get("baseline_ms")),
                        _ms(bench.get("packed_ms")), _pct(bench.get("noise_floor")),
                        f"{result['seconds']:.0f}" if result.get("seconds") is not None else "-"])
    return out


def _x(value: object) -> str:
    return f"{value:.3f}x" if isinstance(value, (int, float)) else "-"


def _ms(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


def _pct(value: object) -> str:
    return f"{value:.2%}" if isinstance(value, (int, float)) else "-"


def main(folder: str) -> None:
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for row in rows(Path(folder)):
        print("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
