"""Circuit discovery on models whose circuits are known by construction: headlens' methods beside the peers,
same models, same clean/corrupt pairs, same ground truth, one table.

Cases:
* each tracr program compiled by ``headlens tracr-model`` (GPT-2 checkpoint, ground_truth.json); pairs from the
  program's input space (:func:`headlens.analyses.tracr.scoring.tracr_pairs`, seed 0);
* ``planted``: the planted induction circuit (:mod:`headlens.analyses.synthetic.planted_circuit`, d_model 192)
  on the built-in induction task (T=12, seed 0); its three true edges are all input-dependent.

Per method: edge ROC AUC (every edge of the graph scored, ties half) against every true edge (``auc_all``: the
compiled edges and, on frac_prevs, the checkpoint's numerical readout ``embed -> logits``, ``origin: "readout"``)
and against the input-dependent ones (``auc_input``: true edges labelled ``constant`` in ground_truth.json
-- BOS, ``one``, position directions, values computed from them, inputs a TRUE selector ignores -- left out of
both classes; no clean/corrupt patch can see them).  ``auc_input`` is the score under corrupted-input
patching.  ``auc_acdc`` (reverse and frac_prevs = ACDC's proportion): against ACDC's reference circuit (and the
checkpoint's readout edge, which ACDC's model, read through a bare projection, does not have), every other edge
false, the classes of ACDC's own table (0.600 proportion / 0.200 reverse under resample ablation, 1.000 both under
zero ablation): that circuit is the output of an ACDC run under zero ablation, and for reverse it
leaves out three compiled edges (docs/tracr.md), so ``auc_all`` is not ACDC's figure.  The interval is a 95% percentile
bootstrap over pairs (200 resamples) of ``auc_input``; ``wall s`` is the scoring alone on ``--threads``
threads (model loading and pair building left out): for headlens the median of ``--repeats`` runs (default 3;
the range is in the note), for the peers one run (ACDC's sweep is hundreds of forwards, TransformerLens' EAP
one pass per pair).

Rows: headlens ``exact`` / ``eap`` / ``eap-ig`` (:func:`headlens.analyses.circuits.run.score_edges`);
TransformerLens 4.3's own EAP (``attribution_patch``, edge granularity, pair by pair, its per-position scores
summed into the same edges); auto-circuit 1.0.1's ACDC (its ROC thresholds) and EAP, run by
``benchmarks/peers_runner.py`` inside the venv of ``scripts/peers_venv.sh`` (``--peers-python``) on a
HookedTransformer built from the same checkpoint, whose logits must equal headlens' to 1e-4 first.
A peer that cannot run a case has a row saying why.

    scripts/peers_venv.sh    # once: .venv-peers with auto-circuit 1.0.1, transformer-lens 2.x, the CPU torch
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/circuits_vs_peers.py --threads 2 --peers-python .venv-peers/bin/python
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import parser, setup_threads, write_json

PROGRAMS = ("frac_prevs", "hist", "reverse", "shift", "detect_pattern", "shuffle_dyck")
#: headlens' logits and the peers' HookedTransformer's must agree to this before any peer scores.
LOGIT_TOLERANCE = 1e-4
N_BOOTSTRAP = 200
#: The issue's targets.
AUC_TARGET, LOW_TARGET, SPEED_TARGET = 0.95, 0.90, 100.0
RUNNER = Path(__file__).with_name("peers_runner.py")


@dataclass
class Case:
    name: str
    folder: Path
    model: Any
    task: Any
    all_edges: set[tuple[str, str, str]]
    input_edges: set[tuple[str, str, str]]
    #: ACDC's reference circuit (``acdc_reference`` of ground_truth.json; None where ACDC has none)
    acdc_edges: set[tuple[str, str, str]] | None = None
    n_edges: int = 0
    rows: list[dict] = field(default_factory=list)


def tracr_case(program: str, folder: Path, n_pairs: int) -> Case:
    from headlens.analyses.tracr.build import build_if_stale, read_ground_truth
    from headlens.analyses.tracr.ground_truth import true_edges, varying_edges
    from headlens.analyses.tracr.programs import PROGRAMS as SPECS
    from headlens.analyses.tracr.scoring import tracr_task
    from headlens.probes.loading import load_model

    build_if_stale(program, folder)
    truth = read_ground_truth(folder)
    model = load_model(model=str(folder), device="cpu", dtype="float32")
    spec = SPECS[program]
    task = tracr_task(model, spec, spec.build(), numerical=program == "frac_prevs", n_pairs=n_pairs)
    acdc = (
        {(e["sender"], e["receiver"], e["input"]) for e in truth["edges"] if e.get("acdc_reference")} if "acdc_reference" in truth else None
    )
    return Case(program, folder, model, task, true_edges(truth), varying_edges(truth), acdc)


def planted_case(folder: Path, n_pairs: int) -> Case:
    from headlens.analyses.patching.builtin import induction_task
    from headlens.analyses.synthetic.planted_circuit import PLANTED_CIRCUIT_EDGES, build_planted_circuit
    from headlens.analyses.synthetic.planted_spec import PlantedSpec
    from headlens.probes.loading import load_model

    if not (folder / "config.json").is_file():
        build_planted_circuit(folder, PlantedSpec(d_model=192, n_ctx=64))
    model = load_model(model=str(folder), device="cpu", dtype="float32")
    task = induction_task(model, n=n_pairs, T=12)
    edges = set(PLANTED_CIRCUIT_EDGES)
    return Case("planted", folder, model, task, edges, edges)


def score_row(case: Case, tool: str, method: str, table, values, wall: float | None, note: str = "") -> dict:
    """AUCs of one method's edge table (``sender, receiver, input, score``), the interval from per-pair ``values``."""
    import numpy as np

    from headlens.analyses.circuits.roc import edge_roc_auc
    from headlens.analyses.tracr.scoring import auc_interval

    keys = list(zip(table["sender"], table["receiver"], table["input"], strict=True))
    keep = np.array([k not in case.all_edges or k in case.input_edges for k in keys])
    kept = table[keep].reset_index(drop=True)
    low = high = float("nan")
    if values is not None:
        low, high = auc_interval(kept, values[:, keep], case.input_edges, n_bootstrap=N_BOOTSTRAP, seed=0)
    acdc = edge_roc_auc(table, case.acdc_edges) if case.acdc_edges else None
    return {"case": case.name, "tool": tool, "method": method, "auc_all": edge_roc_auc(table, case.all_edges), "auc_acdc": acdc,
            "auc_input": edge_roc_auc(kept, case.input_edges), "low": low, "high": high, "wall_s": wall,
            "n_edges": len(table), "n_true": len(case.all_edges), "n_input": len(case.input_edges),
            "n_pairs": len(case.task), "note": note}  # fmt: skip


