#!/usr/bin/env bash
# One call on a GPU machine: run the GPU tests, then the engine report, whose short table prints last.
# Usage (device tool): bash scripts/gpu_check.sh   -- results under $OUT
set -uo pipefail
export PYTHONUNBUFFERED=1 OUT="${OUT:-$PWD/gpu_out}" KERNELOPT_EXAMPLE_SIZE=full
mkdir -p "$OUT"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/kernelopt-inductor-cache}"
# The engine needs torch, triton, click and rich, which the GPU image has; no install needed.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
status=0
python3 -m pytest tests/gpu -q -p no:cacheprovider -s ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} 2>&1 | tee "$OUT/gpu_tests.log" | grep -E "PIN|EMPTY|passed|failed|error|Error" | tail -40
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
python3 scripts/gpu_check.py 2>&1 | tee "$OUT/gpu_check.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
(cd "$OUT" && tar czf fixtures.tgz fixtures && rm -rf fixtures)
exit $status
