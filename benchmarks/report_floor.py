"""Benchmark: a lower bound on the time of the full report's exact tables on this machine (issue 23 item 4).

    python benchmarks/report_floor.py [--layers 12] [--heads 12] [--d-model 768] [--vocab 50257] [--threads 2] [--repeats 5]

The zero- and mean-ablation tables, and the pruning curve with its random control, are defined
by model runs to the next-token loss: each head ablated alone is one run to the loss from its
layer on, each pruning step one forward and backward of the pruned model, each random-order
point one run from the first layer its mask changed.  No exact method skips that work; it can
only share what the runs have in common, which headlens already does (the prefix below the
ablated layer, several heads per forward, each step's value read off the pass that ranks the
next, each random mask continued from the last one's residuals).

This script counts the matrix-multiply FLOPs of that work for a GPT-2-shaped model on the
report's evaluation set (16 windows of 128 tokens): per token a block is ``24 d^2`` (Q, K, V and
output projections, MLP in and out) plus ``4 n d`` for the attention over ``n`` keys (``n`` = 64
on average in a causal 128-token window); the unembedding is ``2 d V``; a backward pass to the
activations only (the weights frozen) is as many FLOPs as its forward.  The pruning schedule and
the random orders are those of :mod:`headlens.analyses.ablation.pruning` (same seeds).  It times
``torch.matmul`` on the model's own shapes (2,048 tokens against each weight matrix) and divides
the FLOPs by the **best** of those rates: every other operation (norms, softmax, the loss's
log-softmax over the vocabulary, GELU, hooks) is left out, so the result is a strict lower bound
for these three stages; the census, the sinks, the examples and the design stage come on top.
It prints that bound beside the whole report's target, 900 s on 2 CPUs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

from _common import setup_threads
from headlens.analyses.ablation.pruning import PruneConfig, random_order, step_size

TARGET_S = 900.0
N_WINDOWS, WINDOW = 16, 128  # the report's evaluation set (ReportSettings.eval_data)


def pruning_counts(n_layers: int, n_heads: int, config: PruneConfig) -> tuple[int, list[int]]:
    """``(gradient passes, first layer of each random-order run)`` the report's pruning needs."""
    total = n_layers * n_heads
    sizes, removed = [], 0
    while removed < total:
        n = step_size(config, total, removed, total)
        sizes.append(n)
        removed += n
    grid = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    starts = []
    for s in range(config.random_seeds):
        order = random_order(n_layers, n_heads, config.seed, s)
        starts.append(0)  # an order's first mask runs the whole model
        starts += [min(layer for layer, _ in order[grid[i - 1] : grid[i]]) for i in range(2, len(grid))]
    # step 0 and every step but the last rank the next step's heads (one forward and backward each); the last is a forward
    return len(sizes), starts


def best_rate(d: int, vocab: int, tokens: int, repeats: int) -> tuple[float, dict[str, float]]:
    """The best fp32 matmul rate (FLOP/s) over the model's weight shapes, and each shape's."""
    gen = torch.Generator().manual_seed(0)
    shapes = {"qkv": (d, 3 * d), "mlp_in": (d, 4 * d), "mlp_out": (4 * d, d), "unembed": (d, vocab)}
    rates = {}
    for name, (k, n) in shapes.items():
        x, w = torch.randn(tokens, k, generator=gen), torch.randn(k, n, generator=gen)
        _ = x @ w  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _ = x @ w
            times.append(time.perf_counter() - t0)
        rates[name] = 2 * tokens * k * n / min(times)
    return max(rates.values()), rates


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=_positive, default=12)
    ap.add_argument("--heads", type=_positive, default=12)
    ap.add_argument("--d-model", type=_positive, default=768)
    ap.add_argument("--vocab", type=_positive, default=50257)
    ap.add_argument("--threads", type=_positive, default=2)
    ap.add_argument("--repeats", type=_positive, default=5)
    args = ap.parse_args()
    setup_threads(args.threads)
    L, H, d, V = args.layers, args.heads, args.d_model, args.vocab
    T = N_WINDOWS * WINDOW
    # each row: (tokens x blocks run, tokens x unembeddings run)
    forward = (T * L, T)
    table = (sum(H * T * (L - layer) for layer in range(L)) + T * L, H * T * L + T)  # each head alone from its layer on; the baseline
    grad_passes, starts = pruning_counts(L, H, PruneConfig())
    ranking = ((2 * grad_passes + 1) * forward[0], (2 * grad_passes + 1) * forward[1])  # forward + backward per pass; the last forward
    random = (sum(T * (L - s) for s in starts), T * len(starts))
    rate, rates = best_rate(d, V, T, args.repeats)
    n_keys = WINDOW // 2  # keys per query on average in a causal window
    block_flops, head_flops = 24 * d * d + 4 * n_keys * d, 2 * d * V
    # per token at each shape's own rate: Q, K, V and output projections at the qkv rate, the MLP at its two rates
    block_s = 8 * d * d / rates["qkv"] + 8 * d * d / rates["mlp_in"] + 8 * d * d / rates["mlp_out"] + 4 * n_keys * d / rate
    head_s = head_flops / rates["unembed"]
    print(
        f"shape {L} layers x {H} heads, d_model {d}, vocabulary {V}; {args.threads} threads; evaluation set {N_WINDOWS} x {WINDOW} tokens"
    )
    print(
        f"fp32 matmul on the model's shapes ({T:,} tokens, best of {args.repeats}): "
        + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in rates.items())
        + " GFLOP/s"
    )
    rows = [
        (f"zero-ablation table ({H * L} runs from each head's layer, and the baseline)", table),
        ("mean-ablation table (the same runs)", table),
        (f"pruning: {grad_passes} ranking passes (forward + backward) and the last step's forward", ranking),
        (f"pruning: {len(starts)} random-order runs from their first changed layer", random),
    ]
    print(f"  {'':84s} {'TFLOP':>6s}  {'best rate':>9s}  {'own rates':>9s}")
    total = [0.0, 0.0, 0.0]
    for name, (blocks, heads) in rows:
        flops = blocks * block_flops + heads * head_flops
        own = blocks * block_s + heads * head_s
        total = [total[0] + flops, total[1] + flops / rate, total[2] + own]
        print(f"  {name:84s} {flops / 1e12:6.1f}  {flops / rate:7.0f} s  {own:7.0f} s")
    print(f"  {'these three stages':84s} {total[0] / 1e12:6.1f}  {total[1]:7.0f} s  {total[2]:7.0f} s")
    print(
        "  (matrix multiplies only: at the best rate measured on any of the shapes, a strict lower bound; at each shape's own rate,"
        " still without norms, softmax, GELU and the loss)"
    )
    print(
        f"target: the whole report <= {TARGET_S:.0f} s; these three stages alone need >= {total[1]:.0f} s here: "
        + ("the target is below the exact work's floor" if total[1] > TARGET_S else f"{TARGET_S - total[1]:.0f} s left for the rest")
    )


if __name__ == "__main__":
    main()