def headlens_rows(case: Case, methods: tuple[str, ...], repeats: int = 1) -> None:
    """Each method once on two pairs untimed (lazy imports, first-call set-up), then on every pair ``repeats`` times,
    timed: the wall time is the median (the scores are the same every time: checked)."""
    import statistics
    from dataclasses import replace

    import numpy as np

    from headlens.analyses.circuits.config import CircuitConfig
    from headlens.analyses.tracr.scoring import edge_scores

    t = case.task
    warm = replace(t, clean=t.clean[:2], corrupt=t.corrupt[:2], lengths=t.lengths[:2], correct=t.correct[:2], incorrect=t.incorrect[:2])
    for method in methods:
        edge_scores(case.model, warm, CircuitConfig(method=method))
        walls = []
        for _ in range(max(1, repeats)):
            table, got, wall = edge_scores(case.model, case.task, CircuitConfig(method=method))
            walls.append(wall)
            if len(walls) == 1:
                values = got
            elif not np.array_equal(got, values, equal_nan=True):
                raise RuntimeError(f"{case.name} {method}: a repeat gave other scores")
        case.n_edges = len(table)
        note = f"median of {len(walls)} runs ({min(walls):.3f}-{max(walls):.3f} s)" if len(walls) > 1 else ""
        case.rows.append(score_row(case, "headlens", method, table, values, statistics.median(walls), note))


