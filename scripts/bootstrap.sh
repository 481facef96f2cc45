#!/usr/bin/env bash
# Set up headlens on a fresh machine: a virtual environment in .venv with everything installed.
# Safe to re-run (pip skips what is already there). Needs Python 3.10+ and PyPI; downloads no model.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first, pinned: on these machines pip takes a CPU build from local disk; elsewhere it
# falls back to PyPI's build for the platform (CUDA on Linux GPU machines).
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" 2>/dev/null \
  || .venv/bin/python -m pip install -q --disable-pip-version-check "torch>=2.2"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
.venv/bin/headlens --version
