#!/usr/bin/env bash
# Set up (if needed) and run the test suite offline. Extra arguments go to pytest.
# Set-up: `scripts/bootstrap.sh test` (the package with its test extra); HEADLENS_SETUP=0 skips it
# (.ci/run sets up once, then runs this beside scripts/lint.sh and the stress tests).
# A plain run leaves out the `lint` and `stress` markers (pyproject.toml's addopts); `-m lint` or
# `-m stress` runs those instead.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "${HEADLENS_SETUP:-1}" != 0 ]; then
  bash scripts/bootstrap.sh test >/dev/null
fi
# Two worker processes (pytest-xdist), each with one torch thread: the 2-core machines then run two
# tests at once instead of one test on two threads (much of the suite waits on subprocesses, Ray
# and Chromium).  `--dist loadfile`: every test module runs on one worker, so a module-scoped
# fixture (a checkpoint, a local Ray, a study run shared by a module's tests) is built once, not
# once per worker.  (`--dist loadgroup` did not group: pytest-xdist 3.8 marks a group by setting
# item._nodeid, which pytest 9 no longer reads, so the xdist_group marks were ignored and every
# test went to whichever worker was free; the suite uses no xdist_group: tests of different modules,
# the Ray tests' local clusters too, may run at the same time on the two workers.)
# `--no-loadscope-reorder`: the modules go to the workers in tests/conftest.py's order (the longest
# first), not xdist's (most tests first, which left a one-test module of a minute for the end).
# HEADLENS_TEST_WORKERS=0 runs everything in this process.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
exec .venv/bin/python -m pytest -q -n "${HEADLENS_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder --durations=15 "$@"