def _tl_name(node) -> tuple[str, str]:
    k = node.kind
    if k == "embed":
        return "embed", ""
    if k == "attn_head_out":
        return f"{node.layer}.{node.head}", ""
    if k == "mlp_out":
        return f"mlp{node.layer}", ""
    if k in ("q_input", "k_input", "v_input"):
        return f"{node.layer}.{node.head}", k[0]
    if k == "mlp_in":
        return f"mlp{node.layer}", "mlp"
    return "logits", "logits"


def tl_eap_rows(case: Case) -> None:
    """TransformerLens' own edge attribution patching, pair by pair, summed over positions into headlens' edges."""
    import numpy as np
    import torch
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    from headlens.analyses.circuits.graph import build_graph

    graph = build_graph(case.model)
    table = graph.edges[["sender", "receiver", "input"]].copy().reset_index(drop=True)
    index = {k: i for i, k in enumerate(zip(table["sender"], table["receiver"], table["input"], strict=True))}
    task = case.task
    try:
        per_pair = np.full((len(task), len(table)), np.nan)
        t0 = time.perf_counter()
        for i in range(len(task)):
            L = int(task.lengths[i])
            clean, corrupt = task.clean[i : i + 1, :L], task.corrupt[i : i + 1, :L]
            good, bad = int(task.correct[i]), int(task.incorrect[i])

            def metric(logits: torch.Tensor, good: int = good, bad: int = bad) -> torch.Tensor:
                last = logits[0, -1] if logits.dim() == 3 else logits[-1]
                return last[good] - last[bad]

            res = attribution_patch(case.model.bridge, clean, corrupt, metric, EdgeAttributionConfig(granularity="edge"))
            row = per_pair[i]
            for (src, dst), score in res.edge_scores.items():
                j = index.get((_tl_name(src)[0], *_tl_name(dst)))
                if j is not None:
                    row[j] = (0.0 if np.isnan(row[j]) else row[j]) + float(score)
        wall = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 -- a peer that fails is a row saying why
        case.rows.append({"case": case.name, "tool": "transformer-lens 4.3", "method": "eap",
                          "note": f"not run: {type(exc).__name__}: {str(exc)[:120]}"})  # fmt: skip
        return
    missing = int(np.isnan(per_pair).all(axis=0).sum())
    table["score"] = np.nanmean(per_pair, axis=0) if missing < len(table) else np.nan
    values = np.nan_to_num(per_pair, nan=0.0)
    note = f"{missing} edges TL does not score (NaN, ranked lowest)" if missing else ""
    case.rows.append(score_row(case, "transformer-lens 4.3", "eap", table, values, wall, note))


def auto_circuit_status(peers_python: str | None) -> str:
    """Why auto-circuit's rows are empty, or "" when its interpreter can import it."""
    if not peers_python:
        return ("auto-circuit 1.0.1 imports transformer_lens.past_key_value_caching, which TransformerLens 4.x no longer has: "
                "build its own venv (scripts/peers_venv.sh) and pass --peers-python")  # fmt: skip
    proc = subprocess.run([peers_python, "-c", "import auto_circuit.prune_algos.ACDC"], capture_output=True, text=True, check=False)
    if proc.returncode:
        return f"{peers_python} cannot import auto_circuit ({(proc.stderr.strip().splitlines() or ['?'])[-1][:120]})"
    return ""


