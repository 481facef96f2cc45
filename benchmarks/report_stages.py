"""Benchmark: the full report's stage times (issue 23 item 4), before vs after.

    python benchmarks/report_stages.py [--layers 12] [--heads 12] [--d-model 768] [--n-ctx 1024]
        [--stages census,sinks,...] [--old-commit SHA] [--rounds 1] [--threads N] [--keep DIR]

Builds a GPT-2-shaped checkpoint with random weights (``headlens tiny-model``; default the
GPT-2-small shape) and runs ``headlens report`` one stage at a time (every other stage
skipped), each in its own process, and prints each stage's time (the stage marker's
``seconds``: the model load is not counted), the total and the target: the whole report
<= 900 s on 2 CPUs for the GPT-2-small shape.

``--old-commit SHA`` also runs the code of that commit (a git worktree, imported through
``PYTHONPATH`` ahead of the editable install), interleaved with the current code stage by
stage and round by round, so both see the same machine load; the table prints old, new and
new/old per stage, and the 1-minute load average at the start and end.  On a reduced shape
(``--layers 4``, say) the times scale roughly with the layers; the target applies to the full
shape only.  ``--n-windows N`` evaluates ablation, pruning and design on N windows instead of the report's
16 (both codes alike; a reduced benchmark for a busy machine).  ``--keep DIR`` keeps the report folders (``DIR/old``, ``DIR/new``) so their
tables can be compared (``--compare``: every CSV of each stage, old vs new, to 1e-6).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 900.0
STAGES = ("census", "sinks", "ablation_zero", "ablation_mean", "pruning", "examples", "design")

_RUN_ONE = r"""
import json, os, sys, time
from headlens.reports.runs.report.build import build_report
from headlens.reports.runs.report.settings import ReportSettings
from headlens.reports.runs.report.stages import STAGES
model, out, stage = sys.argv[1], sys.argv[2], sys.argv[3]
if os.environ.get("REPORT_STAGES_WINDOWS"):  # --n-windows: fewer evaluation windows (a reduced benchmark, old and new alike)
    _eval = ReportSettings.eval_data
    ReportSettings.eval_data = lambda self, n_ctx: {**_eval(self, n_ctx), "n_windows": int(os.environ["REPORT_STAGES_WINDOWS"])}
r = build_report(model, out_dir=out, skip=[s for s in STAGES if s != stage], redo=[stage], device="cpu")
st = {s.name: s for s in r.stages}[stage]
print(json.dumps({"stage": stage, "status": st.status, "seconds": st.seconds, "error": st.error}))
"""


def _old_tree(commit: str, work: Path) -> Path:
    """A folder whose ``headlens`` package is ``commit``'s code (for ``PYTHONPATH``)."""
    tree = work / "old-tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True, capture_output=True)
    pkg = work / "old-pkg" / "headlens"
    shutil.copytree(tree / "src" / "headlens", pkg)
    for layer in ("probes", "analyses", "reports"):
        (pkg / layer).symlink_to(tree / layer)
    return pkg.parent


