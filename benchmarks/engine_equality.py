"""Equality check of the reduction engine (issue 21 item 1): every table, old code vs new code.

    python benchmarks/engine_equality.py --old-commit SHA [--models demo,minilm,gpt2,...]
        [--commands detect,detect_streaming,sinks,...] [--keep DIR [--reuse-old]] [--tol 1e-6]

Runs ``headlens detect`` (eager, and ``--attention streaming``), ``headlens sinks`` (the full
investigation, and ``--lengths``), ``headlens gqa`` and ``headlens projections`` on the demo,
MiniLM and tiny checkpoints of the family matrix (built once by the current code:
:func:`headlens.analyses.synthetic.families.build_family_checkpoint`, the same files for both
codes), once with the code of ``--old-commit`` (a git worktree imported through ``PYTHONPATH``
ahead of the editable install) and once with the working tree, each code in one process
(click's runner, so the imports are paid once).  Then every CSV the commands wrote is compared,
column by column: the table prints, per model and command, the number of tables and the largest
``|old - new|`` over every numeric cell (text columns must be equal, NaN in the same places).
A command that both codes refuse with the same exit code is reported as such; any other
difference in exit code, file set or shape is a failure.  Exit status 1 when a difference
exceeds ``--tol``.  Small settings (a few prompts and windows): a check of equality, not of speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("demo", "minilm", "gpt2", "llama", "qwen2", "mistral", "gemma2", "gpt_neox", "gpt_neo", "opt", "bert")
COMMON = ["--device", "cpu", "-q"]
EVAL = ["--n-windows", "4", "--window", "24", "--batch-size", "4"]
COMMANDS: dict[str, list[str]] = {
    "detect": [
        "detect",
        "--n-prompts",
        "6",
        "--seq-len",
        "8",
        "--window",
        "24",
        "--batch-size",
        "4",
        "--attention",
        "eager",
        "--out",
        "{out}/scores.csv",
    ],
    "detect_streaming": [
        "detect",
        "--n-prompts",
        "6",
        "--seq-len",
        "8",
        "--window",
        "24",
        "--batch-size",
        "4",
        "--attention",
        "streaming",
        "--query-block",
        "7",
        "--out",
        "{out}/scores.csv",
    ],
    "sinks": [
        "sinks",
        "--n-prompts",
        "6",
        "--window",
        "24",
        "--batch-size",
        "4",
        "--bos",
        "both",
        "--long-tokens",
        "32",
        "--n-long",
        "1",
        "--attn-windows",
        "8",
        "--out",
        "{out}",
    ],
    "sinks_lengths": ["sinks", "--lengths", "16,40", "--bos", "both", "--attention", "eager", "--out", "{out}"],
    "sinks_lengths_streaming": [
        "sinks",
        "--lengths",
        "16,40",
        "--bos",
        "on",
        "--attention",
        "streaming",
        "--query-block",
        "7",
        "--out",
        "{out}",
    ],
    "gqa": ["gqa", *EVAL, "--out", "{out}"],
    "projections": ["projections", *EVAL, "--n-prompts", "4", "--out", "{out}"],
}

_RUN_ALL = r"""
import json, sys
from click.testing import CliRunner
from headlens.reports.cli.main import cli
jobs = json.loads(open(sys.argv[1]).read())
runner = CliRunner()
for job in jobs:
    res = runner.invoke(cli, job["args"], catch_exceptions=True)
    line = (res.output.strip().splitlines() or [""])[-1]
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        line = f"{type(res.exception).__name__}: {res.exception}"
    print(json.dumps({"key": job["key"], "exit": res.exit_code, "last": line[:300]}), flush=True)
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


def _model_arg(name: str, work: Path) -> str:
    if name in ("demo", "minilm"):
        return name
    from headlens.analyses.synthetic.families import build_family_checkpoint

    folder = work / "checkpoints" / name
    if not folder.exists():
        build_family_checkpoint(folder, name)
    return str(folder)


