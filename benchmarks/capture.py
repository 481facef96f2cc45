"""Benchmark: capture all attention patterns vs the plain Hugging Face forward, same token batches.

    python benchmarks/capture.py [--prompts 16] [--tokens 256] [--batch-size 8] [--repeats 3] [--threads 2]
        [--device auto] [--dtype float32]

GPT-2-small shape (12 layers x 12 heads, d_model 768), random weights, random tokens.
Peak memory: each mode alone in its own process.  Timing: one more process runs the modes in
turn, --repeats rounds after a warm-up round, so contention hits them alike; ratios are
medians of per-round ratios.  Modes:
  hf_eager        the floor: transformers GPT2Model (AutoModel of the same folder), eager
                  attention, output_attentions=True: the patterns of every layer, without headlens
  bridge_forward  the bridge's own forward through the 12 blocks, no hooks (beside, not the floor)
  capture_all     headlens capture of hook_pattern for every layer and head (kept on the CPU)
The target is capture_all <= 1.2 x hf_eager.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

MODES = ["hf_eager", "bridge_forward", "capture_all"]
TARGET = 1.2


def one_mode(args) -> dict:
    import torch

    from headlens.probes.capture import capture
    from headlens.probes.config import CaptureConfig
    from headlens.probes.loading import load_model
    from headlens.probes.prompts import TokenBatch, iter_batches

    _common.setup_threads(args.threads)
    device = _common.resolve_device(args.device)
    torch.manual_seed(0)
    model = load_model(model=args.checkpoint, device=device, dtype=args.dtype)
    tokens = torch.randint(0, 50256, (args.prompts, args.tokens))
    batch = TokenBatch(
        tokens=tokens, lengths=torch.full((args.prompts,), args.tokens), strings=[[]] * args.prompts, prepend_bos=False, pad_id=0
    )
    batches = [(sub.tokens, sub.attention_mask) for _, sub in iter_batches(batch, args.batch_size)]
    wanted = MODES if args.mode == "paired" else [args.mode]
    fns = {}
    for mode in wanted:
        if mode == "hf_eager":
            hf = _common.hf_model(args.checkpoint, attn="eager", device=device, dtype=args.dtype)
            fns[mode] = lambda: _common.hf_forward(hf, batches, patterns=True)
        elif mode == "bridge_forward":
            fns[mode] = lambda: _common.bridge_forward(model, batches)
        else:
            fns[mode] = lambda: capture(model, batch, CaptureConfig(what=("pattern",), prepend_bos=False, batch_size=args.batch_size))
    info = {"device": device, "dtype": args.dtype, "threads": torch.get_num_threads()}
    if args.mode != "paired":
        return {**_common.measure(fns[args.mode], repeats=1, device=device), **info}
    timing = _common.interleaved(fns, repeats=args.repeats, device=device)
    timing["ratios"] = _common.ratios(timing, {"x": "hf_eager"})
    return {**timing, **info}


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    extra = _common.forwarded(args, ["prompts", "tokens", "batch_size"])
    mem, paired, rows = _common.measure_against_floor(__file__, MODES, extra, floor="hf_eager", target_mode="capture_all", target=TARGET)
    print(
        f"capture benchmark: GPT-2-{args.shape} shape, random weights, {args.prompts} prompts x {args.tokens} tokens, batch "
        f"{args.batch_size}, {paired['device']}, {args.dtype}, {paired['threads']} threads, {args.repeats} interleaved rounds"
    )
    for line in _common.table(
        rows,
        floor_note="ratio: median of per-round ratios to hf_eager; memory: each mode alone (" + mem["capture_all"].get("memory", "?") + ")",
    ):
        print(line)
    _common.write_json(args.json, {"memory": mem, "timing": paired, "rows": rows})


if __name__ == "__main__":
    main()
