#!/usr/bin/env bash
# The first minutes of a new user (issue 32), every time the README states:
#
#   1. set-up in a fresh virtual environment, per purpose: `scripts/bootstrap.sh runtime` (the main
#      job's) and `scripts/bootstrap.sh test` (the test suite's), each from an empty .venv in a fresh
#      copy of the committed tree (needs the package index, as a new user's set-up does);
#   2. the main job (`scripts/demo.sh`'s `headlens demo run`) cold (first run after set-up; with root,
#      after dropping the page cache) and warm (run again);
#   3. start-up: `headlens --version`, `headlens --help`, `headlens detect --help`, a usage error, and
#      `import headlens` beside the import of torch + pandas + matplotlib (its bound: that + 0.5 s).
#
#   bash benchmarks/first_minutes.sh              # everything (set-up takes minutes)
#   bash benchmarks/first_minutes.sh --no-setup   # 2 and 3 only, with this checkout's .venv
#
# Start-up figures are the best of REPEATS runs (default 5).  Run it on a quiet machine: on a loaded
# one every figure grows (the script prints the load average beside its figures).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SETUP=1
[ "${1:-}" = "--no-setup" ] && SETUP=0
REPEATS=${REPEATS:-5}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

seconds() { # seconds CMD...: wall time of one run (output discarded; a failing run aborts)
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || [ "${ALLOW_FAIL:-0}" = 1 ] || { echo "first_minutes: failed: $*" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
best() { # best CMD...: the fastest of REPEATS runs, in seconds with 2 decimals
  local b=999999 t
  for _ in $(seq "$REPEATS"); do
    t=$(seconds "$@")
    b=$(echo "if ($t < $b) $t else $b" | bc -l)
  done
  printf '%.2f' "$b"
}
row() { printf '%-58s %10s  %s\n' "$1" "$2" "${3:-}"; }
drop_caches() { sync; if [ -w /proc/sys/vm/drop_caches ]; then echo 3 >/proc/sys/vm/drop_caches && echo "page cache dropped"; else echo "page cache not dropped (not root)"; fi; }

echo "first_minutes: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(uname -sr), python $(python3 -V 2>&1 | cut -d' ' -f2)"
row "what" "seconds" "note"

if [ "$SETUP" = 1 ]; then
  for purpose in runtime test; do
    copy=$WORK/$purpose
    mkdir -p "$copy" && git -C "$ROOT" archive HEAD | tar -x -C "$copy"
    t=$(seconds bash "$copy/scripts/bootstrap.sh" "$purpose")
    row "set-up, fresh venv: bootstrap.sh $purpose" "$(printf '%.0f' "$t")" "venv $(du -sh "$copy/.venv" | cut -f1)"
    t=$(seconds bash "$copy/scripts/bootstrap.sh" "$purpose")
    row "set-up again (nothing to do): bootstrap.sh $purpose" "$(printf '%.1f' "$t")"
  done
  VENV=$WORK/runtime/.venv
else
  VENV=$ROOT/.venv
fi
H=$VENV/bin/headlens
PY=$VENV/bin/python

cd "$WORK"
note=$( [ "${DROP_CACHES:-1}" = 1 ] && drop_caches || echo "page cache kept (DROP_CACHES=0)")
t=$(seconds "$H" demo run --out "$WORK/demo-out")
row "main job cold: headlens demo run" "$(printf '%.1f' "$t")" "$note"
t=$(seconds "$H" demo run --out "$WORK/demo-out")
row "main job warm: headlens demo run (again)" "$(printf '%.1f' "$t")"
t=$(best "$H" demo heldout --out "$WORK/heldout.txt" --overwrite)
row "headlens demo heldout" "$t" "best of $REPEATS"

row "python -c pass (the interpreter alone)" "$(best "$PY" -c pass)" "best of $REPEATS"
row "headlens --version" "$(best "$H" --version)" "best of $REPEATS"
row "headlens --help" "$(best "$H" --help)" "best of $REPEATS"
row "headlens detect --help" "$(best "$H" detect --help)" "best of $REPEATS"
row "headlens detect --bogus (usage error, exit 2)" "$(ALLOW_FAIL=1 best "$H" detect --bogus)" "best of $REPEATS"
row "headlens classify --out x (missing --model, exit 2)" "$(ALLOW_FAIL=1 best "$H" classify --out x)" "best of $REPEATS"
base=$(best "$PY" -c "import torch, pandas, matplotlib.pyplot")
full=$(best "$PY" -c "import headlens")
row "python -c 'import torch, pandas, matplotlib.pyplot'" "$base" "best of $REPEATS"
row "python -c 'import headlens'" "$full" "$(printf 'that + %.2f s (bound: + 0.5 s)' "$(echo "$full - $base" | bc -l)")"
on_top=$("$PY" -c "
import time
import torch, pandas, matplotlib.pyplot
t = time.perf_counter()
import headlens
print(f'{time.perf_counter() - t:.2f}')")
row "import headlens after torch, pandas, matplotlib (one process)" "$on_top" "the part over the three (bound: 0.5 s)"
echo "first_minutes: load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