def _run(jobs: list[dict], work: Path, label: str, pythonpath: Path | None) -> dict[str, dict]:
    spec = work / f"jobs_{label}.json"
    spec.write_text(json.dumps(jobs))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    res = subprocess.run([sys.executable, "-c", _RUN_ALL, str(spec)], env=env, capture_output=True, text=True, cwd=str(work))
    out = {}
    for line in res.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            out[row["key"]] = row
    if res.returncode != 0:
        print(f"{label}: runner exited {res.returncode}: {(res.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
    return out


def _compare(old: Path, new: Path) -> tuple[int, float, str]:
    """``(tables, max |old - new|, problem)``; ``problem`` is empty when the tables match in shape and text."""
    a_files = sorted(p.relative_to(old) for p in old.rglob("*.csv"))
    b_files = sorted(p.relative_to(new) for p in new.rglob("*.csv"))
    if a_files != b_files:
        return len(a_files), float("nan"), f"CSV files differ: {sorted(set(map(str, a_files)) ^ set(map(str, b_files)))}"
    worst = 0.0
    for rel in a_files:
        x, y = pd.read_csv(old / rel), pd.read_csv(new / rel)
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            return len(a_files), float("nan"), f"{rel}: shape or columns differ"
        for c in x.columns:
            if pd.api.types.is_numeric_dtype(x[c]) and pd.api.types.is_numeric_dtype(y[c]):
                u, v = x[c].to_numpy(float), y[c].to_numpy(float)
                if not np.array_equal(np.isnan(u), np.isnan(v)):
                    return len(a_files), float("nan"), f"{rel}:{c}: NaN positions differ"
                diff = np.abs(u - v)[~np.isnan(u)]
                worst = max(worst, float(diff.max()) if len(diff) else 0.0)
            elif not x[c].astype(str).equals(y[c].astype(str)):
                return len(a_files), float("nan"), f"{rel}:{c}: text differs"
    return len(a_files), worst, ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-commit", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--keep", type=Path, default=None, help="keep the outputs (DIR/old, DIR/new) and the checkpoints here")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--reuse-old", action="store_true", help="with --keep: reuse the old code's outputs of an earlier run")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="engine_equality_"))
    work.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    commands = [c for c in args.commands.split(",") if c]
    bad = [c for c in commands if c not in COMMANDS]
    if bad:
        sys.exit(f"unknown command {', '.join(bad)}: choose from {', '.join(COMMANDS)}")
    try:
        results = {}
        saved = work / "old_results.json"
        runs: list[tuple[str, Path | None]] = [("new", None)]
        if args.reuse_old and saved.is_file() and json.loads(saved.read_text()).get("commit") == args.old_commit:
            results["old"] = json.loads(saved.read_text())["results"]
        else:
            runs.insert(0, ("old", _old_tree(args.old_commit, work)))
        for label, path in runs:
            jobs = []
            for m in models:
                model = _model_arg(m, work)
                for c in commands:
                    out = work / label / m / c
                    if out.exists():
                        shutil.rmtree(out)
                    out.mkdir(parents=True)
                    argv = [a.replace("{out}", str(out)) for a in COMMANDS[c]]
                    if argv[-1] == str(out):
                        shutil.rmtree(out)  # the commands that write a folder want it absent or empty
                    jobs.append({"key": f"{m}/{c}", "args": [argv[0], "-m", model, *COMMON, *argv[1:]]})
            results[label] = _run(jobs, work, label, path)
            if label == "old":
                saved.write_text(json.dumps({"commit": args.old_commit, "results": results["old"]}))
        failed = False
        print(f"{'model':<10} {'command':<24} {'exit':>9} {'tables':>6} {'max |old-new|':>14}  note")
        for m in models:
            for c in commands:
                key = f"{m}/{c}"
                o, n = results["old"].get(key, {"exit": None}), results["new"].get(key, {"exit": None})
                exits = f"{o['exit']}/{n['exit']}"
                if o["exit"] != n["exit"]:
                    failed = True
                    print(
                        f"{m:<10} {c:<24} {exits:>9} {'':>6} {'':>14}  FAIL: exit codes differ"
                        f" (old: {o.get('last', '')!r}; new: {n.get('last', '')!r})"
                    )
                    continue
                if o["exit"] != 0:
                    print(f"{m:<10} {c:<24} {exits:>9} {'':>6} {'':>14}  refused by both: {n.get('last', '')[:100]}")
                    continue
                tables, worst, problem = _compare(work / "old" / m / c, work / "new" / m / c)
                bad_diff = bool(problem) or not worst <= args.tol
                failed |= bad_diff
                note = f"FAIL: {problem}" if problem else ("FAIL: above tolerance" if bad_diff else "")
                print(f"{m:<10} {c:<24} {exits:>9} {tables:>6} {worst:>14.2e}  {note}")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(work / "old-tree")], capture_output=True)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
