"""GPU report for the engine: per-example model time, kernels, vendor bucket, roofline, and an
empty-pack noise check, printed as a short table last. Full numbers go to $OUT/gpu_check.json.

Also saves each example's output code as test fixtures under $OUT/fixtures (see
tests/fixtures/output_code/ for where they are committed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelopt_bot.capture.recorder import capture, versions  # noqa: E402
from kernelopt_bot.harness.bench import bench  # noqa: E402
from kernelopt_bot.pack.format import KernelPack  # noqa: E402
from kernelopt_bot.profiling import profile  # noqa: E402
from kernelopt_bot.targets import load_target  # noqa: E402

EXAMPLES = [
    ("gelu.py", "fp32"), ("rmsnorm.py", "fp32"), ("rmsnorm.py", "bf16"), ("softmax.py", "fp32"),
    ("softmax.py", "bf16"), ("sum_middle_dim.py", "fp32"), ("linear_epilogue.py", "fp32"),
    ("linear_epilogue.py", "bf16"), ("conv_bn_gelu.py", "fp32"), ("mlp.py", "bf16"),
    ("attention_block.py", "bf16"), ("graph_break.py", "fp32"),
]


def main() -> None:
    out = Path(os.environ.get("OUT", "gpu_out"))
    fixtures = out / "fixtures" / f"torch-{versions()['torch'].split('+')[0]}"
    fixtures.mkdir(parents=True, exist_ok=True)
    manifest = {"torch": versions()["torch"], "triton": versions()["triton"],
                "generated_by": "scripts/gpu_check.py (torch.compile default mode on the GPU)",
                "device_target": None, "files": {}}
    rows, report = [], {"versions": versions(), "targets": []}
    for example, dtype in EXAMPLES:
        t0 = time.time()
        target = load_target(str(ROOT / "examples" / example), "cuda", dtype)
        cap = capture(target)
        prof = profile(cap)
        manifest["device_target"] = prof.roofline.device if prof.roofline else None
        for graph in cap.artifact.graphs:
            stem = example[:-3] + ("" if dtype == "fp32" else f"_{dtype}")
            name = f"{stem}.py" if len(cap.artifact.graphs) == 1 else f"{stem}_g{graph.index}.py"
            (fixtures / name).write_text(graph.code)
            manifest["files"][name] = {"example": example, "dtype": dtype,
                                       "kernels": [k.name for k in graph.kernels],
                                       "extern_calls": [c.op for c in graph.extern_calls]}
        top = prof.ranked()[0] if prof.kernels else None
        entry = {"example": example, "dtype": dtype, "model_ms": prof.model_ms, "vendor_ms": prof.vendor_ms,
                 "kernels": [k.to_json() for k in prof.kernels], "graphs": len(cap.artifact.graphs),
                 "extern_calls": [c.op for c in cap.artifact.extern_calls], "seconds": time.time() - t0}
        report["targets"].append(entry)
        rows.append((f"{example[:-3]} {dtype}", f"{prof.model_ms:.4f}", str(len(prof.kernels)),
                     f"{prof.vendor_ms or 0:.4f}",
                     f"{top.name[:34]} {top.share:.0%} {top.roofline_fraction or 0:.0%}rl {top.bound}" if top and top.share else "-"))
        report["copy_gbps"] = prof.roofline.copy_gbps if prof.roofline else None
    (fixtures / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))

    noise = []
    for example in ("softmax.py", "rmsnorm.py"):
        res = bench(str(ROOT / "examples" / example), KernelPack(), device="cuda", rounds=8, reps=20)
        noise.append((example, res))
        report.setdefault("empty_pack", []).append({"example": example, **res.to_json()})
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))

    print("\n=== kernelopt engine on", manifest["device_target"], versions())
    print(f"copy bandwidth (read+write): {report['copy_gbps']:.0f} GB/s")
    print(f"{'target':28} {'model ms':>9} {'kern':>4} {'vendor ms':>9}  top kernel (share, roofline, bound)")
    for r in rows:
        print(f"{r[0]:28} {r[1]:>9} {r[2]:>4} {r[3]:>9}  {r[4]}")
    for example, res in noise:
        print(f"empty pack {example:16} baseline {res.baseline_ms:.4f} ms packed {res.packed_ms:.4f} ms "
              f"speedup {res.speedup:.4f} noise floor {res.noise_floor:.4f}")


if __name__ == "__main__":
    main()