def _run(model: Path, out: Path, stage: str, pythonpath: Path | None, threads: int | None, n_windows: int | None = None) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if n_windows:
        env["REPORT_STAGES_WINDOWS"] = str(n_windows)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    res = subprocess.run([sys.executable, "-c", _RUN_ONE, str(model), str(out), stage], env=env, capture_output=True, text=True)
    line = [x for x in res.stdout.splitlines() if x.startswith("{")]
    if res.returncode != 0 or not line:
        return {"stage": stage, "status": "crashed", "seconds": None, "error": (res.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(line[-1])


def _compare(old: Path, new: Path, stage: str, tol: float = 1e-6) -> str:
    import numpy as np
    import pandas as pd

    worst, n = 0.0, 0
    for a in sorted((old / stage).rglob("*.csv")):
        b = new / stage / a.relative_to(old / stage)
        if not b.is_file():
            return f"{a.name} missing in new"
        x, y = pd.read_csv(a), pd.read_csv(b)
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            return f"{a.name}: shape or columns differ"
        for c in x.columns:
            if pd.api.types.is_numeric_dtype(x[c]) and pd.api.types.is_numeric_dtype(y[c]):
                u, v = x[c].to_numpy(float), y[c].to_numpy(float)
                if not np.array_equal(np.isnan(u), np.isnan(v)):
                    return f"{a.name}:{c}: NaN positions differ"
                diff = np.abs(u - v)[~np.isnan(u)]
                worst = max(worst, float(diff.max()) if len(diff) else 0.0)
            elif not x[c].astype(str).equals(y[c].astype(str)):
                return f"{a.name}:{c}: text differs"
        n += 1
    return f"{n} tables, max |old - new| {worst:.2e}" + ("" if worst <= tol else f" > {tol:g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--old-commit", default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-windows", type=int, default=None, help="evaluation windows of ablation, pruning and design (the report: 16)")
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--compare", action="store_true")
    args = ap.parse_args()
    stages = [s for s in args.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        sys.exit(f"unknown stage {bad[0]}: choose from {', '.join(STAGES)}")
    work = Path(tempfile.mkdtemp(prefix="report-stages-"))
    keep = args.keep or work
    model = work / "model"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "headlens",
            "tiny-model",
            "--layers",
            str(args.layers),
            "--heads",
            str(args.heads),
            "--d-model",
            str(args.d_model),
            "--n-ctx",
            str(args.n_ctx),
            "--out",
            str(model),
        ],
        check=True,
        capture_output=True,
    )
    variants: list[tuple[str, Path | None]] = [("new", None)]
    if args.old_commit:
        variants = [("old", _old_tree(args.old_commit, work)), ("new", None)]
    load0 = os.getloadavg()[0]
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for stage in stages:
            for name, path in variants if r % 2 == 0 else variants[::-1]:
                t0 = time.perf_counter()
                res = _run(model, keep / name, stage, path, args.threads, args.n_windows)
                print(
                    f"round {r + 1} {stage:14s} {name}: {res['status']} {res['seconds']} s (process {time.perf_counter() - t0:.0f} s, load "
                    f"{os.getloadavg()[0]:.1f})" + (f" {res['error']}" if res.get("error") else ""),
                    flush=True,
                )
                if res["seconds"] is not None:
                    times.setdefault((stage, name), []).append(float(res["seconds"]))
    print(
        f"\n{'--n-windows ' + str(args.n_windows) + ' (the report: 16); ' if args.n_windows else ''}shape {args.layers} layers x "
        f"{args.heads} heads, d_model {args.d_model}, n_ctx {args.n_ctx}; load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at "
        f"end; median of {args.rounds} round(s)"
    )
    names = [n for n, _ in variants]
    print(f"{'stage':14s} " + " ".join(f"{n:>9s}" for n in names) + ("   new/old  tables" if len(names) == 2 else ""))
    totals = dict.fromkeys(names, 0.0)
    for stage in stages:
        med = {}
        for n in names:
            v = sorted(times.get((stage, n), []))
            med[n] = v[len(v) // 2] if v else float("nan")
            totals[n] += med[n]
        line = f"{stage:14s} " + " ".join(f"{med[n]:9.1f}" for n in names)
        if len(names) == 2:
            line += f"   {med['new'] / med['old']:7.3f}" if med["old"] else ""
            if args.compare:
                line += "  " + _compare(keep / "old", keep / "new", stage)
        print(line)
    print(
        f"{'total':14s} "
        + " ".join(f"{totals[n]:9.1f}" for n in names)
        + (f"   {totals['new'] / totals['old']:7.3f}" if len(names) == 2 and totals["old"] else "")
    )
    full = (args.layers, args.heads, args.d_model, args.n_ctx) == (12, 12, 768, 1024) and set(stages) == set(STAGES) and not args.n_windows
    print(
        f"target: the whole report <= {TARGET_S:.0f} s for the GPT-2-small shape on 2 CPUs"
        + (
            f": new {totals['new']:.0f} s, {'met' if totals['new'] <= TARGET_S else 'NOT met'}"
            if full
            else " (this run is not that shape or not every stage: no verdict)"
        )
    )
    if args.old_commit:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "old-tree")], capture_output=True)


if __name__ == "__main__":
    main()
