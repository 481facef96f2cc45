"""Edge ROC AUC of exact edge scores on every tracr program of the benchmark, by ablation kind (issue 46 item 5).

For each program of ``circuits_vs_peers.py`` (compiled by ``headlens tracr-model``) every edge is scored exactly
(:func:`headlens.analyses.circuits.run.score_edges`, ``method="exact"``) under

* ``corrupted``: patched to its corrupted value, on 16 pairs of full-length inputs (the benchmark's pairs);
* ``zero``: ablated to zero (ACDC's zero ablation), on the same pairs, and on 16 pairs drawn from inputs of every
  length 1 .. max_seq_len (``tracr_pairs(every_length=True)``, seed 0; zero ablation needs no corrupted input, so
  the whole input space can be used): on full-length inputs alone reverse's length head changes nothing when
  zeroed (a zero length clips to the longest, which a full-length input has);
* ``mean``: ablated to its mean over the pairs' clean and corrupted inputs, on the every-length pairs.

AUC against every true edge (``auc_all``: the compiled edges and the readout edge of a numerical program,
frac_prevs' ``embed -> logits``, ``origin: "readout"`` in ground_truth.json), against the edges the program uses
(``auc_used``: the queries and keys a TRUE selector ignores left out of both classes), against ACDC's reference
circuit on the two programs ACDC scores (``auc_acdc``, reverse and proportion = frac_prevs, with the readout edge:
its published zero-ablation edge AUC, 1.000 on both, is against that circuit, the output of its own zero-ablation
run, every other edge false; docs/tracr.md) and against the
input-dependent ones (``auc_input``); 95% percentile intervals over pairs (200 resamples).  ACDC's reverse data are
inputs shorter than max_seq_len (the 6 permutations of 3 tokens, max_seq_len 5): its comparable row is "every length".

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/tracr_ablation.py --threads 2
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _common import parser, setup_threads, write_json

PROGRAMS = ("frac_prevs", "hist", "reverse", "shift", "detect_pattern", "shuffle_dyck")
N_BOOTSTRAP = 200


def rows_of(program: str, folder: Path, n_pairs: int) -> list[dict]:
    from headlens.analyses.circuits.config import CircuitConfig
    from headlens.analyses.circuits.graph import build_graph
    from headlens.analyses.circuits.ground_truth import read_truth, truth_auc
    from headlens.analyses.circuits.run import score_edges
    from headlens.analyses.tracr.build import build_if_stale
    from headlens.analyses.tracr.programs import PROGRAMS as SPECS
    from headlens.analyses.tracr.scoring import tracr_task
    from headlens.probes.loading import load_model

    build_if_stale(program, folder)
    model = load_model(model=str(folder), device="cpu", dtype="float32")
    spec = SPECS[program]
    truth = read_truth(folder / "ground_truth.json")
    graph = build_graph(model)
    out = []
    for ablation, every in (("corrupted", False), ("zero", False), ("zero", True), ("mean", True)):
        task = tracr_task(model, spec, spec.build(), numerical=program == "frac_prevs", n_pairs=n_pairs, every_length=every)
        t0 = time.perf_counter()
        per_pair = score_edges(model, task, graph, CircuitConfig(method="exact", ablation=ablation))
        wall = time.perf_counter() - t0
        auc = truth_auc(truth, graph.edges.iloc[per_pair.edge_ids], per_pair.values, n_bootstrap=N_BOOTSTRAP, seed=0)
        out.append({"program": program, "ablation": ablation, "pairs": "every length" if every else "full length",
                    "wall_s": wall, **{k: v for k, v in auc.items() if k != "path"}})  # fmt: skip
    return out


def fmt(r: dict, key: str) -> str:
    if key not in r:
        return f"{'-':>22}"
    return f"{r[key]:.3f} [{r[key + '_low']:.3f}, {r[key + '_high']:.3f}]".rjust(22)


def main() -> None:
    p = parser(__doc__, repeats=False)
    p.add_argument("--programs", default=",".join(PROGRAMS))
    p.add_argument("--n-pairs", type=int, default=16)
    args = p.parse_args()
    setup_threads(args.threads)
    rows = [r for prog in args.programs.split(",") if prog for r in rows_of(prog, Path(args.cache) / "tracr" / prog, args.n_pairs)]
    head = f"{'program':<15}{'ablation':<10}{'pairs':<13}{'auc_all':>22}{'auc_used':>22}{'auc_acdc':>22}{'auc_input':>22}"
    print(head + "  edges true used acdc input  wall s")
    for r in rows:
        counts = (f"{r['n_edges']:>6}{r['n_true']:>5}{r.get('n_used', r['n_true']):>5}{r.get('n_acdc', '-'):>5}"
                  f"{r.get('n_varying', r['n_true']):>6}")  # fmt: skip
        aucs = "".join(fmt(r, k) for k in ("auc_all", "auc_used", "auc_acdc", "auc_input"))
        print(f"{r['program']:<15}{r['ablation']:<10}{r['pairs']:<13}{aucs}  {counts}  {r['wall_s']:6.2f}")
    print(f"threads={args.threads or 'default'}; pairs={args.n_pairs} per case, seed 0; command: {' '.join(sys.argv)}")
    write_json(args.json, {"rows": rows, "argv": sys.argv})


if __name__ == "__main__":
    main()
