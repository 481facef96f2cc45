"""Circuit discovery on tracr-compiled models: headlens' methods beside the peers, same models, pairs and truth.

Every case is a tracr program compiled by ``headlens tracr-model`` (GPT-2 checkpoint, ground_truth.json);
the clean/corrupt pairs are drawn from the program's input space (headlens.analyses.tracr.scoring.tracr_pairs,
seed 0).  Per method: edge ROC AUC against every compiled edge (``auc``) and against the compiled edges whose
signal changes between inputs (``auc_var``: BOS, ``one`` and position directions are the same on every input,
so no clean/corrupt patch can see them), and wall time of the scoring on ``--threads`` CPU threads.

Rows:
* headlens ``exact`` / ``eap`` / ``eap-ig`` (:func:`headlens.analyses.circuits.run.score_edges`);
* TransformerLens 4.3's own EAP (``transformer_lens.tools.analysis.attribution_patching.attribution_patch``,
  edge granularity, ig_steps=1; its per-position edge scores summed over positions into the same edges);
* auto-circuit 1.0.1's ACDC and EAP: run only where ``--peers-python`` names an interpreter with auto-circuit
  importable; otherwise the row says why it was not run.

    .venv/bin/python benchmarks/circuits_vs_peers.py --threads 2 [--programs frac_prevs,reverse] [--n-pairs 16]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from _common import parser, setup_threads, write_json

PROGRAMS = ("frac_prevs", "hist", "reverse", "shift", "detect_pattern")


def tl_eap_scores(model, task):
    """TransformerLens' own edge attribution patching, pair by pair, summed over positions into headlens' edge names."""
    import torch
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    def name(node) -> tuple[str, str]:
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

    total: dict[tuple[str, str, str], float] = {}
    n = len(task)
    for i in range(n):
        L = int(task.lengths[i])
        clean, corrupt = task.clean[i : i + 1, :L], task.corrupt[i : i + 1, :L]
        good, bad = int(task.correct[i]), int(task.incorrect[i])

        def metric(logits: torch.Tensor, good: int = good, bad: int = bad) -> torch.Tensor:
            last = logits[0, -1] if logits.dim() == 3 else logits[-1]
            return last[good] - last[bad]

        res = attribution_patch(model.bridge, clean, corrupt, metric, EdgeAttributionConfig(granularity="edge"))
        for (src, dst), score in res.edge_scores.items():
            s, _ = name(src)
            r, inp = name(dst)
            key = (s, r, inp)
            total[key] = total.get(key, 0.0) + float(score) / n
    return total


def run_case(program: str, folder: Path, n_pairs: int, methods: tuple[str, ...]) -> list[dict]:
    import pandas as pd

    from headlens.analyses.circuits.graph import build_graph
    from headlens.analyses.circuits.roc import edge_roc_auc
    from headlens.analyses.tracr.build import build_tracr_model, read_ground_truth
    from headlens.analyses.tracr.ground_truth import true_edges, varying_edges
    from headlens.analyses.tracr.programs import PROGRAMS as SPECS
    from headlens.analyses.tracr.scoring import score_methods, tracr_task
    from headlens.probes.loading import load_model

    if not (folder / "ground_truth.json").is_file():
        build_tracr_model(program, folder, overwrite=True)
    truth = read_ground_truth(folder)
    model = load_model(model=str(folder), device="cpu", dtype="float32")
    spec = SPECS[program]
    numerical = program == "frac_prevs"
    task = tracr_task(model, spec, spec.build(), numerical=numerical, n_pairs=n_pairs)
    rows = [{**r, "tool": "headlens", "note": ""} for r in score_methods(model, truth, task, methods=methods).to_dict("records")]
    edges, varying = true_edges(truth), varying_edges(truth)
    graph = build_graph(model)
    base = {"program": program, "n_edges": len(graph.edges), "n_true": len(edges), "n_varying": len(varying), "n_pairs": len(task)}
    try:
        t0 = time.perf_counter()
        tl = tl_eap_scores(model, task)
        wall = time.perf_counter() - t0
        table = graph.edges[["sender", "receiver", "input"]].copy()
        table["score"] = [tl.get(k, float("nan")) for k in zip(table["sender"], table["receiver"], table["input"], strict=True)]
        missing = int(table["score"].isna().sum())
        kept = table[[k not in edges or k in varying for k in zip(table["sender"], table["receiver"], table["input"], strict=True)]]
        rows.append({**base, "tool": "transformer-lens 4.3", "method": "eap", "auc": edge_roc_auc(table, edges),
                     "auc_varying": edge_roc_auc(kept, varying), "wall_s": wall,
                     "note": f"{missing} edges TL does not score (NaN, ranked lowest)" if missing else ""})  # fmt: skip
    except Exception as exc:  # noqa: BLE001 -- a peer that fails is a row saying why
        rows.append({**base, "tool": "transformer-lens 4.3", "method": "eap", "note": f"not run: {type(exc).__name__}: {str(exc)[:120]}"})
    return [dict(pd.Series(r).to_dict()) for r in rows]


def auto_circuit_status(peers_python: str | None) -> str:
    """Why auto-circuit's rows are empty, or "" when its interpreter can import it."""
    if not peers_python:
        return ("not run: auto-circuit 1.0.1 imports transformer_lens.past_key_value_caching, which TransformerLens 4.x "
                "no longer has; it needs its own venv with an older transformer-lens (and its torch): pass --peers-python")  # fmt: skip
    proc = subprocess.run([peers_python, "-c", "import auto_circuit"], capture_output=True, text=True, check=False)
    if proc.returncode:
        return f"not run: {peers_python} cannot import auto_circuit ({(proc.stderr.strip().splitlines() or ['?'])[-1][:120]})"
    return "not run: the auto-circuit subprocess runner (its TransformerLens conversion of these checkpoints) is not written yet"


