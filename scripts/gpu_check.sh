#!/usr/bin/env bash
# One call on a GPU machine runs one or more parts; a short table prints last. Results under $OUT.
#   bash scripts/gpu_check.sh engine     GPU engine tests + engine report (per-example times, roofline, noise)
#   bash scripts/gpu_check.sh redteam    the red team's cheating candidates at full size
#   bash scripts/gpu_check.sh honest     the honest candidates + gate 4 on a sweep-found speedup
#   bash scripts/gpu_check.sh prdry      the PR flow in dry-run mode on an example repository
#   bash scripts/gpu_check.sh suite      `kernelopt suite benchmarks/` (SUITE_SHARD=I/N, SUITE_ARGS=...)
#   bash scripts/gpu_check.sh all        engine, redteam and honest (longer than one 10-minute call)
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
if [[ "$part" == prdry ]]; then
  bash scripts/example_pr_dry_run.sh "$OUT/pr" cuda 2>&1 | tee "$OUT/prdry.log" | tail -20
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  for f in comment.md pr_body.md publish.json report.md; do [ -f "$OUT/pr/dry/$f" ] && cp "$OUT/pr/dry/$f" "$OUT/prdry_$f"; done
  cp "$OUT"/pr/dry/results/*/result.json "$OUT/prdry_result.json" 2>/dev/null || true
  rm -rf "$OUT/pr"
fi
if [[ "$part" == suite ]]; then
  # shellcheck disable=SC2086
  python3 -m kernelopt_bot.cli suite benchmarks --out "$OUT/suite" --shard "${SUITE_SHARD:-1/1}" ${SUITE_ARGS:-} 2>&1 \
    | tee "$OUT/suite.log" | grep -vi warn | tail -20
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  cp "$OUT/suite/suite.json" "$OUT/suite/suite.md" "$OUT/" 2>/dev/null || true
  (cd "$OUT" && tar czf suite_runs.tgz suite && rm -rf suite)
fi
exit $status
