"""Benchmark: the sink census vs plain forward passes over the same tokens.

    python benchmarks/sinks.py [--prompts 48] [--tokens 64] [--batch-size 8] [--repeats 3] [--device auto] [--dtype float32]

GPT-2-small shape (12 layers x 12 heads, d_model 768), random weights, the census stimuli
(windows of the evaluation text, Gu et al.'s 64 tokens, no BOS; the text holds 90).
Modes (peak memory: each mode alone in its own process, one timed run after a warm-up):
  forward_logits  plain forward to the logits (what model(tokens) costs; the bridge computes
                  the logits even with return_type=None or stop_at_layer=n_layers)
  forward_stop    a plain forward that stops where the census stops (after the last layer's
                  attention pattern): the same work as the census without its hooks
  census_alpha    the sink census alone: Gu et al. alpha per (sequence, layer, head)
  census_full     what `headlens sinks` streams in one pass: alpha + secondary sinks
                  (excess attention per position and token) + value-norm shares
Both census modes stop the pass right after the last layer's attention pattern.
Timing: one more process runs the three modes in turn, ``--repeats`` rounds after a warm-up
round, so that CPU contention from other work hits every mode alike; the ratios are medians of
the per-round ratios.  The target is census_full / forward_logits <= 1.3.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402


def one_mode(args) -> dict:
    import torch

    from headlens.analyses.sinks.stream import run_to_last_pattern, stream_sink_stats
    from headlens.analyses.stimuli import eval_text, text_windows
    from headlens.probes.loading import load_model
    from headlens.probes.prompts import TokenBatch, iter_batches

    torch.manual_seed(0)
    model = load_model(model=args.checkpoint, device=args.device, dtype=args.dtype)
    tokens = text_windows(model.tokenizer, eval_text(), args.tokens, args.prompts, prepend_bos=False)
    batch = TokenBatch(tokens=tokens, lengths=torch.full((args.prompts,), args.tokens), strings=[[]] * args.prompts, prepend_bos=False, pad_id=0)
    chunks = iter_batches(batch, args.batch_size)
    dev = str(model.device)

    def forward():
        with torch.inference_mode():
            for _, sub in chunks:
                model.bridge(sub.tokens.to(model.device), return_type="logits")

    def forward_same_stop():
        with torch.inference_mode():
            for _, sub in chunks:
                run_to_last_pattern(model, sub.tokens, [])

    fns = {
        "forward_logits": forward,
        "forward_stop": forward_same_stop,
        "census_alpha": lambda: stream_sink_stats(model, batch, eps=0.3, batch_size=args.batch_size),
        "census_full": lambda: stream_sink_stats(model, batch, eps=0.3, secondary=True, value_norm=True, batch_size=args.batch_size),
    }
    if args.mode != "paired":
        res = _common.measure(fns[args.mode], repeats=1, device=dev)
        res.update(device=dev, dtype=args.dtype, threads=torch.get_num_threads())
        return res
    timing = _common.interleaved(fns, repeats=args.repeats, device=dev)
    return {
        "median_s": timing["medians_s"]["census_full"],
        "medians_s": timing["medians_s"],
        "times_s": timing["times_s"],
        "ratio": {name: _common.round_ratio(timing, name, "forward_logits") for name in fns},
        "peak_MiB": float("nan"),
        "device": dev,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    extra = _common.forwarded(args, ['prompts', 'tokens', 'batch_size'])
    modes = ["forward_logits", "forward_stop", "census_alpha", "census_full"]
    mem = _common.run_modes(__file__, modes, extra)
    paired = _common.run_modes(__file__, ["paired"], extra)["paired"]
    first = mem[modes[0]]
    print(f"sinks benchmark: GPT-2-small shape, random weights, {args.prompts} sequences x {args.tokens} tokens (evaluation text, no BOS), batch {args.batch_size}, {first['device']}, {args.dtype}, {first['threads']} threads, {args.repeats} interleaved rounds")
    print(f"{'mode':<16}{'median s':>10}{'vs forward':>12}{'peak MiB':>10}  ({first['memory']}, each mode alone)")
    for m in modes:
        print(f"{m:<16}{paired['medians_s'][m]:>10.3f}{paired['ratio'][m]:>12.3f}{mem[m]['peak_MiB']:>10.0f}")
    print(f"ratio census_full / forward_logits = {paired['ratio']['census_full']:.3f}  (target <= 1.3; median of per-round ratios)")
    stop = _common.round_ratio(paired, "census_full", "forward_stop")
    print(f"ratio census_full / forward_stop = {stop:.3f}  (the hooks' own cost: same layers run, no statistics)")


if __name__ == "__main__":
    main()
