"""Benchmark: exact edge scores per second in one process and on 1 and 2 Ray workers (issue 49 item 3).

    python benchmarks/exact_ray.py [--shape 4,8,128] [--pairs 8] [--edges-per-chunk 16] [--rounds 3] [--json out.json]
    python benchmarks/exact_ray.py --device cuda --modes one,ray1     # one worker on a GPU (benchmarks/gpu.sh)
    python benchmarks/exact_ray.py --smoke                            # tiny, seconds: a check, not a measurement

Every edge of a GPT-2-shaped random checkpoint (``--shape`` layers,heads,d_model) is scored exactly on the built-in
induction task's pairs, in the same chunks (:func:`~headlens.analyses.circuits.exact_chunks.exact_scores_parallel`),
by each mode in turn, ``--rounds`` interleaved rounds (the order rotates; the machine's load hits every mode alike):

* ``one``: the chunks one after another in this process, one torch thread;
* ``ray1`` / ``ray2``: on 1 / 2 workers of a local Ray (2 CPUs, started once for every round), one thread each.

Each mode's figures: ``wall_s`` (the call, the workers' start and model load included), ``edges_per_s`` over it, and
``steady_edges_per_s``: cells (edge x pair) finished between the first chunk back and the last, over that time,
divided by the pairs (the scoring rate once the workers run, start-up left out), with ``steady_cores``: the CPU
seconds the scoring processes (this one, or the workers) used over that window per second, what the machine gave
them. The speed-up is the median of per-round ratios against ``one``. Memory: each worker's peak resident set
(``VmHWM`` of ``ray::Worker`` processes, read as the last chunk comes back) and this process's before and after
``one``. The 1-minute load average is printed at the start and end of each round: on a shared machine a ratio means
little without it. Every mode's scores are checked equal to ``one``'s (bit for bit on the CPU).

The paper estimate (printed last, for ``--estimate-pairs`` pairs): forward equivalents per pair of every edge, ``F =
sum_e (L - l_e) / L`` (an edge read at layer ``l`` patches a forward from block ``l``; logits edges from the last
block: ``1 / L``), counted from the graph's shape (:func:`forward_equivalents`, checked against the measured run's
``forwards``), times the pairs, times the measured cost of one pair's forward, over the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import rss_mib

MODES = ("one", "ray1", "ray2")


def forward_equivalents(n_layers: int, n_heads: int, n_kv: int, *, mlp_reads_heads: bool = True) -> float:
    """Forward equivalents per pair of exact scores of every edge of the graph (``build_graph``'s edges), each edge's
    patched forward from its reader's block (module doc); ``n_kv`` key-value heads per layer."""
    total = 0.0
    for layer in range(n_layers):
        senders = 1 + layer * (n_heads + 1)
        edges = (n_heads + 2 * n_kv) * senders + senders + (n_heads if mlp_reads_heads else 0)
        total += edges * (n_layers - layer) / n_layers
    return total + (1 + n_layers * (n_heads + 1)) / n_layers  # logits edges: the last block


def n_edges(n_layers: int, n_heads: int, n_kv: int, *, mlp_reads_heads: bool = True) -> int:
    per_layer = sum((n_heads + 2 * n_kv + 1) * (1 + lay * (n_heads + 1)) + (n_heads if mlp_reads_heads else 0) for lay in range(n_layers))
    return per_layer + 1 + n_layers * (n_heads + 1)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_memory() -> list[dict[str, float]]:
    """Peak and current resident set (MiB) of this user's pool workers (``ray::Worker`` processes)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
            if not cmd.startswith("ray::Worker") or os.stat(f"/proc/{entry.name}").st_uid != os.getuid():
                continue
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        mib = {k: int(fields[k].split()[0]) / 1024 for k in ("VmHWM", "VmRSS")}
        out.append({"pid": int(entry.name), "hwm_MiB": mib["VmHWM"], "rss_MiB": mib["VmRSS"], "cpu_s": _cpu_s(int(entry.name))})
    return out


def _run(mode: str, loaded: Any, task: Any, graph: Any, args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """One mode's call, timed; its figures and scores."""
    import torch

    from headlens.analyses.circuits.exact_chunks import exact_scores_parallel
    from headlens.probes.cluster import Cluster

    cluster = None
    if mode != "one":
        gpus = 1.0 if args.device == "cuda" else 0.0
        cluster = Cluster(workers=int(mode[-1]), threads=1, gpus_per_worker=gpus)
    ticks: list[tuple[float, int, float]] = []  # (time, cells done, CPU seconds of the scoring processes)
    memory: list[dict[str, float]] = []

    def progress(stage: str, done: int, total: int) -> None:
        workers = _worker_memory() if mode != "one" and done else []
        ticks.append((time.perf_counter(), done, sum(w["cpu_s"] for w in workers) if workers else time.process_time()))
        if done == total and mode != "one":
            memory.extend(workers)

    rss0 = rss_mib()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    pp = exact_scores_parallel(loaded, task, graph, edges_per_chunk=args.edges_per_chunk, cluster=cluster, progress=progress)
    wall = time.perf_counter() - t0
    cells = [tick for tick in ticks if tick[1] > 0]
    (t_a, d_a, c_a), (t_b, d_b, c_b) = cells[0], cells[-1]
    steady = (d_b - d_a) / max(t_b - t_a, 1e-9) / len(task) if len(cells) > 1 else float("nan")
    share = (c_b - c_a) / max(t_b - t_a, 1e-9)  # cores the scoring processes had over that window
    n = len(graph.edges)
    fig = {"mode": mode, "wall_s": round(wall, 3), "edges_per_s": round(n / wall, 2), "steady_edges_per_s": round(steady, 2),
           "steady_cores": round(share, 2),
           "forwards": round(pp.forwards, 1), "workers": memory, "rss_MiB": round(rss0, 1),
           "rss_after_MiB": round(rss_mib(), 1)}  # fmt: skip
    return fig, pp


#: Models of the paper estimate: layers, query heads, key-value heads, body parameters (without the embedding and
#: output head), tokens per pair.  SmolLM2-135M as benchmarks/real_model.py loads it; a 1B Llama (Llama-3.2-1B's shape).
MODELS = {
    "SmolLM2-135M": {"layers": 30, "heads": 9, "kv": 3, "body_params": 106.2e6, "tokens": 31},
    "1B Llama (Llama-3.2-1B shape)": {"layers": 16, "heads": 32, "kv": 8, "body_params": 973e6, "tokens": 31},
}
#: The measured per-token forward cost the estimate starts from: GPT-2-small's body (85.1 M parameters), plain HF eager
#: forwards over 1,287,448 tokens in 6.2 s on an H200 in float32 (docs/benchmarks.md, census_large): FLOP/s achieved.
GPU_FLOPS = 2 * 85.1e6 * 1_287_448 / 6.2
#: SmolLM2-135M's forward of 8 pairs of 31 tokens on this 2-core machine, 2 threads, quiet (docs/benchmarks.md,
#: benchmarks/real_model.py: 0.544 s), per pair: the CPU figure of the estimate (a 1B model's scaled by its body).
CPU_ROW_S = 0.544 / 8


def estimate(pairs: int, gpus: int) -> list[dict[str, Any]]:
    """Time of exact scores of every edge: ``F x pairs`` rows (:func:`forward_equivalents`), each ``2 x body params x
    tokens`` FLOP at :data:`GPU_FLOPS`, over ``gpus`` GPUs; and on this 2-core machine at :data:`CPU_ROW_S` a row
    (scaled by the body's parameters).  The capture forwards (two per pair and chunk) are left out: a few per cent."""
    rows = []
    smol = MODELS["SmolLM2-135M"]["body_params"]
    for name, m in MODELS.items():
        f = forward_equivalents(m["layers"], m["heads"], m["kv"])
        row_s = 2 * m["body_params"] * m["tokens"] / GPU_FLOPS
        rows.append({"model": name, "edges": n_edges(m["layers"], m["heads"], m["kv"]), "forward_equivalents_per_pair": round(f, 1),
                     "pairs": pairs, "gpu_row_ms": round(row_s * 1e3, 3), "gpus": gpus, "gpu_s": round(f * pairs * row_s / gpus, 1),
                     "cpu_here_h": round(f * pairs * CPU_ROW_S * m["body_params"] / smol / 3600, 1)})  # fmt: skip
    return rows


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--shape", default="4,8,128", help="layers,heads,d_model of the GPT-2-shaped checkpoint")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--edges-per-chunk", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--estimate-pairs", type=int, default=16)
    p.add_argument("--cache", default="/tmp/headlens-bench")
    p.add_argument("--json", default=None)
    p.add_argument("--smoke", action="store_true", help="2 layers x 4 heads x 64, 4 pairs, 1 round: a check, not a measurement")
    args = p.parse_args(argv)
    if args.smoke:
        args.shape, args.pairs, args.rounds, args.edges_per_chunk = "2,4,64", 4, 1, 32
    return args


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from headlens.analyses.circuits.graph import build_graph
    from headlens.analyses.patching.builtin import builtin_task
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint
    from headlens.probes.loading import load_model

    n_layer, n_head, d_model = (int(x) for x in args.shape.split(","))
    folder = Path(args.cache) / f"exact-ray-{n_layer}x{n_head}x{d_model}"
    if not (folder / "config.json").is_file():
        build_tiny_checkpoint(folder, TinySpec(n_layer=n_layer, n_head=n_head, d_model=d_model, n_ctx=128, seed=0))
    loaded = load_model(model=str(folder), device=args.device)
    return loaded, build_graph(loaded), builtin_task(loaded, "induction", n=args.pairs, seed=0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import contextlib

    import numpy as np

    from headlens.probes.cluster.session import ray_session

    args = _args(argv)
    modes = args.modes.split(",")
    loaded, graph, task = _setup(args)
    outside = ("wte", "wpe", "lm_head")  # the embedding and output head: not the body a patched forward runs
    body = sum(p.numel() for n, p in loaded.bridge.original_model.named_parameters() if not any(o in n for o in outside))
    print(f"{len(graph.edges)} edges x {len(task)} pairs of {task.clean.shape[1]} tokens; chunks of {args.edges_per_chunk} edges; "
          f"body {body / 1e6:.2f} M parameters; {os.cpu_count()} CPUs")  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    reference = None
    on_ray = any(m != "one" for m in modes)
    with ray_session(None, 2) if on_ray else contextlib.nullcontext():
        for r in range(args.rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            load0 = os.getloadavg()[0]
            for mode in order:
                fig, pp = _run(mode, loaded, task, graph, args)
                if reference is None:
                    reference = pp
                same = np.array_equal(pp.values, reference.values)
                assert same or (args.device != "cpu" and np.allclose(pp.values, reference.values, atol=1e-6)), f"{mode}: scores differ"
                fig["equal_bits"] = bool(same)
                results[mode].append(fig)
                mem = ", ".join(f"{w['hwm_MiB']:.0f}" for w in fig["workers"])
                print(f"round {r} {mode}: {fig['wall_s']:.1f} s, {fig['edges_per_s']:.1f} edges/s, steady {fig['steady_edges_per_s']:.1f}"
                      f" on {fig['steady_cores']:.2f} cores"
                      + (f", workers' peak RSS {mem} MiB" if mem else f", RSS {fig['rss_after_MiB']:.0f} MiB"), flush=True)  # fmt: skip
            print(f"round {r}: load average {load0:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)
    return _summary(results, modes, graph, task, loaded, body, args)


def _summary(results: dict, modes: list[str], graph: Any, task: Any, loaded: Any, body: int, args: argparse.Namespace) -> dict[str, Any]:
    summary: dict[str, Any] = {"edges": len(graph.edges), "pairs": len(task), "tokens": int(task.clean.shape[1]), "modes": {}}
    for mode in modes:
        rs = results[mode]
        summary["modes"][mode] = {"wall_s": statistics.median(x["wall_s"] for x in rs),
                                  "steady_edges_per_s": statistics.median(x["steady_edges_per_s"] for x in rs)}  # fmt: skip
        if "one" in results and mode != "one":
            for key in ("wall_s", "steady_edges_per_s"):
                ratios = [(o[key] / x[key]) if key == "wall_s" else (x[key] / o[key]) for o, x in zip(results["one"], rs, strict=True)]
                summary["modes"][mode][f"speedup_{key}"] = round(statistics.median(ratios), 3)
        print(f"{mode}: {json.dumps(summary['modes'][mode])}")
    f = forward_equivalents(loaded.n_layers, loaded.n_heads, loaded.n_kv_heads)
    measured = results["one"][0]["forwards"] if "one" in results else None
    print(f"forward equivalents per pair, counted {f:.1f}, measured {measured} (two capture forwards per chunk beside)")
    if "one" in results:
        row_s = summary["modes"]["one"]["wall_s"] / (f * len(task))
        print(f"one row of one pair (1 thread, here): {row_s * 1e3:.2f} ms")
    summary["estimate"] = estimate(args.estimate_pairs, 8)
    for row in summary["estimate"]:
        print("estimate: " + json.dumps(row))
    summary["runs"] = results
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
