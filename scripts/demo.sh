#!/usr/bin/env bash
# The main job, offline: set up, build local checkpoints, capture + verify, a head census and a report.
# Everything lands in demo-out/ (replaced on each run).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
bash scripts/bootstrap.sh
H=.venv/bin/headlens
OUT=demo-out
$H tiny-model --out $OUT/tiny --overwrite
$H capture --model $OUT/tiny --text "Apple raised its price target" --out $OUT/capture --overwrite
$H verify --model $OUT/tiny
$H tiny-model --planted --out $OUT/planted --overwrite
$H classify --model $OUT/planted --n-prompts 40 --out $OUT/census --overwrite
$H report --model $OUT/planted --quick --out $OUT/report --overwrite
echo "demo: done; see $OUT/census/summary.md and $OUT/report/report.html"
