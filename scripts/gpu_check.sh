#!/usr/bin/env bash
# One call on a GPU machine runs one or more parts, each under its own time limit; a short table
# prints last. Logs and results land under $OUT, packed as results.tgz plus summary.txt.
#   bash scripts/gpu_check.sh engine     GPU engine tests + engine report (per-example times, roofline, noise)
#   bash scripts/gpu_check.sh tests      the GPU tests named in GPU_TESTS (default tests/gpu)
#   bash scripts/gpu_check.sh redteam    the red team (all three files) at tiny size, then its GPU-only cases (a race,
#                                        gate 4) at full size
#   bash scripts/gpu_check.sh redteam_gpu the red team's GPU-only cases alone (a race, gate 4's noise and gamma), at full size
#   bash scripts/gpu_check.sh isolation  model code and candidates find no secret, with CUDA inside the namespaces
#   bash scripts/gpu_check.sh honest     the honest candidates (HONEST_K selects)
#   bash scripts/gpu_check.sh speedup    gate 4 on a sweep-found launch config (SPEEDUP_EXAMPLE, SPEEDUP_DTYPE)
#   bash scripts/gpu_check.sh prdry      the PR flow in dry-run mode on an example repository (EXAMPLE, DTYPE, WALL_SECONDS)
#   bash scripts/gpu_check.sh optimize   `kernelopt optimize` at the default budget: a verified win within two minutes
#   bash scripts/gpu_check.sh suite      `kernelopt suite benchmarks/` (SUITE_SHARD=I/N, SUITE_ARGS=...)
#   bash scripts/gpu_check.sh gpus       the same suite problems on one GPU, then on all (SUITE_ARGS without --gpus;
#                                        GPUS_RUNS=one or all for one half)
#   bash scripts/gpu_check.sh noise      the harness's noise floor with an empty pack (NOISE_PROBLEMS="level3/x.py:fp32 ...";
#                                        NOISE_PROBLEMS=all: every pair of suite.json, level 3 first, less NOISE_SKIP
#                                        and those measured under NOISE_MEASURED="benchmarks/results/DIR ...";
#                                        NOISE_WARM=1: compiled first, NOISE_WARM_JOBS at once)
#   bash scripts/gpu_check.sh warm       NOISE_PROBLEMS compiled into the caches only (a later call on the machine, still warm, skips them)
#   bash scripts/gpu_check.sh kernels    kernel targets (liger-kernel, Helion): optimize, re-measure each patch on a clean
#                                        copy, and the PR flow on a kernel file (KERNEL_TARGETS, KERNEL_DTYPE, KERNEL_PR)
#   bash scripts/gpu_check.sh train      training steps: `optimize --train` on TRAIN_PROBLEMS ("level/x.py:dtype ..."),
#                                        step speedup split into forward and backward
#   bash scripts/gpu_check.sh ontop      each verified pack of a committed suite (ONTOP_SUITE) on max-autotune-no-cudagraphs,
#                                        over that mode alone (issue 13's third figure; ONTOP_ARGS="--only PATTERN ...")
#   bash scripts/gpu_check.sh unseen     `kernelopt optimize` at the default budget on benchmarks/unseen/ (UNSEEN_PROBLEMS="file.py:dtype ..."),
#                                        problems the method was never tuned on, with the user's mode (UNSEEN_MODE) or the default;
#                                        each run's store (every candidate's gate numbers) comes back as r/unseen/SLUG.store.db
#   bash scripts/gpu_check.sh offsets    identical processes of one model timed side by side (OFFSETS_PROBLEMS="level3/x.py:bf16 ...",
#                                        OFFSETS_ARMS, OFFSETS_VARIANTS="cold warm": each arm as it started, or a cold
#                                        start replaced by a cache load): is a launch-bound network's noise between
#                                        processes or within one, and does a cold start's offset go with the replacement
#   bash scripts/gpu_check.sh honest prdry suite      several parts in one call
# Limits per part in seconds: LIMIT_<PART>=N (default 540). Carried wheels in .whl/ are installed first.
set -uo pipefail
export PYTHONUNBUFFERED=1 OUT="${OUT:-$PWD/gpu_out}" KERNELOPT_EXAMPLE_SIZE=full
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-/tmp/kernelopt-inductor-cache}"
if compgen -G ".whl/*.whl" > /dev/null && ! python3 -c "import pydantic, openai" 2> /dev/null; then  # the bot's config needs pydantic, which the GPU image lacks
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/r"
R="$OUT/r"
summary="$OUT/summary.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$R/nvidia-smi.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee "$summary"
status=0

