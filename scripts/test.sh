#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite offline. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
bash scripts/bootstrap.sh >/dev/null
# Two worker processes (pytest-xdist), each with one torch thread: the 2-core machines then run two
# tests at once instead of one test on two threads (much of the suite waits on subprocesses, Ray
# and Chromium).  Tests marked with one xdist_group (Ray's) run on the same worker, one after another.
# HEADLENS_TEST_WORKERS=0 runs everything in this process.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
.venv/bin/python -m pytest -q -n "${HEADLENS_TEST_WORKERS:-2}" --dist loadgroup --durations=15 "$@"
