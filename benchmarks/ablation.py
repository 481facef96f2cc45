"""Benchmark: the exact single-head ablation table vs a naive one-forward-per-head loop.

    python benchmarks/ablation.py [--metric loss|logit-diff] [--windows 2] [--window 64] [--batch-size 8]
        [--heads-per-forward N] [--threads N] [--device auto] [--dtype float32]

GPT-2-small shape (12 layers x 12 heads, d_model 768, vocabulary 50,257), random weights,
zero ablation.  ``--metric loss`` (default): windows of the built-in evaluation text;
``--metric logit-diff``: ``--windows`` IOI-style prompts built from single-token names
("When Mary and John went to the store, John gave a drink to" -> " Mary" vs " John"), where
only two logits at one position are read.  Modes, each in its own process (so peak memory is
its own):
  forward      the floor and the forward-pass unit: a plain transformers GPT2LMHeadModel
               (AutoModelForCausalLM of the same folder, SDPA attention: no patterns are needed)
               to the logits over the same windows and masks
  bridge       the bridge's own forward over the windows, no head ablated (beside, not the floor)
  naive        the table the naive way: for each of the 144 heads, one full forward with the head ablated
  exact        headlens' exact table (analyses.ablation.run_ablation without attribution):
               baseline pass storing each layer's residual, then every head's ablation runs
               only blocks L..11, several heads of a layer per forward (one per batch copy)
  attribution  the first-order estimate for all heads (gate gradients: one forward + backward)
The target is exact / naive <= 0.6.  The script also checks that both tables agree.

With the loss metric every ablation must redo the unembedding and log-softmax over the whole
vocabulary (about 5.5 blocks' worth of multiply-adds per token for GPT-2 small), which no exact
method can share: the work ratio is (5.5 + 6.5) / (5.5 + 12) = 0.69 (6.5 = mean number of blocks
run from the ablated layer on), and only batching efficiency takes the time below that.
logit-diff reads two logits at one position, so its ratio approaches 6.5 / 12 = 0.54.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common


def _timed(fn, *, device: str, warmup=None) -> dict:
    """Warm up with ``warmup`` (cheap), then time ``fn`` once; peak memory as in _common.measure."""
    import torch

    if warmup is not None:
        warmup()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    result = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if device.startswith("cuda"):
        peak, kind = (torch.cuda.max_memory_allocated() - base) / 2**20, "cuda_peak_alloc_MiB"
    else:
        peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_peak_rss_MiB"
    return {"median_s": seconds, "times_s": [seconds], "peak_MiB": peak, "extra_MiB": float("nan"), "memory": kind, "result": result}


def _ioi_task(model, n: int):
    from headlens.analyses.measure.evalset import TaskItem, task_eval_set
    from headlens.analyses.stimuli import FEMALE_NAMES, MALE_NAMES

    items = []
    for i in range(n):
        a, b = FEMALE_NAMES[i % len(FEMALE_NAMES)], MALE_NAMES[i % len(MALE_NAMES)]
        items.append(TaskItem(prompt=f"When{a} and{b} went to the store,{b} gave a drink to", correct=a, incorrect=b))
    return task_eval_set(model.tokenizer, items, prepend_bos=True, n_ctx=model.n_ctx)


def one_mode(args) -> dict:
    import torch

    from headlens.analyses.ablation.gradients import attribution_estimates
    from headlens.analyses.ablation.study import AblationConfig, ablated_values, baseline_pass, naive_single_head_values, run_ablation
    from headlens.analyses.measure.evalset import text_eval_set
    from headlens.analyses.stimuli import eval_text
    from headlens.probes.loading import load_model

    _common.setup_threads(args.threads)
    torch.manual_seed(0)
    model = load_model(model=args.checkpoint, device=_common.resolve_device(args.device), dtype=args.dtype)
    if args.metric == "loss":
        data = text_eval_set(model.tokenizer, eval_text(), n_windows=args.windows, window=args.window, prepend_bos=True, n_ctx=model.n_ctx)
    else:
        data = _ioi_task(model, args.windows)
    dev = str(model.device)
    heads = [(layer, h) for layer in range(model.n_layers) for h in range(model.n_heads)]
    warm = lambda: ablated_values(model, data, [], batch_size=args.batch_size)  # noqa: E731

    if args.mode == "forward":
        hf = _common.hf_model(args.checkpoint, attn="sdpa", device=dev, dtype=args.dtype, lm=True)
        mask = (torch.arange(data.tokens.shape[1])[None, :] < data.lengths[:, None]).long()
        batches = [(data.tokens[i : i + args.batch_size], mask[i : i + args.batch_size]) for i in range(0, len(data), args.batch_size)]
        res = _common.measure(lambda: _common.hf_forward(hf, batches, patterns=False), repeats=3, device=dev)
    elif args.mode == "bridge":
        res = _common.measure(warm, repeats=3, device=dev)
    elif args.mode == "naive":

        def naive():
            base = baseline_pass(model, data, batch_size=args.batch_size)
            return (naive_single_head_values(model, data, heads, base, batch_size=args.batch_size) - base.values).double().mean(1).tolist()

        res = _timed(naive, device=dev, warmup=warm)
    elif args.mode == "exact":
        cfg = AblationConfig(method="zero", batch_size=args.batch_size, attribution=False, heads_per_forward=args.heads_per_forward)

        def exact():
            out = run_ablation(model, data, cfg)
            return {"delta": out.table["delta"].tolist(), "info": out.info}

        res = _timed(exact, device=dev, warmup=warm)
    else:
        res = _common.measure(lambda: attribution_estimates(model, data, batch_size=args.batch_size), repeats=2, device=dev)
    res.update(device=dev, dtype=args.dtype, threads=torch.get_num_threads(), n_tokens=data.n_tokens)
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    p.add_argument("--metric", choices=["loss", "logit-diff"], default="loss")
    p.add_argument("--windows", type=int, default=2, help="evaluation windows (items; prompts for logit-diff)")
    p.add_argument("--window", type=int, default=64, help="tokens per window, BOS included")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--heads-per-forward", type=int, default=None, help="exact mode: heads ablated per forward (default: auto)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice); 1 is steadier on a shared machine")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--shape", default="small", choices=sorted(_common.SHAPES), help="model shape (tiny: smoke tests only)")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "headlens-bench"))
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    ckpt = _common.checkpoint(Path(args.cache), shape=args.shape)
    extra = [
        "--checkpoint",
        str(ckpt),
        "--windows",
        str(args.windows),
        "--window",
        str(args.window),
        "--batch-size",
        str(args.batch_size),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--threads",
        str(args.threads),
        "--metric",
        args.metric,
    ]
    if args.heads_per_forward:
        extra += ["--heads-per-forward", str(args.heads_per_forward)]
    modes = ["forward", "bridge", "naive", "exact", "attribution"]
    r = _common.run_modes(__file__, modes, extra)
    fw = r["forward"]
    naive_delta, exact_delta = r["naive"]["result"], r["exact"]["result"]["delta"]
    worst = max(abs(a - b) for a, b in zip(naive_delta, exact_delta, strict=True))
    info = r["exact"]["result"]["info"]
    print(
        f"ablation benchmark: GPT-2-{args.shape} shape ({len(exact_delta)} heads, vocab 50257), random weights, {args.windows} "
        f"{'windows' if args.metric == 'loss' else 'prompts'} x {args.window if args.metric == 'loss' else 'about 16'} tokens"
        f" ({fw['n_tokens']} tokens), zero ablation, {args.metric} metric, batch {args.batch_size}, {fw['device']}, {args.dtype}, "
        f"{fw['threads']} threads"
    )
    print(
        f"{'mode':<13}{'seconds':>10}{'forwards':>10}{'peak MiB':>10}  ({fw['memory']}; forwards = seconds / one plain Hugging Face "
        "forward to the logits over the windows)"
    )
    for m in modes:
        print(f"{m:<13}{r[m]['median_s']:>10.3f}{r[m]['median_s'] / fw['median_s']:>10.1f}{r[m]['peak_MiB']:>10.0f}")
    print(
        f"ratio exact / naive = {r['exact']['median_s'] / r['naive']['median_s']:.3f}  (target <= 0.6); prefix reuse "
        f"{info['prefix_reuse']}, {info['heads_per_forward']} heads per forward"
    )
    print(f"attribution = {r['attribution']['median_s'] / fw['median_s']:.1f} plain forwards for all {len(exact_delta)} heads")
    print(f"largest |delta(exact) - delta(naive)| = {worst:.2e}")


if __name__ == "__main__":
    main()