def auto_circuit_rows(case: Case, peers_python: str, threads: int, timeout: float) -> dict:
    """auto-circuit's ACDC and EAP on ``case`` in the peers' venv (benchmarks/peers_runner.py); its answer."""
    import pandas as pd
    import torch

    task = case.task
    width = int(task.lengths.max())
    base = {"case": case.name, "tool": "auto-circuit 1.0.1"}
    if int(task.lengths.min()) != width:
        why = "not run: pairs of different lengths (auto-circuit batches one length; the benchmark does not split them)"
        case.rows += [{**base, "method": m, "note": why} for m in ("acdc", "eap")]
        return {}
    clean, corrupt = task.clean[:, :width], task.corrupt[:, :width]
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp, torch.no_grad():
        ref = {"clean": case.model.bridge(clean).float(), "corrupt": case.model.bridge(corrupt).float()}
        torch.save(ref, Path(tmp) / "reference.pt")
        request = {"folder": str(case.folder), "clean": clean.tolist(), "corrupt": corrupt.tolist(),
                   "correct": task.correct.tolist(), "incorrect": task.incorrect.tolist(), "threads": threads,
                   "tolerance": LOGIT_TOLERANCE, "methods": ["eap", "acdc"],
                   "true_edges": sorted(case.all_edges)}  # fmt: skip
        (Path(tmp) / "request.json").write_text(json.dumps(request))
        env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": str(threads or os.cpu_count()), "TQDM_DISABLE": "1"}
        try:
            proc = subprocess.run([peers_python, str(RUNNER), tmp], capture_output=True, text=True, env=env, timeout=timeout, check=False)
            err = (proc.stderr.strip().splitlines() or [""])[-1][:160] if proc.returncode else ""
        except subprocess.TimeoutExpired:
            err = f"timed out after {timeout:.0f} s"
        path = Path(tmp) / "answer.json"
        answer = json.loads(path.read_text()) if path.is_file() else {}
    check = answer.get("logit_check", {})
    for method in ("acdc", "eap"):
        got = answer.get("methods", {}).get(method)
        if got is None:
            if check and not check.get("ok"):
                why = f"not run: the HookedTransformer's logits differ from headlens' by {check['max_abs_diff']:.2g} > {LOGIT_TOLERANCE}"
            else:
                why = f"not run: {err or 'no answer from the peers runner'}"
            case.rows.append({**base, "method": method, "note": why})
            continue
        table = pd.DataFrame(got["scores"], columns=["sender", "receiver", "input", "score"])
        note = f"own AUC {got['own_auc']:.3f}; " if "own_auc" in got else ""
        note += "one run over the batch (no interval)" if method == "acdc" else "batched (no per-pair interval)"
        if method == "acdc":
            note += f"; {got['n_distinct']} score levels"
        case.rows.append(score_row(case, base["tool"], method, table, None, got["wall_s"], note))
    return answer


def fmt(v: Any, spec: str) -> str:
    return "-" if v is None or v != v else format(v, spec)


def print_table(rows: list[dict]) -> None:
    head = f"{'case':<15}{'tool':<22}{'method':<8}{'auc_all':>8}{'auc_acdc':>9}{'auc_input':>10}{'95% CI (pairs)':>17}"
    head += f"{'edges':>7}{'true':>6}{'input':>6}{'wall s':>9}  note"
    print(head)
    for r in rows:
        ci = f"[{fmt(r.get('low'), '.3f')}, {fmt(r.get('high'), '.3f')}]" if r.get("low") == r.get("low") and "low" in r else "-"
        print(f"{r['case']:<15}{r['tool']:<22}{r['method']:<8}{fmt(r.get('auc_all'), '.3f'):>8}{fmt(r.get('auc_acdc'), '.3f'):>9}"
              f"{fmt(r.get('auc_input'), '.3f'):>10}"
              f"{ci:>17}{fmt(r.get('n_edges'), 'd'):>7}{fmt(r.get('n_true'), 'd'):>6}{fmt(r.get('n_input'), 'd'):>6}"
              f"{fmt(r.get('wall_s'), '.3f'):>9}  {r.get('note', '')}")  # fmt: skip


