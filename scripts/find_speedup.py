"""Find a launch config that beats the compiler for one example's heaviest kernel, then put it
through the four gates. Usage: python scripts/find_speedup.py EXAMPLE DTYPE [N_CONFIGS]

Prints the kernel-level sweep (harness: L2 flushed, median) and the verdict with gate 4's numbers.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelopt_bot.candidate import Candidate  # noqa: E402
from kernelopt_bot.capture.recorder import capture  # noqa: E402
from kernelopt_bot.harness.kernel import KernelHarness  # noqa: E402
from kernelopt_bot.profiling import profile  # noqa: E402
from kernelopt_bot.search.space import sample  # noqa: E402
from kernelopt_bot.targets import load_target  # noqa: E402
from kernelopt_bot.verify.cascade import Cascade, VerifyOptions  # noqa: E402


def main() -> None:
    example, dtype = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 24
    t0 = time.time()
    cap = capture(load_target(str(ROOT / "examples" / example), "cuda", dtype))
    prof = profile(cap)
    top = prof.ranked()[0]
    kernel = cap.artifact.kernel(f"g{top.graph}:{top.name}")
    harness = KernelHarness(kernel, cap.recording(kernel.graph, kernel.name).on("cuda"), "cuda")
    base = harness.time(reps=50).median_ms
    chosen = cap.recording(kernel.graph, kernel.name).chosen_config
    print(f"{example} {dtype}: {kernel.name} share {top.share:.0%}, compiler config {chosen}: {base:.4f} ms")
    results = []
    for cfg in sample(kernel, n, seed=0):
        try:
            ms = harness.time(config=cfg, reps=30).median_ms
        except Exception as exc:  # noqa: BLE001 - a config that fails to compile is skipped
            print(f"  {cfg.describe():60} failed: {type(exc).__name__}")
            continue
        results.append((ms, cfg))
    results.sort(key=lambda r: r[0])
    for ms, cfg in results[:5]:
        print(f"  {cfg.describe():60} {ms:.4f} ms  ({base / ms:.3f}x kernel)")
    best = results[0][1]
    with Cascade(cap, VerifyOptions(rounds=10, reps=20)) as cascade:
        verdict = cascade.verify(kernel, Candidate(f"sweep best {best.describe()}", config=best))
    perf = verdict.gate("performance")
    print(f"VERDICT {example} {dtype} {best.describe()}: {verdict.status}; "
          f"{perf.reason if perf else ''}")
    out = Path(os.environ.get("OUT", "."))
    (out / f"speedup_{example[:-3]}_{dtype}.json").write_text(json.dumps(
        {"example": example, "dtype": dtype, "kernel": kernel.name, "compiler_config": chosen,
         "compiler_kernel_ms": base, "sweep": [(ms, c.to_json()) for ms, c in results],
         "verdict": verdict.to_json(), "seconds": time.time() - t0}, indent=2, default=str))


if __name__ == "__main__":
    main()
