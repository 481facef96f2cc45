#!/usr/bin/env bash
# Lint, formatting and types over the whole tree: `ruff check`, `ruff format --check` and pyright
# (basic), as tests/meta/test_lint.py's `lint`-marked checks define them (one place for the rules and
# PENDING).  Needs the test extra (scripts/bootstrap.sh test).  Extra arguments go to pytest.
# .ci/run runs this beside the test suite; exit status: pytest's (0 when all three find nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/bin/python -m pytest -q -p no:cacheprovider -m lint tests/meta/test_lint.py "$@"
