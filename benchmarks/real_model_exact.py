"""Benchmark: EAP and EAP-IG on SmolLM2 judged by exact patching, edge by edge (issue 49 item 2).

    python benchmarks/real_model_exact.py [--tasks ioi,induction] [--pairs 16] [--top 2000] [--random 2000] [--workers 2]
                                          [--budget-min 30] [--deadline 16:20] [--page]
    python benchmarks/real_model_exact.py --device cuda --top 70651 --random 0 --workers 1   # every edge exact (a GPU)
    python benchmarks/real_model_exact.py --smoke      # a tiny Llama with GQA, seconds: a check, not a measurement

For each task: EAP and EAP-IG (``--steps``) score every edge of the graph on the task's pairs; exact patching scores
a sample of edges on the same pairs (:func:`~headlens.analyses.circuits.against_exact.edge_sample`: the union of each
estimate's top ``--top`` by ``|score|``, weight 1, and ``--random`` drawn uniformly from the rest, seeded, weight
rest / random), on ``--workers`` local Ray workers (:func:`~headlens.analyses.circuits.exact_chunks.exact_scores_parallel`;
one process with ``--workers 1``); each estimate's AUROC against the exact circuit (edges whose ``|exact|`` is at
least 0.01 of the gap), weighted for the sampling, with its interval, and the weighted Spearman rank agreement
(:func:`~headlens.analyses.circuits.against_exact.against_exact`).  Beside them MIB's CPR and CMD of each estimate's
ranking on the same pairs (in-sample).

Cost first: exact patching of ``--probe`` edges drawn from the sample is timed and the whole sample's time predicted
from it (per edge, ``--workers`` in parallel; a probe batches worse than the whole sample, so the prediction is high);
when the prediction passes ``--budget-min`` (split over the tasks) or
``--deadline`` (UTC), the top and random counts are scaled down to fit and the reduction is printed and kept in the
figures.  ``--page`` writes the section "AUROC against exact patching" of docs/real-model.md (between its markers, which
benchmarks/real_model_page.py keeps when it rewrites the page) and its figures to docs/figures/real-model-exact.json.
The estimates are saved in ``--cache`` and read back by a rerun with the same task, pairs, steps and seed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "real-model.md"
FIGURES = REPO / "docs" / "figures" / "real-model-exact.json"
BEGIN, END = "<!-- against-exact: written by benchmarks/real_model_exact.py -->", "<!-- /against-exact -->"

#: What the section sets the figures beside (published; what they are measured against differs: the section says how).
PEERS = {
    "interpbench": "InterpBench (Gupta et al. 2024): median edge AUROC over its planted-circuit models, EAP-IG 0.90, EAP 0.20, "
    "against the circuit planted by training (ground truth)",
    "mib": "MIB (Mueller et al. 2025), GPT-2 small IOI: CPR 2.30 for exact activation patching against 1.82 for EAP-IG "
    "(CMD beside: lower is better)",
}


def _load(args: argparse.Namespace) -> Any:
    from headlens.probes.loading import load_model

    if args.smoke:
        from headlens.analyses.synthetic.families import build_family_checkpoint

        folder = Path(args.cache) / "family-llama"
        if not (folder / "headlens_family.json").is_file():
            build_family_checkpoint(folder, "llama")
        return load_model(model=str(folder), device=args.device)
    from headlens.probes.gguf import gguf_checkpoint
    from headlens.reports.api.named_models import smollm2_file

    folder, _ = gguf_checkpoint(smollm2_file(fetch=True), "smollm2")
    return load_model(model=str(folder), device=args.device)


def _order(pp: Any) -> Any:
    from headlens.analyses.circuits.summary import carried, ranking

    return ranking(carried(pp)[0].mean(0))  # |share| order: the gap is one number for every edge


def _exact(model: Any, task: Any, graph: Any, ids: Any, workers: int, journal: Path | None) -> Any:
    """Exact scores of ``ids``: on ``workers`` Ray workers (49.1's chunk engine) when more than one, else here."""
    from headlens.analyses.circuits.exact import exact_scores

    if workers <= 1:
        return exact_scores(model, task, graph, ids)
    from headlens.analyses.circuits.exact_chunks import exact_scores_parallel
    from headlens.probes.cluster.pool import Cluster

    return exact_scores_parallel(model, task, graph, ids, cluster=Cluster(address="local", workers=workers, threads=1), journal=journal,
                                 edges_per_chunk=max(32, len(ids) // (4 * workers) + 1))  # fmt: skip


def _plan(args: argparse.Namespace, model: Any, task: Any, graph: Any, orders: list, budget_s: float) -> tuple[Any, dict[str, Any], Any]:
    """The sample, its predicted cost and the probe's exact scores: the probe's time per edge times the sample, over the
    workers; scaled down to ``budget_s`` (and the deadline) when it is over, with the reduction recorded."""
    import numpy as np

    from headlens.analyses.circuits.against_exact import edge_sample

    smp = edge_sample(orders, args.top, args.random, args.seed)
    probe = np.random.default_rng([args.seed, 7]).choice(smp.ids, size=min(args.probe, len(smp.ids)), replace=False)
    t0 = time.perf_counter()
    probed = _exact(model, task, graph, probe, 1, None)  # kept: the run below patches the rest of the sample
    per_edge = (time.perf_counter() - t0) / len(probe)
    predicted = per_edge * len(smp.ids) / max(1, args.workers)
    deadline_s = (args.deadline - dt.datetime.now(dt.timezone.utc)).total_seconds() if args.deadline else float("inf")
    allowed = min(budget_s, deadline_s)
    cost = {"probe_edges": len(probe), "seconds_per_edge": per_edge, "predicted_s": predicted, "allowed_s": allowed,
            "asked": {"top": args.top, "random": args.random, "n_sampled": len(smp.ids)}, "reduced": None}  # fmt: skip
    print(f"  cost: {per_edge:.2f} s per exact edge on {len(task)} pairs (probe of {len(probe)} edges, one process); "
          f"{len(smp.ids):,} edges on {args.workers} workers: predicted {predicted / 60:.1f} min (allowed {allowed / 60:.1f})",
          flush=True)  # fmt: skip
    if predicted > allowed:
        f = allowed / predicted
        top, random = max(1, int(args.top * f)), max(2, int(args.random * f))
        while True:  # the union of the tops is not linear in --top: shrink until it fits
            smp = edge_sample(orders, top, random, args.seed)
            if per_edge * len(smp.ids) / max(1, args.workers) <= allowed or top == 1:
                break
            top, random = max(1, int(top * 0.9)), max(2, int(random * 0.9))
        cost["reduced"] = {"top": top, "random": random, "n_sampled": len(smp.ids),
                           "predicted_s": per_edge * len(smp.ids) / max(1, args.workers)}  # fmt: skip
        print(f"  REDUCED to fit: top {top} (asked {args.top}) + random {random} (asked {args.random}): {len(smp.ids):,} edges, "
              f"predicted {cost['reduced']['predicted_s'] / 60:.1f} min", flush=True)  # fmt: skip
    return smp, cost, probed


def _cached(path: Path, score: Any) -> tuple[Any, float | None, bool]:
    """An estimate over every edge, from ``path`` when an earlier run saved it there (the estimates are most of the run's
    time on a loaded machine), else ``score()``, saved there with its seconds: ``(estimate, seconds it took when scored
    (None: not recorded), from the cache)``."""
    import numpy as np

    from headlens.analyses.circuits.scores import PerPair

    if path.is_file():
        z = np.load(path)
        pp = PerPair(values=z["values"], clean=z["clean"], corrupt=z["corrupt"], metric=str(z["metric"]),
                     method=str(z["method"]), direction=str(z["direction"]), edge_ids=z["edge_ids"], steps=int(z["steps"]),
                     forwards=float(z["forwards"]))  # fmt: skip
        return pp, float(z["seconds"]) if "seconds" in z.files else None, True
    t0 = time.perf_counter()
    pp = score()
    seconds = round(time.perf_counter() - t0, 1)
    np.savez(path, values=pp.values, clean=pp.clean, corrupt=pp.corrupt, metric=pp.metric, method=pp.method, direction=pp.direction,
             edge_ids=pp.edge_ids, steps=pp.steps, forwards=pp.forwards, seconds=seconds)  # fmt: skip
    return pp, seconds, False


def _joined(a: Any, b: Any) -> Any:
    """Two exact runs on the same pairs as one (their edges side by side)."""
    import numpy as np

    return replace(a, values=np.hstack([a.values, b.values]), edge_ids=np.concatenate([a.edge_ids, b.edge_ids]),
                   forwards=a.forwards + b.forwards)  # fmt: skip


def run_task(args: argparse.Namespace, model: Any, graph: Any, name: str, budget_s: float) -> dict[str, Any]:
    """One task: the estimates over every edge, the sample, exact over it, each estimate against exact, CPR/CMD."""
    import numpy as np

    from headlens.analyses.circuits.against_exact import against_exact
    from headlens.analyses.circuits.mib import mib_metrics
    from headlens.analyses.circuits.scores import attribution_scores
    from headlens.analyses.circuits.summary import carried
    from headlens.analyses.patching.builtin import builtin_task

    task = builtin_task(model, name, n=args.pairs, seed=args.seed)
    out: dict[str, Any] = {"task": name, "pairs": len(task), "edges": len(graph.edges), "seconds": {}, "workers": args.workers,
                           "command": " ".join(["python benchmarks/real_model_exact.py", *sys.argv[1:]])}  # fmt: skip
    est, out["resumed"] = {}, []  # what an earlier run did: its seconds are that run's (or not known), not this run's
    for method, steps in (("eap", 1), ("eap-ig", args.steps)):
        cached = Path(args.cache) / f"{method}-{name}-{len(task)}-{steps}-{args.seed}.npz"
        est[method], out["seconds"][method], hit = _cached(
            cached, lambda s=steps: attribution_scores(model, task, graph, steps=s, batch_size=args.batch_size)
        )
        out["resumed"] += [method] if hit else []
        took = "time not recorded" if out["seconds"][method] is None else f"{out['seconds'][method]:.0f} s"
        print(f"  {method}: every edge in {took}{' (an earlier run, from --cache)' if hit else ''}", flush=True)
    smp, out["cost"], probed = _plan(args, model, task, graph, [_order(est["eap"]), _order(est["eap-ig"])], budget_s)
    t0 = time.perf_counter()
    journal = Path(args.cache) / f"exact-{name}-{args.pairs}-{len(smp.ids)}.jsonl" if args.workers > 1 else None
    if journal is not None and journal.is_file():
        out["resumed"].append("exact")  # its seconds are this run's part only
    rest = np.setdiff1d(smp.ids, probed.edge_ids)
    ex = _joined(probed, _exact(model, task, graph, rest, args.workers, journal)) if len(rest) else probed
    out["seconds"]["exact"] = round(time.perf_counter() - t0, 1)
    print(f"  exact: {len(smp.ids):,} edges: {_took(out, 'exact')} on {args.workers} workers", flush=True)
    out["sample"] = {"top": len(smp.top), "random": len(smp.random), "rest": smp.n_rest, "seed": smp.seed}
    out["rows"], out["mib"] = [], {}
    for method, pp in est.items():
        res = against_exact(pp, ex, smp, n_bootstrap=args.n_bootstrap, seed=args.seed)
        out["rows"].append(res.row())
        m = mib_metrics(model, task, graph, carried(pp)[0].mean(0), batch_size=args.batch_size, n_bootstrap=args.n_bootstrap,
                        seed=args.seed, measured_on="the pairs that scored the edges (in-sample)")  # fmt: skip
        out["mib"][method] = {k: m[k] for k in ("cpr", "cpr_ci", "cmd", "cmd_ci") if k in m}
    return out


def _table(results: list[dict[str, Any]]) -> list[str]:
    lines = ["| task | estimate | AUROC against exact [95%] | Spearman rho [95%] | sampled: top + random of rest | "
             "exact circuit (sampled / est. in graph) | CPR [95%] | CMD [95%] |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        for row in r["rows"]:
            m = r["mib"].get(row["method"], {})
            auc = f"{row['auc']:.2f} [{row['auc_low']:.2f}, {row['auc_high']:.2f}]" + (" (too wide to read)" if row["wide"] else "")
            if row.get("reason"):
                auc = "n/a (below)"
            lines.append(
                f"| {r['task']} | {row['method'].upper()} | {auc} | {row['spearman']:.2f} [{row['spearman_low']:.2f}, "
                f"{row['spearman_high']:.2f}] | {row['n_top']:,} + {row['n_random']:,} of {row['n_rest']:,} | {row['n_positive']:,} / "
                f"{row['est_circuit']:,.0f}{_hidden(row)} | {_ci(m, 'cpr')} | {_ci(m, 'cmd')} |"
            )
    return lines


def _drawn(result: dict[str, Any]) -> str:
    """How many of the random stratum's edges are in the exact circuit (``est_circuit`` less the top's, over its weight)."""
    row, sample = result["rows"][0], result["sample"]
    weight = sample["rest"] / max(sample["random"], 1)  # est_circuit = in the top + k * weight; n_positive = in the top + k
    k = round((row["est_circuit"] - row["n_positive"]) / (weight - 1)) if weight > 1 else 0
    return f"{k:,} of the {sample['random']:,} drawn"


def _hidden(row: dict[str, Any]) -> str:
    h = float(row.get("hidden_bound") or 0.0)
    return f" (+ up to {h:,.0f} unseen, 95%)" if h > 0 else ""


def _ci(m: dict[str, Any], key: str) -> str:
    if key not in m:
        return "n/a"
    lo, hi = (m.get(key + "_ci") or [float("nan")] * 2)[:2]
    return f"{m[key]:.2f} [{lo:.2f}, {hi:.2f}]"


def _took(result: dict[str, Any], method: str) -> str:
    """How long ``method`` took on this task, saying where an earlier run did (part of) it."""
    seconds, earlier = result["seconds"][method], method in result.get("resumed", ())
    if method == "exact" and earlier:
        return f"{seconds:,.0f} s to finish a journal an earlier run left"
    if seconds is None:
        return "from an earlier run's cache, time not recorded"
    return f"{seconds:,.0f} s" + (" in an earlier run, read from its cache" if earlier else "")


def section(data: dict[str, Any]) -> str:
    """The page section (between :data:`BEGIN` and :data:`END`), from the figures."""
    from headlens.reports.render.against_exact_lines import against_exact_line

    s = data["settings"]
    reduced = [f"{r['task']}: top {r['cost']['reduced']['top']} + random {r['cost']['reduced']['random']} instead of top "
               f"{s['top']} + random {s['random']} (exact predicted at {r['cost']['predicted_s'] / 60:.0f} min for the full sample, "
               f"{r['cost']['seconds_per_edge']:.2f} s per edge)" for r in data["results"] if r["cost"]["reduced"]]  # fmt: skip
    runs = "; ".join(f"{r['task']}: `{r['command']}` ({r['pairs']} pairs, exact on {r['workers']} worker{'s' if r['workers'] > 1 else ''}: "
                     f"{_took(r, 'exact')}; EAP {_took(r, 'eap')}, EAP-IG {_took(r, 'eap-ig')})"
                     for r in data["results"])  # fmt: skip
    where = f"{os.cpu_count()} CPU cores" if data.get("device", "cpu") == "cpu" else data["device"]
    out = [BEGIN, "## AUROC against exact patching", "",
           f"{runs} (commit {data['commit']}, {data['date']}, {where}, 1-minute load average "
           f"{data['load'][0]:.1f} at the start and {data['load'][1]:.1f} at the end). "
           f"EAP and EAP-IG ({s['steps']} steps) score all {data['results'][0]['edges']:,} edges on each task's pairs; "
           "exact patching scores a sample of them on the same pairs: the union of each estimate's top edges by |score| (every one, "
           "weight 1) and a seeded uniform sample of the rest (weight rest / sampled). The label is the **exact circuit**: the edges whose "
           "exact score is at least 0.01 of the clean-corrupted gap. The AUROC is the chance that an edge of the exact circuit "
           "outranks one outside it by |estimate|, over the whole graph (weighted for the sampling); Spearman rho is the weighted "
           "rank agreement of |estimate| and |exact|; intervals are 95% over resamples of the pairs and of the random stratum's edges. "
           "CPR and CMD: MIB's metrics of each estimate's ranking, on the same pairs (in-sample).", ""]  # fmt: skip
    if reduced:
        out += ["**Reduced** to fit the time allowed: " + "; ".join(reduced) + ". The sampled AUROC stays unbiased for the whole "
                "graph; its interval widens with the smaller sample.", ""]  # fmt: skip
    out += [*_table(data["results"]), ""]
    blind = [r for r in data["results"] if any(row.get("hidden_bound") for row in r["rows"])]
    if blind:
        out += ["A random draw pins down only roughly how many of the rest belong to the exact circuit (" + ", ".join(
                f"{r['task']}: {_drawn(r)}" for r in blind) + "): the interval places the edges it cannot rule out beyond its "
                "own estimate (the 95% Clopper-Pearson bound, '+ up to N unseen' above) at both ends of the ranking. The top "
                "stratum's share in the exact circuit and the rank agreement are read; a tight AUROC needs a random stratum "
                "that meets the circuit often.", ""]  # fmt: skip
    out += ["```text"]
    out += [f"{r['task']}: {against_exact_line(row)}" for r in data["results"] for row in r["rows"]] + ["```", ""]
    out += ["What the published figures beside these are measured against differs:", "",
            f"- {PEERS['interpbench']}: the label there is a planted circuit, here it is exact patching of a trained model, "
            "whose circuit nobody planted;",
            f"- {PEERS['mib']}: MIB has no edge labels; CPR and CMD score how faithful the circuits of a ranking are (an "
            "exact ranking there is activation patching of every edge), as the CPR and CMD columns above do for SmolLM2's "
            "estimates.", END]  # fmt: skip
    return "\n".join(out) + "\n"


def kept_section(page: str) -> str:
    """The section as the page holds it (what benchmarks/real_model_page.py keeps when it rewrites the page); '' if none."""
    a, b = page.find(BEGIN), page.find(END)
    return "\n" + page[a : b + len(END)] + "\n" if a >= 0 and b > a else ""


def _write_page(text: str) -> None:
    page = PAGE.read_text(encoding="utf-8")
    a, b = page.find(BEGIN), page.find(END)
    page = page[:a] + text.rstrip("\n") + page[b + len(END) :] if a >= 0 and b > a else page.rstrip("\n") + "\n\n" + text
    PAGE.write_text(page, encoding="utf-8")


def main() -> None:
    import os
    import subprocess

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="ioi,induction")
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=2000)
    p.add_argument("--random", type=int, default=2000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--probe", type=int, default=32, help="edges timed to predict the cost")
    p.add_argument("--budget-min", type=float, default=30.0, help="minutes of exact patching allowed, over all tasks")
    p.add_argument("--deadline", type=lambda t: dt.datetime.combine(dt.date.today(), dt.time.fromisoformat(t), dt.timezone.utc),
                   default=None, help="HH:MM UTC: no exact run is planned past it")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="cpu", help="cuda: every edge exact is --top 70651 --random 0 --workers 1")
    p.add_argument("--n-bootstrap", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", default="/tmp/headlens-real-model-exact")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--page", action="store_true", help="write the docs section and its figures")
    p.add_argument("--json", default=None)
    p.add_argument("--merge", nargs="+", default=None, help="--json files of earlier runs (a task each): their section, no run")
    args = p.parse_args()
    if args.merge:
        parts = [json.loads(Path(f).read_text(encoding="utf-8")) for f in args.merge]
        loads = [min(d["load"][0] for d in parts), max(d["load"][1] for d in parts)]
        data = parts[0] | {"results": [r for d in parts for r in d["results"]], "load": loads}
        _finish(args, data)
        return
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    import torch

    torch.set_num_threads(1 if args.workers > 1 else 2)
    load0 = os.getloadavg()[0]
    # the commit that runs, read at the start (work committed during a long run is not in it)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    model = _load(args)
    from headlens.analyses.circuits.graph import build_graph

    graph = build_graph(model)
    tasks = args.tasks.split(",")
    start, results = time.perf_counter(), []
    for i, name in enumerate(tasks):
        left = args.budget_min * 60 - (time.perf_counter() - start)
        print(f"{name}: {args.pairs} pairs, {len(graph.edges):,} edges", flush=True)
        results.append(run_task(args, model, graph, name, left / (len(tasks) - i)))
    data = {"settings": {k: getattr(args, k) for k in ("pairs", "steps", "top", "random", "workers", "seed", "n_bootstrap")},
            "results": results, "commit": commit, "date": dt.date.today().isoformat(), "load": [load0, os.getloadavg()[0]],
            "device": args.device, "peers": PEERS}  # fmt: skip
    _finish(args, data)


def _finish(args: argparse.Namespace, data: dict[str, Any]) -> None:
    text = section(data)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    if args.page and not args.smoke:
        FIGURES.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        _write_page(text)
        print(f"wrote {PAGE} (section) and {FIGURES}")


if __name__ == "__main__":
    main()
