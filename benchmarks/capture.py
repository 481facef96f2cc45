"""Benchmark: capture all attention patterns vs a plain forward, same token batches.

    python benchmarks/capture.py [--prompts 16] [--tokens 256] [--batch-size 8] [--repeats 3] [--device auto] [--dtype float32]

GPT-2-small shape (12 layers x 12 heads, d_model 768), random weights, random tokens.
Peak memory: each mode alone in its own process.  Timing: one more process runs the modes in
turn, --repeats rounds after a warm-up round, so contention hits them alike; ratios are
medians of per-round ratios.  Modes:
  forward_logits  plain forward to the logits (what model(tokens) costs)
  forward_blocks  plain forward through all 12 blocks, no unembedding (the same work capture does)
  capture_all     headlens capture of hook_pattern for every layer and head (kept on the CPU)
The target is capture_all / forward_blocks <= 1.2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402


def one_mode(args) -> dict:
    import torch

    from headlens.probes.capture import capture, run_forward
    from headlens.probes.config import CaptureConfig
    from headlens.probes.loading import load_model
    from headlens.probes.prompts import TokenBatch, iter_batches

    torch.manual_seed(0)
    model = load_model(model=args.checkpoint, device=args.device, dtype=args.dtype)
    tokens = torch.randint(0, 50256, (args.prompts, args.tokens))
    batch = TokenBatch(tokens=tokens, lengths=torch.full((args.prompts,), args.tokens), strings=[[]] * args.prompts, prepend_bos=False, pad_id=0)
    chunks = iter_batches(batch, args.batch_size)
    dev = str(model.device)

    def forward(stop):
        with torch.inference_mode():
            for _, sub in chunks:
                run_forward(model, sub.tokens, stop_at_layer=stop, return_type="logits" if stop is None else None)

    fns = {
        "forward_logits": lambda: forward(None),
        "forward_blocks": lambda: forward(model.n_layers),
        "capture_all": lambda: capture(model, batch, CaptureConfig(what=("pattern",), prepend_bos=False, batch_size=args.batch_size)),
    }
    if args.mode != "paired":
        res = _common.measure(fns[args.mode], repeats=1, device=dev)
        res.update(device=dev, dtype=args.dtype, threads=torch.get_num_threads())
        return res
    timing = _common.interleaved(fns, repeats=args.repeats, device=dev)
    timing["ratio_blocks"] = _common.round_ratio(timing, "capture_all", "forward_blocks")
    timing["ratio_logits"] = _common.round_ratio(timing, "capture_all", "forward_logits")
    return timing


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    extra = _common.forwarded(args, ['prompts', 'tokens', 'batch_size'])
    modes = ["forward_logits", "forward_blocks", "capture_all"]
    mem = _common.run_modes(__file__, modes, extra)
    paired = _common.run_modes(__file__, ["paired"], extra)["paired"]
    first = mem[modes[0]]
    print(f"capture benchmark: GPT-2-small shape, random weights, {args.prompts} prompts x {args.tokens} tokens, batch {args.batch_size}, {first['device']}, {args.dtype}, {first['threads']} threads, {args.repeats} interleaved rounds")
    print(f"{'mode':<16}{'median s':>10}{'peak MiB':>10}  ({first['memory']}, each mode alone)")
    for m in modes:
        print(f"{m:<16}{paired['medians_s'][m]:>10.3f}{mem[m]['peak_MiB']:>10.0f}")
    print(f"ratio capture_all / forward_blocks = {paired['ratio_blocks']:.3f}  (target <= 1.2; median of per-round ratios)")
    print(f"ratio capture_all / forward_logits = {paired['ratio_logits']:.3f}")


if __name__ == "__main__":
    main()
