#!/usr/bin/env bash
# The peers' own venv for benchmarks/circuits_vs_peers.py: auto-circuit 1.0.1 with the TransformerLens 2.x it
# imports (transformer_lens.past_key_value_caching, gone from TransformerLens 4.x, which headlens needs).
#
#   scripts/peers_venv.sh [VENV]        # default .venv-peers at the repository root (ignored by git)
#   .venv/bin/python benchmarks/circuits_vs_peers.py --threads 2 --peers-python .venv-peers/bin/python
#
# torch goes in first, the CPU build pinned to the one headlens' venv has, and stays pinned (a constraint)
# while auto-circuit resolves: left alone, pip would pull a CUDA build of several GB.  auto-circuit's
# metadata asks for transformer-lens >= 1.13.0; 2.x is the last line with past_key_value_caching and
# HookedTransformer as auto-circuit uses it (2.18.0 resolves); transformers < 5 (TransformerLens 2.x predates
# 5's API); TransformerLens 2.x pins numpy < 2, and pyarrow >= 21 (which datasets >= 4 asks for) needs numpy 2.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${1:-$here/.venv-peers}"
python="${PYTHON:-python3.11}"
torch_version="${TORCH_VERSION:-2.13.0}"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet)
"${pip[@]}" "torch==$torch_version"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
"$venv/bin/python" -c "import torch; print(f'torch=={torch.__version__}')" > "$constraints"
"${pip[@]}" -c "$constraints" "auto-circuit==1.0.1" "transformer-lens>=2,<3" "transformers<5" "pyarrow<21" "datasets<4" safetensors
"$venv/bin/python" -m pip check
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import auto_circuit.prune_algos.ACDC  # noqa: F401 -- the import that fails under TransformerLens 4.x
import torch
assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__
print("peers venv:", ", ".join(f"{d} {md.version(d)}" for d in ("auto-circuit", "transformer-lens", "transformers", "torch")))
PY
