"""Benchmark: the full census (every registered detector) vs the plain Hugging Face forward.

    python benchmarks/census.py [--n-prompts 16] [--repeats 3] [--threads 2] [--device auto] [--dtype float32] [--with-tl]

GPT-2-small shape (12 x 12, d_model 768), random weights.  Same stimuli for every mode: the
census's own token batches (--n-prompts sequences of 50 distinct random tokens repeated
twice, --n-prompts 64-token natural-text windows, the referent sentences; BOS prepended;
batches of 16) with their attention masks.  Peak memory: each mode alone in its own process.
Timing: one more process runs the modes in turn, --repeats rounds after a warm-up round;
ratios are medians of per-round ratios.  Modes:
  hf_eager          the floor of the census: transformers GPT2Model (AutoModel of the same
                    folder, no LM head), attn_implementation="eager", output_attentions=True:
                    what a user runs to get the patterns without headlens
  hf_sdpa           the floor of the streaming census: the same model with SDPA attention,
                    no patterns (the fastest plain forward)
  bridge_forward    TransformerBridge forward through the blocks, no hooks (beside, not a floor)
  census            headlens census, every registered detector, every head (attention="eager")
  census_streaming  the same census with attention="streaming" (patterns recomputed from q/k in
                    query blocks, never the whole [head, q, k] at once); "not available" until
                    headlens has it
  census_x4         (memory only) the census on 4x as many prompts: memory must not grow with prompts
  tl_detect_head    (--with-tl) transformer_lens.head_detector.detect_head looped over the same
                    prompts for its three head types, one prompt per call as its API takes
Targets (issue 14): census <= 1.15 x hf_eager; census_streaming <= 1.5 x hf_sdpa.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

TARGETS = {"census": ("hf_eager", 1.15), "census_streaming": ("hf_sdpa", 1.5)}


class _FixedTokens:
    def __init__(self, bridge, tokens):
        self.bridge, self.tokens, self.cfg = bridge, tokens, bridge.cfg

    def to_tokens(self, seq):
        return self.tokens

    def run_with_cache(self, *args, **kwargs):
        return self.bridge.run_with_cache(*args, **kwargs)


def _config(args, n: int, attention: str):
    return _common.census_config(n_prompts=n, batch_size=16, n_bootstrap=1000, attention=attention)


def one_mode(args) -> dict:
    import torch

    from headlens.analyses.heads.census import build_stimuli, run_census
    from headlens.probes.engine import batch_attention_mask
    from headlens.probes.loading import load_model
    from headlens.probes.prompts import iter_batches

    _common.setup_threads(args.threads)
    device = _common.resolve_device(args.device)
    model = load_model(model=args.checkpoint, device=device, dtype=args.dtype)
    n = args.n_prompts * (4 if args.mode == "census_x4" else 1)
    eager, streaming = _config(args, n, "eager"), _config(args, n, "streaming")
    kinds = {"repeated", "natural", "referent"}
    assert eager is not None  # attention='eager' is always available
    stimuli = build_stimuli(model, eager, kinds)
    batches = [(sub.tokens, batch_attention_mask(sub)) for stim in stimuli.values() for _, sub in iter_batches(stim.batch, 16)]
    wanted = (
        [args.mode]
        if args.mode != "paired"
        else ["hf_eager", "hf_sdpa", "bridge_forward", "census", "census_streaming"] + (["tl_detect_head"] if args.with_tl else [])
    )
    fns = {}
    for mode in wanted:
        if mode == "hf_eager":
            hf_e = _common.hf_model(args.checkpoint, attn="eager", device=device, dtype=args.dtype)
            fns[mode] = lambda: _common.hf_forward(hf_e, batches, patterns=True)
        elif mode == "hf_sdpa":
            hf_s = _common.hf_model(args.checkpoint, attn="sdpa", device=device, dtype=args.dtype)
            fns[mode] = lambda: _common.hf_forward(hf_s, batches, patterns=False)
        elif mode == "bridge_forward":
            fns[mode] = lambda: _common.bridge_forward(model, batches)
        elif mode in ("census", "census_x4"):
            fns[mode] = lambda: run_census(model, eager)
        elif mode == "census_streaming" and streaming is not None:
            fns[mode] = lambda: run_census(model, streaming)
        elif mode == "tl_detect_head":
            fns[mode] = lambda: _tl_loop(model, stimuli)
    info = {
        "device": str(model.device),
        "threads": torch.get_num_threads(),
        "n_prompts": n,
        "n_batches": len(batches),
        "n_tokens": int(sum(int(m.sum()) for _, m in batches)),
    }
    if args.mode != "paired":
        if args.mode not in fns:
            return {"unavailable": True, **info}
        return {**_common.measure(fns[args.mode], repeats=1, device=device), **info}
    timing = _common.interleaved(fns, repeats=args.repeats, device=device)
    floors = {m: TARGETS.get(m, ("hf_eager",))[0] for m in fns}
    floors["hf_sdpa"] = "hf_sdpa"
    timing["ratios"] = _common.ratios(timing, floors)
    timing["floors"] = floors
    if "census_streaming" in fns:
        timing["census_streaming_vs_hf_eager"] = _common.round_ratio(timing, "census_streaming", "hf_eager")
    return {**timing, **info}


def _tl_loop(model, stimuli) -> None:
    from transformer_lens.head_detector import detect_head

    jobs = [("natural", "previous_token_head"), ("repeated", "duplicate_token_head"), ("repeated", "induction_head")]
    for kind, name in jobs:
        stim = stimuli[kind]
        for i in range(len(stim.batch)):
            tokens = stim.batch.tokens[i : i + 1, : int(stim.batch.lengths[i])].to(model.device)
            fake = _FixedTokens(model.bridge, tokens)
            detect_head(fake, "unused", name)  # pyright: ignore[reportArgumentType] - a stand-in for HookedTransformer; "unused" never tokenized


def main() -> None:
    import json

    p = _common.parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=16)
    p.add_argument("--with-tl", action="store_true", help="also time TransformerLens detect_head looped over the prompts (slow)")
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    extra = _common.forwarded(args, ["n_prompts"]) + (["--with-tl"] if args.with_tl else [])
    modes = ["hf_eager", "hf_sdpa", "bridge_forward", "census", "census_streaming", "census_x4"] + (
        ["tl_detect_head"] if args.with_tl else []
    )
    mem = _common.run_modes(__file__, modes, extra)
    paired = _common.run_modes(__file__, ["paired"], extra)["paired"]
    if "error" in paired:
        sys.exit(f"paired timing failed: {paired['error']}")
    print(
        f"census benchmark: GPT-2-{args.shape} shape, random weights, {args.n_prompts} prompts per stimulus set "
        f"({paired['n_batches']} batches, {paired['n_tokens']} real tokens), {paired['device']}, {args.dtype}, "
        f"{paired['threads']} threads, {args.repeats} interleaved rounds"
    )
    rows = []
    for m in modes:
        r = mem.get(m, {})
        t = paired["medians_s"].get(m)
        floor, target = TARGETS.get(m, (paired["floors"].get(m), None))
        if m == "census_x4" or (t is None and m != "census_streaming"):
            floor = None
        row = {"mode": m, "median_s": t, "ratio": paired["ratios"].get(m) if floor else None, "floor": floor, "target": target}
        if "peak_MiB" in r:
            row.update(peak_MiB=r["peak_MiB"], extra_MiB=r["extra_MiB"])
        rows.append(row)
    note = "ratio: median of per-round ratios to the floor (the same batches and masks); memory: each mode alone, " + (
        mem["census"].get("memory", "") if "census" in mem else ""
    )
    for line in _common.table(rows, floor_note=note):
        print(line)
    if "census_streaming" not in paired["medians_s"]:
        print("census_streaming: not available (this headlens' CensusConfig has no attention='streaming')")
    else:
        print(f"census_streaming / hf_eager = {paired['census_streaming_vs_hf_eager']:.3f}")
    if "census_x4" in mem and "census" in mem and "extra_MiB" in mem["census_x4"] and "extra_MiB" in mem["census"]:
        print(f"peak memory census_x4 - census = {mem['census_x4']['peak_MiB'] - mem['census']['peak_MiB']:+.0f} MiB for 4x the prompts")
    if "tl_detect_head" in paired["medians_s"]:
        print(
            "speed-up over looping detect_head (3 of the detectors) = "
            f"{paired['medians_s']['tl_detect_head'] / paired['medians_s']['census']:.1f}x"
        )
    _common.write_json(args.json, {"memory": mem, "timing": paired, "rows": rows})


if __name__ == "__main__":
    main()
