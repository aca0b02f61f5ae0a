#!/usr/bin/env bash
# The PR flow end to end in dry-run mode on an example repository: a fresh git repo with a model
# and a .kernelopt.yml, a commit that changes the model, a pull_request event for it, and
# `kernelopt bot --dry-run` with the real pipeline. Everything it would publish lands in OUT.
# Usage: bash scripts/example_pr_dry_run.sh OUT [DEVICE]   (DEVICE: cpu or cuda; default auto)
# EXAMPLE (default rmsnorm) picks the model from examples/, DTYPE (default fp32) its precision,
# WALL_SECONDS (default 90) the search's wall budget. EXAMPLE=liger_<op> or helion_<name> picks a
# kernel target from benchmarks/kernels/ instead (liger's ops vendored beside it): the PR changes
# the kernel's own file and the follow-up PR changes its source.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
device="${2:-}"
example="${EXAMPLE:-rmsnorm}"
repo="$(mktemp -d)/example-models"
case "$example" in
  liger_*|helion_*)
    folder=kernels kind="${example%%_*}"
    mkdir -p "$repo/kernels"
    cp "$here/benchmarks/kernels/$example.py" "$repo/kernels/$example.py"
    if [ "$kind" = liger ]; then
      kind=triton changed="kernels/$(grep -o 'liger_[a-z_]*_ops' "$here/benchmarks/kernels/$example.py" | head -1).py"
      python3 "$here/scripts/vendor_liger.py" "$repo/kernels" > /dev/null
    else
      changed="kernels/$example.py"
    fi
    entry="kernels/$example.py" ;;
  *)
    folder=models kind=module entry="models/$example.py" changed="models/$example.py"
    mkdir -p "$repo/models"
    cp "$here/examples/$example.py" "$repo/models/$example.py" ;;
esac
cat > "$repo/.kernelopt.yml" <<YAML
targets:
  - name: $example
    kind: $kind
    entry: $entry
    dtypes: [${DTYPE:-fp32}]
${device:+    device: $device}
    paths: ["$folder/**"]
budget:
  candidates: 1
  kernels: 1
  candidates_per_kernel: 1
  compile_options: false
  rounds: 5
  wall_seconds: ${WALL_SECONDS:-90}
gamma: 1.03
publish:
  draft: true
  labels: [performance]
YAML
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.invalid GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.invalid
git -C "$repo" init -q -b main && git -C "$repo" add -A && git -C "$repo" commit -q -m "initial model"
base="$(git -C "$repo" rev-parse HEAD)"
printf '\n# Reviewed: the shapes stay as they are.\n' >> "$repo/$changed"
git -C "$repo" commit -q -am "$example: a change to $changed"
head="$(git -C "$repo" rev-parse HEAD)"
python3 - "$here/tests/github/fixtures/events/pull_request.json" "$out/event.json" "$base" "$head" <<'PY'
import json, sys
event = json.load(open(sys.argv[1]))
event["pull_request"]["base"]["sha"], event["pull_request"]["head"]["sha"] = sys.argv[3], sys.argv[4]
json.dump(event, open(sys.argv[2], "w"), indent=2)
PY
export GITHUB_OUTPUT="$out/github_output.txt" GITHUB_STEP_SUMMARY="$out/step_summary.md"
: > "$GITHUB_OUTPUT"; : > "$GITHUB_STEP_SUMMARY"
cd "$repo"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" KERNELOPT_DB="$out/store.db" \
  python3 -m kernelopt_bot.cli bot --event-name pull_request --event-path "$out/event.json" \
  --config .kernelopt.yml --repo-root . --dry-run --out "$out/dry"
echo "--- outputs"; cat "$GITHUB_OUTPUT"
echo "--- files"; (cd "$out/dry" && find . -type f | sort)