limited() {  # $1 part name; runs part_$1 in a child bash under the part's limit from LIMIT_<PART>
  local part="$1" var="LIMIT_${1^^}" start=$SECONDS rc before
  before="$(pids_now)"
  export PART_END=$(( $(date +%s) + ${!var:-540} ))  # a part that works through a list stops before its limit cuts it
  timeout -k 10 "${!var:-540}" bash -c "part_$part"
  rc=$?
  echo "part $part: exit $rc after $((SECONDS - start)) s" | tee -a "$summary"
  reap_left_behind "$part" "$before"
  [ "$rc" -eq 0 ] || status=1
  pack_results
}

pids_now() { ls /proc | grep -E '^[0-9]+$' | sort; }

reap_left_behind() {  # $1 part, $2 the pids before it. A limit kills the part's shell, not the engines and
  # arms it started in sessions of their own; left running they hold the GPU's memory, and the next part's
  # 30 GB model ran out of it (12-06). What the part started and left of ours (kernelopt's processes, their
  # compile workers, pytest) is killed before the next begins; nothing else on the machine is touched.
  local pid cmd left=""
  for pid in $(comm -13 <(echo "$2") <(pids_now)); do
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    cmd="$({ tr '\0' ' ' < "/proc/$pid/cmdline"; } 2> /dev/null)"
    [[ "$cmd" =~ kernelopt|pytest|_inductor|triton ]] || continue  # not ours (or gone: this loop's subshells)
    left="$left $pid:${cmd:0:60}"
    kill -9 "$pid" 2> /dev/null
  done
  [ -z "$left" ] || { echo "part $1 left processes behind, killed:$left" | tee -a "$summary"; sleep 3; }
}

pack_results() {  # results.tgz as of now: if the call's own limit kills a later part, what ran so far comes back
  find "$R" -name .gitignore -delete  # output folders ignore themselves for users; these results are kept
  rm -rf "$R"/kpr/dry/files  # a PR proposal's files: a vendored third-party kernel stays out of what comes back
  (cd "$OUT" && tar czf results.tgz.part r && mv results.tgz.part results.tgz)
}

run_tests() {  # $1 log name, rest: pytest args. Each test's name and outcome is logged as it ends (-v
  # -rfE --tb=short), so a part its limit cuts off still says which tests failed and how.
  local log="$1"; shift
  python3 -m pytest -v -rfE --tb=short -p no:cacheprovider -s "$@" > "$R/$log.log" 2>&1
  local rc=$?
  grep -E "PIN|EMPTY|REDTEAM|HONEST|OPTIMIZE|ALIGNED|MEMORY|^\[ *[0-9]+ s\]|passed|failed|FAILED|ERROR|Error" "$R/$log.log" | tail -40
  return $rc
}

part_engine() {
  run_tests gpu_tests tests/gpu || return 1
  python3 scripts/gpu_check.py > "$R/gpu_check.log" 2>&1; local rc=$?
  tail -25 "$R/gpu_check.log"
  [ -d "$OUT/fixtures" ] && mv "$OUT/fixtures" "$R/"
  [ -f "$OUT/gpu_check.json" ] && mv "$OUT/gpu_check.json" "$R/"
  return $rc
}

