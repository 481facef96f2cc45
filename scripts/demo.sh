#!/usr/bin/env bash
# The main job, offline: set up (the runtime dependencies only), then a head census and a quick report
# of the demo model that ships with headlens (a small GPT-2 whose heads it learned; see
# analyses/demo/model/MODEL_CARD.md). Everything lands in demo-out/ (replaced on each run).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
bash scripts/bootstrap.sh runtime
# One process for the five steps (the library is imported once): verify, capture one text, the head
# census (classify), the held-out text (demo heldout), a quick report whose ablation and pruning
# measure the loss on that held-out text. `headlens demo run -h` lists them; each step prints the
# `headlens ...` command that does it alone.
.venv/bin/headlens demo run --out demo-out
