"""Benchmark: the sink census vs the plain Hugging Face forward over the same tokens.

    python benchmarks/sinks.py [--prompts 48] [--tokens 64] [--batch-size 8] [--repeats 3] [--threads 2] [--device auto] [--dtype float32]

GPT-2-small shape (12 layers x 12 heads, d_model 768), random weights, the census stimuli
(windows of the evaluation text, Gu et al.'s 64 tokens, no BOS; the text holds 90).
Modes (peak memory: each mode alone in its own process, one timed run after a warm-up):
  hf_eager        the floor: transformers GPT2Model (AutoModel of the same folder), eager
                  attention, output_attentions=True: the patterns a user would reduce by hand
  bridge_forward  the bridge's own forward through the blocks, no hooks (beside, not the floor)
  bridge_stop     the bridge's forward stopped where the census stops (after the last layer's
                  attention pattern), no hooks: the census's work without its statistics
  census_alpha    the sink census alone: Gu et al. alpha per (sequence, layer, head)
  census_full     what `headlens sinks` streams in one pass: alpha + secondary sinks
                  (excess attention per position and token) + value-norm shares
Timing: one more process runs the modes in turn, --repeats rounds after a warm-up round, so
that CPU contention from other work hits every mode alike; ratios are medians of the
per-round ratios.  The target is census_full <= 1.3 x hf_eager.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

MODES = ["hf_eager", "bridge_forward", "bridge_stop", "census_alpha", "census_full"]
TARGET = 1.3


def one_mode(args) -> dict:
    import torch

    from headlens.analyses.sinks.stream import stream_sink_stats
    from headlens.analyses.stimuli import eval_text, text_windows
    from headlens.probes.loading import load_model
    from headlens.probes.patch import patched_forward
    from headlens.probes.prompts import TokenBatch, iter_batches

    _common.setup_threads(args.threads)
    device = _common.resolve_device(args.device)
    torch.manual_seed(0)
    model = load_model(model=args.checkpoint, device=device, dtype=args.dtype)
    tokens = text_windows(model.tokenizer, eval_text(), args.tokens, args.prompts, prepend_bos=False)
    n = int(tokens.shape[0])
    batch = TokenBatch(tokens=tokens, lengths=torch.full((n,), tokens.shape[1]), strings=[[]] * n, prepend_bos=False, pad_id=0)
    batches = [(sub.tokens, sub.attention_mask) for _, sub in iter_batches(batch, args.batch_size)]

    def bridge_stop():
        with torch.inference_mode():
            for toks, mask in batches:
                patched_forward(model, toks, stop_after=f"blocks.{model.n_layers - 1}.attn.hook_pattern", attention_mask=mask)

    wanted = MODES if args.mode == "paired" else [args.mode]
    fns = {}
    for mode in wanted:
        if mode == "hf_eager":
            hf = _common.hf_model(args.checkpoint, attn="eager", device=device, dtype=args.dtype)
            fns[mode] = lambda: _common.hf_forward(hf, batches, patterns=True)
        elif mode == "bridge_forward":
            fns[mode] = lambda: _common.bridge_forward(model, batches)
        elif mode == "bridge_stop":
            fns[mode] = bridge_stop
        elif mode == "census_alpha":
            fns[mode] = lambda: stream_sink_stats(model, batch, eps=0.3, batch_size=args.batch_size)
        else:
            fns[mode] = lambda: stream_sink_stats(model, batch, eps=0.3, secondary=True, value_norm=True, batch_size=args.batch_size)
    info = {"device": device, "dtype": args.dtype, "threads": torch.get_num_threads(), "n_sequences": n}
    if args.mode != "paired":
        return {**_common.measure(fns[args.mode], repeats=1, device=device), **info}
    timing = _common.interleaved(fns, repeats=args.repeats, device=device)
    timing["ratios"] = _common.ratios(timing, {"x": "hf_eager"})
    timing["full_vs_stop"] = _common.round_ratio(timing, "census_full", "bridge_stop")
    return {**timing, **info}


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    extra = _common.forwarded(args, ["prompts", "tokens", "batch_size"])
    mem, paired, rows = _common.measure_against_floor(__file__, MODES, extra, floor="hf_eager", target_mode="census_full", target=TARGET)
    print(
        f"sinks benchmark: GPT-2-{args.shape} shape, random weights, {paired['n_sequences']} sequences x {args.tokens} tokens (evaluation "
        f"text, no BOS), batch {args.batch_size}, {paired['device']}, {args.dtype}, {paired['threads']} threads, {args.repeats} "
        "interleaved rounds"
    )
    for line in _common.table(
        rows,
        floor_note="ratio: median of per-round ratios to hf_eager; memory: each mode alone (" + mem["census_full"].get("memory", "?") + ")",
    ):
        print(line)
    print(f"census_full / bridge_stop = {paired['full_vs_stop']:.3f}  (the hooks' own cost: same layers run, no statistics)")
    _common.write_json(args.json, {"memory": mem, "timing": paired, "rows": rows})


if __name__ == "__main__":
    main()