GPU_ONLY_CASES="race_next_block_on_gpu or unchanged_source_noise or slower_launch_config"
part_redteam() {  # every case at the examples' tiny size, in three pytest processes at once (a case
  # starts a sandbox and model arms: about 7 s each on the H200, 70 cases), then the GPU-only ones
  # (a race across programs, gate 4's noise and gamma) alone, at full size
  local rc=0 not_gpu="not ($GPU_ONLY_CASES)" t="tests/redteam"
  export KERNELOPT_EXAMPLE_SIZE=tiny
  run_tests redteam_main "$t/test_redteam.py" -k "cheater and $not_gpu" > "$R/redteam_main.tail" & local a=$!
  { run_tests redteam_static "$t/test_redteam_static.py" && run_tests redteam_honest "$t/test_redteam.py" -k "not cheater"; } \
    > "$R/redteam_static.tail" & local b=$!
  run_tests redteam_dynamic "$t/test_redteam_dynamic.py" -k "$not_gpu" > "$R/redteam_dynamic.tail" & local c=$!
  wait $a || rc=1; wait $b || rc=1; wait $c || rc=1
  cat "$R"/redteam_*.tail
  unset KERNELOPT_EXAMPLE_SIZE
  part_redteam_gpu || rc=1
  return $rc
}

part_redteam_gpu() { run_tests redteam_gpu tests/redteam -k "$GPU_ONLY_CASES"; }  # at full size (126 s on an H100, 12-07d: give it 150)

part_tests() { run_tests tests ${GPU_TESTS:-tests/gpu}; }  # GPU_TESTS: test files or node ids

part_isolation() { run_tests isolation tests/test_isolation.py tests/test_infrastructure.py; }

part_honest() { run_tests honest tests/redteam -k "${HONEST_K:-honest}"; }

part_speedup() {  # gate 4 on a real speedup: a launch config found by a sweep, through all four gates
  python3 scripts/find_speedup.py "${SPEEDUP_EXAMPLE:-softmax.py}" "${SPEEDUP_DTYPE:-bf16}" "${SWEEP_N:-24}" \
    > "$R/speedup.log" 2>&1; local rc=$?
  grep -vi warn "$R/speedup.log" | tail -12
  return $rc
}

part_optimize() { run_tests optimize tests/gpu/test_gpu_optimize.py; }

part_prdry() {
  bash scripts/example_pr_dry_run.sh "$R/pr" cuda > "$R/prdry.log" 2>&1; local rc=$?
  tail -20 "$R/prdry.log"
  return $rc
}

part_suite() {
  # shellcheck disable=SC2086
  python3 -m kernelopt_bot.cli suite benchmarks --out "$R/suite" --shard "${SUITE_SHARD:-1/1}" ${SUITE_ARGS:-} \
    > "$R/suite.log" 2>&1; local rc=$?
  grep -vi warn "$R/suite.log" | tail -20
  return $rc
}

part_offsets() {  # scripts/process_offsets.py on each of OFFSETS_PROBLEMS ("level/file.py:dtype"), each variant
  # of OFFSETS_VARIANTS: "cold" (arms answer as they started) and "warm" (--warm-load: a cold start replaced)
  local rc=0 spec file dtype slug variant flag
  for spec in ${OFFSETS_PROBLEMS:-level3/tiny_vit.py:bf16 level3/tiny_vit.py:fp32}; do
    file="${spec%%:*}" dtype="${spec##*:}"
    for variant in ${OFFSETS_VARIANTS:-cold warm}; do
      slug="$(basename "$file" .py)_${dtype}_$variant" flag=""
      [ "$variant" = warm ] && flag="--warm-load"
      # shellcheck disable=SC2086
      python3 scripts/process_offsets.py "benchmarks/$file" --dtype "$dtype" --arms "${OFFSETS_ARMS:-6}" $flag \
        --json "$R/offsets_$slug.json" > "$R/offsets_$slug.log" 2>&1 || rc=1
      echo "--- offsets $slug" | tee -a "$summary"
      grep -v -i warn "$R/offsets_$slug.log" | tail -8 | tee -a "$summary"
    done
  done
  return $rc
}

