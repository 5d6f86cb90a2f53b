#!/usr/bin/env bash
# bench/gpu_smoke.sh [--dry-run | --prepare]: the prepared device check of issue 42, for ONE GPU with
# no network, in at most 9 minutes (the step limits below sum to 8.5). It runs:
#   1. preflight       CUDA visible, factlab importable (wheels of bench/gpu_smoke_wheels.txt installed
#                      offline from bench/.gpu_smoke/wheels when missing)
#   2. grpo-step       one GRPO step of 01_corver on the tiny model in bf16 with LoRA and gradient
#                      checkpointing, through `factlab train` (accelerate launch, 1 process)
#   3. judge           a transformers judge answering on CUDA
#   4. master-weights  1e-6 AdamW steps on CUDA: bf16 storage moves 0 of 1,000 weights, fp32 masters all
#   5. plan-vs-peak    `factlab plan`'s trainer terms for 01's policy (Llama-3.1-8B shape, random
#                      weights, LoRA r=128, the planned micro-batch) vs torch.cuda.max_memory_allocated
# --dry-run: the same steps at CPU sizes (factlab train --dry-run prints the launch; the checks run
# on CPU); the CPU suite runs it (tests/test_gpu_smoke.py). --prepare (on a machine with network):
# build the tiny model into bench/.gpu_smoke/cache and download the wheels into bench/.gpu_smoke/wheels,
# the two folders to carry to the device. Logs and summary.json go to $OUT (default: a temp folder).
set -uo pipefail
MODE=run
case "${1:-}" in
  --dry-run) MODE=dry ;;
  --prepare) MODE=prepare ;;
  "") ;;
  *) echo "usage: bench/gpu_smoke.sh [--dry-run | --prepare]" >&2; exit 2 ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
SMOKE="$ROOT/bench/.gpu_smoke"
if [[ $MODE != dry ]]; then export FACTLAB_CACHE=${FACTLAB_CACHE:-$SMOKE/cache}; fi

if [[ $MODE == prepare ]]; then
  mkdir -p "$SMOKE/wheels"
  "$PY" -c "from factlab import models; print(models.resolve_model(models.TINY_MODEL))" || exit 1
  rm -rf "$FACTLAB_CACHE"/models/smollm2-135m-instruct-hf*  # the tiny model's source: not needed once built
  grep -v '^\s*#' bench/gpu_smoke_wheels.txt | grep . | \
    xargs "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$SMOKE/wheels" || exit 1
  du -sh "$SMOKE/wheels" "$SMOKE/cache"
  exit 0
fi
if [[ $MODE == run ]]; then
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
fi
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
FAILED=0
SUMMARY=()

step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, log to $OUT/NAME.log, one status line
  local name=$1 limit=$(($2 * SCALE))
  shift 2
  local t0=$SECONDS rc=0
  echo "== $name (limit ${limit} s)"
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  local s=$((SECONDS - t0)) result
  result=$(grep '^result: ' "$OUT/$name.log" | tail -1 | cut -c9-)
  if [[ $rc == 0 ]]; then
    echo "ok $name ${s}s ${result}"
  else
    echo "FAILED $name (exit $rc after ${s}s); the end of $OUT/$name.log:"
    tail -25 "$OUT/$name.log"
    FAILED=1
  fi
  SUMMARY+=("{\"step\": \"$name\", \"exit\": $rc, \"seconds\": $s, \"result\": ${result:-null}}")
}

DEVICE=cuda
DRYFLAG=""
SCALE=1  # the limits are the GPU run's; a dry run on a shared CPU machine gets 4x (imports dominate there)
if [[ $MODE == dry ]]; then DEVICE=cpu; DRYFLAG=--dry-run; SCALE=4; fi
export MODE OUT PY SMOKE DRYFLAG

preflight() {
  if [[ $MODE == run ]] && ! "$PY" -c "import trl, peft, pydantic, factlab" 2>/dev/null && [[ -d $SMOKE/wheels ]]; then
    "$PY" -m pip install -q --no-index --find-links "$SMOKE/wheels" $(grep -v '^\s*#' bench/gpu_smoke_wheels.txt | grep .)
  fi
  "$PY" - "$MODE" <<'EOF'
import json, sys
import torch, trl, peft, factlab
cuda = torch.cuda.is_available()
info = {"torch": torch.__version__, "trl": trl.__version__, "peft": peft.__version__, "cuda": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None}
print("result: " + json.dumps(info))
sys.exit(0 if cuda or sys.argv[1] == "dry" else 1)
EOF
}

factlab() { "$PY" -c 'import sys; from factlab.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }

grpo_step() {
  "$PY" bench/gpu_checks.py params "$OUT/01_tiny.yaml" || return 1
  factlab train 01_corver --params "$OUT/01_tiny.yaml" --accelerate-config ddp --num-processes 1 \
    --run-dir "$OUT/train" $DRYFLAG || return 1
  if [[ $MODE == run ]]; then
    "$PY" - "$OUT/train" <<'EOF'
import json, sys
from pathlib import Path
runs = json.loads((Path(sys.argv[1]) / "launch.json").read_text())["runs"]
steps = {name: r["steps"] for name, r in runs.items()}
print("result: " + json.dumps({"runs": steps}))
sys.exit(0 if steps and all(s == 1 for s in steps.values()) else 1)
EOF
  fi
}

export -f preflight factlab grpo_step
step preflight 60 bash -c preflight
step grpo-step 240 bash -c grpo_step
step judge 45 "$PY" bench/gpu_checks.py judge --device "$DEVICE"
step master-weights 45 "$PY" bench/gpu_checks.py master-weights --device "$DEVICE"
step plan-vs-peak 120 "$PY" bench/gpu_checks.py plan-vs-peak $DRYFLAG

(IFS=,; echo "{\"mode\": \"$MODE\", \"failed\": $FAILED, \"steps\": [${SUMMARY[*]}]}") > "$OUT/summary.json"
echo "summary: $OUT/summary.json"
exit $FAILED
