#!/usr/bin/env bash
# The main job, offline: set up, then a head census and a quick report of the demo model that
# ships with headlens (a small GPT-2 whose heads it learned; see analyses/demo/model/MODEL_CARD.md).
# Everything lands in demo-out/ (replaced on each run).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
bash scripts/bootstrap.sh runtime
H=.venv/bin/headlens
OUT=demo-out
start=$SECONDS
$H verify --model demo
$H capture --model demo --text "Apple raised its price target" --out $OUT/capture --overwrite
$H classify --model demo --out $OUT/census --overwrite
# ablation and pruning measure the loss on text from the demo's own domain: its held-out split
# (documents it never trained on), not the built-in English text it never learned
$H demo heldout --out $OUT/heldout.txt --overwrite
$H report --model demo --quick --text-file $OUT/heldout.txt --out $OUT/report --overwrite
echo "demo: done in $((SECONDS - start)) s after set-up; see $OUT/census/summary.md and $OUT/report/report.html"