part_ontop() {  # scripts/pack_on_mant.py: the packs of ONTOP_SUITE's runs, from benchmarks/results/
  # shellcheck disable=SC2086
  python3 scripts/pack_on_mant.py "${ONTOP_SUITE:-benchmarks/results/h200-2026-12-05/merged}" \
    --runs benchmarks/results --out "$R/ontop" ${ONTOP_ARGS:-} > "$R/ontop.log" 2>&1; local rc=$?
  tail -40 "$R/ontop.log"
  return $rc
}

part_unseen() {  # `kernelopt optimize` on each of UNSEEN_PROBLEMS ("file.py:dtype"), as a user runs it; one
  # problem's failure does not stop the others, and none starts that its default budget cannot finish before the limit
  local rc=0 spec file dtype slug path mode_flag=""
  [ -n "${UNSEEN_MODE:-}" ] && mode_flag="--mode $UNSEEN_MODE"
  for spec in ${UNSEEN_PROBLEMS:-cosine_similarity_rows.py:bf16 masked_mean_rows.py:fp32 var_mean_columns.py:fp32 softcap_softmax.py:bf16}; do
    file="${spec%%:*}" dtype="${spec##*:}" slug="$(basename "$file" .py)_$dtype" path="benchmarks/unseen/$file"
    [[ "$file" == */* ]] && path="benchmarks/$file"  # level1/x.py: a suite problem, run the same way to compare
    if [ $(( PART_END - $(date +%s) )) -lt "${UNSEEN_NEED_S:-170}" ]; then echo "$slug: not started (the part's limit)"; continue; fi
    # shellcheck disable=SC2086
    # The run's own store comes back with it: each candidate's gate numbers (gate 4 in the engine's
    # included) are there, not in result.json (`kernelopt store show --latest ... --store FILE --json`).
    python3 -m kernelopt_bot.cli optimize "$path" --dtype "$dtype" $mode_flag --out "$R/unseen/$slug" \
      --store "$R/unseen/$slug.store.db" > "$R/unseen_$slug.log" 2>&1 || rc=1
    tail -3 "$R/unseen_$slug.log"
  done
  return $rc
}

timed_suite() {  # $1 run name, $2 --gpus value: one suite run with cold compiler caches of its own
  local t0=$SECONDS rc
  # shellcheck disable=SC2086
  TORCHINDUCTOR_CACHE_DIR="/tmp/cache-$1" TRITON_CACHE_DIR="/tmp/cache-$1/triton" \
    python3 -m kernelopt_bot.cli suite benchmarks --out "$R/$1" --gpus "$2" ${SUITE_ARGS:-} > "$R/$1.log" 2>&1
  rc=$?
  echo "$1 (--gpus $2): $((SECONDS - t0)) s" | tee -a "$summary"
  return $rc
}

part_gpus() {  # issue 6: the same problems on one GPU, then on every GPU, each with its wall time
  # GPUS_RUNS="one" or "all" runs only that half (in separate calls; compare the two locally with
  # scripts/compare_suites.py ONE_DIR ALL_DIR).
  local rc=0 runs="${GPUS_RUNS:-one all}"
  [[ " $runs " == *" one "* ]] && { timed_suite one_gpu 0, || rc=1; }
  [[ " $runs " == *" all "* ]] && { timed_suite all_gpus all || rc=1; }
  if [ -d "$R/one_gpu" ] && [ -d "$R/all_gpus" ]; then
    python3 scripts/compare_suites.py "$R/one_gpu" "$R/all_gpus" | tee -a "$summary"
  fi
  return $rc
}

DEFAULT_NOISE_PROBLEMS="level3/mixer_block.py:fp32 level3/gpt_block.py:bf16 level3/tiny_vit.py:fp32 level1/softmax_channels.py:fp32"
if [ "${NOISE_PROBLEMS:-}" = all ]; then  # every problem-dtype pair of benchmarks/suite.json (not the training
  # steps), level 3 first, then 2, then 1; less NOISE_SKIP and the pairs the folders in NOISE_MEASURED measured
  # shellcheck disable=SC2086
  NOISE_PROBLEMS="$(python3 scripts/noise_problems.py --skip ${NOISE_SKIP:-} --measured ${NOISE_MEASURED:-})" \
    || { echo "noise: scripts/noise_problems.py failed" >&2; exit 2; }
  [ -n "$NOISE_PROBLEMS" ] || NOISE_PROBLEMS=none  # every pair measured: nothing to do (not the defaults)
  export NOISE_PROBLEMS
fi
WARMED=/tmp/kernelopt-warmed.txt  # the problems this machine has compiled into its caches (kept while it stays warm)
NOISED=/tmp/kernelopt-noised.txt  # the problems an earlier call on this machine measured (NOISE_AGAIN=1 measures them again)
part_warm() {  # NOISE_PROBLEMS compiled into the caches, NOISE_WARM_JOBS at once (scripts/warm_cache.py), but
  # those this machine already warmed in an earlier call; nothing timed
  local spec todo=()
  for spec in ${NOISE_PROBLEMS:-$DEFAULT_NOISE_PROBLEMS}; do
    [ "$spec" = none ] && continue
    grep -qxF "$spec" "$WARMED" "$NOISED" 2> /dev/null || todo+=("$spec")  # warmed, or measured already
  done
  if [ ${#todo[@]} -eq 0 ]; then echo "warm: every problem already warmed on this machine" | tee -a "$summary"; return 0; fi
  python3 scripts/warm_cache.py --jobs "${NOISE_WARM_JOBS:-6}" --deadline "${NOISE_WARM_S:-240}" \
    --keys "$R/warm_keys_$(date +%s).json" "${todo[@]}" >> "$R/warm.log" 2>&1
  { cat "$WARMED" 2> /dev/null; sed -n 's/: compiled in .*//p' "$R/warm.log"; } | sort -u > "$WARMED.new" \
    && mv "$WARMED.new" "$WARMED"  # warm.log holds every call's lines: each problem listed once
  tail -1 "$R/warm.log" | tee -a "$summary"
  return 0  # a problem not warmed compiles in its own bench
}

part_noise() {  # the harness's noise floor (baseline against baseline, and an empty pack against the
  # baseline) on NOISE_PROBLEMS ("level/file.py:dtype" each), launch-bound networks among them.
  # NOISE_PIN=gpu-local: every process of each bench (the arms inherit it) on one core of the GPU's
  # NUMA node as well, in turn with the unpinned runs, to see whether the arms' host placement is the noise
  local rc=0 spec file dtype slug pin=""
  echo '{"format": "kernelopt-pack", "version": 1, "entries": []}' > "$R/empty_pack.json"
  { lscpu | grep -iE "^(model name|numa|cpu\(s\)|on-line)"; nvidia-smi topo -m; } > "$R/cpu_topology.txt" 2>&1
  if [ "${NOISE_PIN:-}" = gpu-local ]; then
    pin="$(python3 scripts/gpu_local_core.py)" && echo "noise: pinned runs on core $pin" | tee -a "$summary"
  fi
  # NOISE_WARM=1: compile them all first, several at once, so the benches only load. Off by default: on the
  # H200 (12-05e) 35 of 51 arms missed the warm compile (then made in plain spawned processes; now in
  # model arms started as the benches' are) and compiled cold; r/cache_keys.txt says whether they still do
  [ "${NOISE_WARM:-0}" = 0 ] || part_warm
  for spec in ${NOISE_PROBLEMS:-$DEFAULT_NOISE_PROBLEMS}; do
    [ "$spec" = none ] && { echo "noise: every pair already measured" | tee -a "$summary"; continue; }
    # measured by an earlier call on this machine (still warm): that call's results hold it
    grep -qxF "$spec" "$NOISED" 2> /dev/null && [ "${NOISE_AGAIN:-0}" = 0 ] && continue
    if [ $(( PART_END - $(date +%s) )) -lt "${NOISE_MIN_S:-60}" ]; then  # a bench cut midway measures nothing
      echo "noise: stopped before $spec, under ${NOISE_MIN_S:-60} s left" | tee -a "$summary"; break
    fi
    file="${spec%%:*}" dtype="${spec##*:}" slug="$(basename "$file" .py)_$dtype"
    python3 -m kernelopt_bot.cli --verbose bench "benchmarks/$file" --pack "$R/empty_pack.json" --dtype "$dtype" \
      --json > "$R/noise_$slug.json" 2> "$R/noise_$slug.log" || rc=1
    python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("measured") else 1)' \
      "$R/noise_$slug.json" 2> /dev/null && echo "$spec" >> "$NOISED"  # only what timed rounds (a GPU run)
    if [ -n "$pin" ]; then
      taskset -c "$pin" python3 -m kernelopt_bot.cli bench "benchmarks/$file" --pack "$R/empty_pack.json" \
        --dtype "$dtype" --json > "$R/noise_${slug}_pinned.json" 2> "$R/noise_${slug}_pinned.log" || rc=1
    fi
  done
  compgen -G "$R/noise_*.json" > /dev/null || return $rc
  python3 scripts/noise_table.py "$R"/noise_*.json | tee -a "$summary"
  # which arms loaded the warm compile and which missed it, and for a miss, what in its key differs
  python3 scripts/cache_keys.py "$R"/noise_*.json "$R"/warm_keys_*.json > "$R/cache_keys.txt" 2>&1
  grep -E "^[^ ].*: [0-9]+ key" "$R/cache_keys.txt" | tee -a "$summary"
  return $rc
}

part_train() {  # training steps (issue 17): `kernelopt optimize --train` at the default budget on each of
  # TRAIN_PROBLEMS ("level/file.py:dtype"), then the step's speedup and its forward / backward split
  local rc=0 spec file dtype slug dirs=()
  for spec in ${TRAIN_PROBLEMS:-level1/layer_norm.py:bf16 level1/cross_entropy.py:bf16 level3/mlp_4layer.py:bf16 level3/prenorm_attention_block.py:bf16}; do
    file="${spec%%:*}" dtype="${spec##*:}" slug="$(basename "$file" .py)_$dtype"
    python3 -m kernelopt_bot.cli optimize "benchmarks/$file" --train --dtype "$dtype" --out "$R/train/$slug" \
      > "$R/train_$slug.log" 2>&1 || rc=1
    grep -E "configs timed|: (accepted|rejected)|error" "$R/train_$slug.log" | tail -4
    dirs+=("$R/train/$slug")
  done
  python3 scripts/train_table.py "${dirs[@]}" | tee -a "$summary"
  return $rc
}

part_kernels() {  # kernel targets (issue 14): optimize each of KERNEL_TARGETS (benchmarks/kernels/, the liger
  # ones on a vendored copy of liger-kernel's ops, made in a work folder outside $R: none of liger's code comes
  # back) at the default budget, re-measure each patch applied to a clean copy of the folder (kernelopt bench
  # --patch), then the PR flow on the first target that got a patch (or KERNEL_PR), in a dry run
  local W=/tmp/kernels-work t rc=0 pr="${KERNEL_PR:-}" alt
  mkdir -p "$W/out" "$R/kernels"
  python3 scripts/vendor_liger.py "$W" && cp benchmarks/kernels/*.py "$W/" || return 1
  if ! python3 -c "import helion" 2> "$R/kernels/helion_import.log"; then  # an older Helion for this torch
    for alt in .whl/helion-alt/*.whl; do
      rm -rf /tmp/site-helion && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-helion "$alt" \
        && PYTHONPATH="/tmp/site-helion:$PYTHONPATH" python3 -c "import helion" 2>> "$R/kernels/helion_import.log" \
        && { export PYTHONPATH="/tmp/site-helion:$PYTHONPATH"; echo "helion from $(basename "$alt")" | tee -a "$summary"; break; }
    done
  fi
  for t in ${KERNEL_TARGETS:-liger_rms_norm liger_layer_norm liger_swiglu liger_geglu helion_rms_norm helion_softmax}; do
    (cd "$W" && python3 -m kernelopt_bot.cli optimize "$t.py" --dtype "${KERNEL_DTYPE:-bf16}" --out "out/$t" \
      > "out_$t.log" 2>&1) || rc=1
    grep -E "configs timed|: (accepted|rejected|passed)|error" "$W/out_$t.log" | tail -5
    mkdir -p "$R/kernels/out" && cp -r "$W/out/$t" "$R/kernels/out/" && cp "$W/out_$t.log" "$R/kernels/"  # kept if a later step runs out of time
    if [ -f "$W/out/$t/patch.diff" ]; then
      (cd "$W" && python3 -m kernelopt_bot.cli bench "$t.py" --patch "out/$t/patch.diff" --dtype "${KERNEL_DTYPE:-bf16}" \
        --json > "bench_$t.json" 2> "bench_$t.log") || rc=1
      cp "$W/bench_$t.json" "$W/bench_$t.log" "$R/kernels/"
      [ -n "$pr" ] || pr="$t"
    fi
  done
  python3 scripts/kernel_table.py "$R/kernels" | tee -a "$summary"
  if [ -n "$pr" ] && [ "$pr" != none ]; then  # KERNEL_PR=none: no PR flow
    EXAMPLE="$pr" DTYPE="${KERNEL_DTYPE:-bf16}" bash scripts/example_pr_dry_run.sh "$R/kpr" cuda > "$R/kprdry.log" 2>&1 || rc=1
    echo "PR flow on $pr:" | tee -a "$summary"; tail -8 "$R/kprdry.log"
  fi
  return $rc
}

export R summary GPU_ONLY_CASES DEFAULT_NOISE_PROBLEMS WARMED NOISED
export -f run_tests timed_suite part_warm part_tests part_engine part_redteam part_redteam_gpu part_isolation part_honest part_speedup part_optimize part_prdry part_suite part_ontop part_unseen part_offsets part_gpus part_noise part_kernels part_train
for part in "${@:-engine}"; do
  case "$part" in
    engine|tests|redteam|redteam_gpu|isolation|honest|speedup|optimize|prdry|suite|ontop|unseen|offsets|gpus|warm|noise|kernels|train) limited "$part" ;;
    *) echo "unknown part $part" >&2; status=2 ;;
  esac
done

# What comes back: summary.txt and one archive (the device returns at most 8 files).
for f in "$R"/pr/dry/comment.md "$R"/pr/dry/pr_body.md "$R"/pr/dry/publish.json; do
  [ -f "$f" ] && cp "$f" "$OUT/prdry_$(basename "$f")"
done
for f in "$R"/kpr/dry/pr_body.md "$R"/kpr/dry/publish.json; do
  [ -f "$f" ] && cp "$f" "$OUT/kprdry_$(basename "$f")"
done
rm -rf "$R"/kpr/dry/files  # the proposal's files: a vendored third-party kernel stays out of what comes back
for d in suite one_gpu all_gpus ontop; do
  [ -f "$R/$d/suite.md" ] && { echo "--- $d"; cat "$R/$d/suite.md"; python3 scripts/phase_table.py "$R/$d"; } >> "$summary"
done
[ -d "$R/unseen" ] && { echo "--- unseen"; python3 scripts/unseen_table.py "$R/unseen"; } >> "$summary"
find "$R" -name .gitignore -delete  # output folders ignore themselves for users; these results are kept
(cd "$OUT" && tar czf results.tgz r && rm -rf r)
cat "$summary"
exit $status
