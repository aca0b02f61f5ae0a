#!/usr/bin/env bash
# One call on a GPU machine runs one or more parts; a short table prints last. Results under $OUT.
#   bash scripts/gpu_check.sh engine     GPU engine tests + engine report (per-example times, roofline, noise)
#   bash scripts/gpu_check.sh redteam    the red team's cheating candidates at full size
#   bash scripts/gpu_check.sh honest     the honest candidates + gate 4 on a sweep-found speedup
#   bash scripts/gpu_check.sh all        everything (longer than one 10-minute device call)
set -uo pipefail
export PYTHONUNBUFFERED=1 OUT="${OUT:-$PWD/gpu_out}" KERNELOPT_EXAMPLE_SIZE=full
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/kernelopt-inductor-cache}"
# The engine needs torch, triton, click and rich, which the GPU image has; no install needed.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
part="${1:-engine}"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'

run_tests() {  # $1 log name, rest: pytest args
  local log="$1"; shift
  python3 -m pytest -q -p no:cacheprovider -s "$@" 2>&1 | tee "$OUT/$log.log" \
    | grep -E "PIN|EMPTY|REDTEAM|HONEST|passed|failed|Error" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

if [[ "$part" == engine || "$part" == all ]]; then
  run_tests gpu_tests tests/gpu
  python3 scripts/gpu_check.py 2>&1 | tee "$OUT/gpu_check.log" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  (cd "$OUT" && tar czf fixtures.tgz fixtures && rm -rf fixtures)
fi
if [[ "$part" == redteam || "$part" == all ]]; then
  run_tests redteam tests/redteam -k "cheater or covers"
fi
if [[ "$part" == honest || "$part" == all ]]; then
  run_tests honest tests/redteam -k "${HONEST_K:-honest}"
  python3 scripts/find_speedup.py softmax.py bf16 ${SWEEP_N:-24} 2>&1 | tee "$OUT/speedup.log" | grep -vi warn | tail -12
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
exit $status
