#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite offline. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
bash scripts/bootstrap.sh >/dev/null
.venv/bin/python -m pytest -q "$@"