def targets(cases: list[Case], method: str = "exact") -> list[str]:
    """The issue's targets, each measured and marked met or not, for headlens' ``method``."""
    lines = []
    for c in cases:
        ours = next((r for r in c.rows if r["tool"] == "headlens" and r["method"] == method), None)
        if ours is None:
            continue
        peers = [r for r in c.rows if r["tool"] != "headlens" and r.get("auc_input") == r.get("auc_input") and "auc_input" in r]
        best = max(peers, key=lambda r: r["auc_input"], default=None)
        ok = ours["auc_input"] >= AUC_TARGET and ours["low"] >= LOW_TARGET
        line = (f"{c.name}: headlens {method} AUC {ours['auc_input']:.3f} [{ours['low']:.3f}, {ours['high']:.3f}] "
                f"(target >= {AUC_TARGET}, low >= {LOW_TARGET}): {'met' if ok else 'NOT met'}")  # fmt: skip
        if best is not None:
            geq = ours["auc_input"] >= best["auc_input"] - 1e-12
            verdict = "at least as accurate" if geq else "LESS accurate"
            line += f"; best peer {best['tool']} {best['method']} {best['auc_input']:.3f}: {verdict}"
        lines.append(line)
    sized = [c for c in cases if c.name != "planted"]
    big = max(sized, key=lambda c: c.n_edges).name if sized else None
    for c in cases:
        acdc = next((r for r in c.rows if r["tool"].startswith("auto-circuit") and r["method"] == "acdc" and r.get("wall_s")), None)
        if acdc is None:
            if c.name == big:
                lines.append(f"largest tracr case {big}: speed target not measured (auto-circuit ACDC did not run)")
            continue
        ours_all = [r for r in c.rows if r["tool"] == "headlens" and r.get("wall_s")]
        ratios = ", ".join(f"{r['method']} {acdc['wall_s'] / r['wall_s']:.1f}x" for r in ours_all)
        ours = next((r for r in c.rows if r["tool"] == "headlens" and r["method"] == method and r.get("wall_s")), None)
        line = f"{c.name} ({c.n_edges} edges): auto-circuit ACDC {acdc['wall_s']:.2f} s over headlens' wall time: {ratios}"
        if c.name == big and ours:
            ratio = acdc["wall_s"] / ours["wall_s"]
            verdict = "met" if ratio >= SPEED_TARGET else "NOT met"
            line = "largest tracr case " + line + f" (target >= {SPEED_TARGET:.0f}x for {method}: {verdict})"
        lines.append(line)
    return lines


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--programs", default=",".join(PROGRAMS), help="tracr programs (comma-separated; empty for none)")
    p.add_argument("--planted", action=__import__("argparse").BooleanOptionalAction, default=True, help="the planted-circuit case")
    p.add_argument("--n-pairs", type=int, default=16)
    p.add_argument("--methods", default="exact,eap,eap-ig")
    p.add_argument("--peers-python", default=None, help="python of the venv of scripts/peers_venv.sh (auto-circuit 1.0.1)")
    p.add_argument("--no-tl", action="store_true", help="skip TransformerLens 4.3's EAP rows")
    p.add_argument("--peer-timeout", type=float, default=1800.0, help="seconds per case for the auto-circuit runner")
    args = p.parse_args()
    setup_threads(args.threads)
    cache = Path(args.cache)
    cases = [tracr_case(prog, cache / "tracr" / prog, args.n_pairs) for prog in args.programs.split(",") if prog]
    if args.planted:
        cases.append(planted_case(cache / "planted_circuit", args.n_pairs))
    ac = auto_circuit_status(args.peers_python)
    answers = {}
    for c in cases:
        headlens_rows(c, tuple(args.methods.split(",")), args.repeats)
        if not args.no_tl:
            tl_eap_rows(c)
        if ac:
            c.rows += [{"case": c.name, "tool": "auto-circuit 1.0.1", "method": m, "note": "not run (below)"} for m in ("acdc", "eap")]
        else:
            answers[c.name] = auto_circuit_rows(c, args.peers_python, args.threads, args.peer_timeout)
    rows = [r for c in cases for r in c.rows]
    print_table(rows)
    if ac:
        print(f"auto-circuit 1.0.1 not run: {ac}")
    versions = next((a.get("versions") for a in answers.values() if a.get("versions")), None)
    checks = {k: a.get("logit_check", {}).get("max_abs_diff") for k, a in answers.items()}
    if versions:
        diffs = ", ".join(f"{k} {fmt(v, '.1e')}" for k, v in checks.items())
        venv = ", ".join(f"{k} {v}" for k, v in versions.items())
        print(f"peers venv: {venv}; HookedTransformer vs headlens max |logit diff|: {diffs}")
    for line in targets(cases):
        print("target: " + line)
    print(f"threads={args.threads or 'default'}; pairs={args.n_pairs} per case, seed 0; command: {' '.join(sys.argv)}")
    write_json(args.json, {"rows": rows, "argv": sys.argv, "peers": {k: {kk: vv for kk, vv in a.items() if kk != "methods"}
                                                                       for k, a in answers.items()}})  # fmt: skip


if __name__ == "__main__":
    main()