def main() -> None:
    p = parser(__doc__, repeats=False)
    p.add_argument("--programs", default=",".join(PROGRAMS))
    p.add_argument("--n-pairs", type=int, default=16)
    p.add_argument("--methods", default="exact,eap,eap-ig")
    p.add_argument("--peers-python", default=None, help="python of a venv with auto-circuit 1.0.1 (its own transformer-lens)")
    args = p.parse_args()
    setup_threads(args.threads)
    cache = Path(args.cache) / "tracr"
    rows: list[dict] = []
    for program in [s for s in args.programs.split(",") if s]:
        rows += run_case(program, cache / program, args.n_pairs, tuple(args.methods.split(",")))
    ac = auto_circuit_status(args.peers_python)
    for program in [s for s in args.programs.split(",") if s]:
        for method in ("acdc", "eap"):
            rows.append(
                {"program": program, "tool": "auto-circuit 1.0.1", "method": method, "note": "not run (below)" if ac else "", "why": ac}
            )
    head = f"{'program':<15}{'tool':<22}{'method':<8}{'auc':>7}{'auc_var':>9}{'95% CI (pairs)':>16}"
    head += f"{'edges':>7}{'true':>6}{'var':>5}{'wall s':>9}  note"
    print(head)
    for r in rows:

        def f(key: str, fmt: str) -> str:
            v = r.get(key)
            return "-" if v is None or v != v else format(v, fmt)

        ci = f"[{f('auc_varying_low', '.3f')}, {f('auc_varying_high', '.3f')}]" if r.get("auc_varying_low") is not None else "-"
        counts = f"{ci:>16}{f('n_edges', 'd'):>7}{f('n_true', 'd'):>6}{f('n_varying', 'd'):>5}"
        print(f"{r['program']:<15}{r['tool']:<22}{r['method']:<8}{f('auc', '.3f'):>7}{f('auc_varying', '.3f'):>9}"
              f"{counts}{f('wall_s', '.3f'):>9}  {r.get('note', '')}")  # fmt: skip
    if ac:
        print(f"auto-circuit 1.0.1: {ac}")
    print(f"threads={args.threads or 'default'}; pairs={args.n_pairs} per program, seed 0; command: {' '.join(sys.argv)}")
    write_json(args.json, {"rows": rows, "argv": sys.argv})


if __name__ == "__main__":
    main()
