"""Benchmark: the full census (every registered detector) vs plain forward passes vs TransformerLens detect_head.

    python benchmarks/census.py [--n-prompts 20] [--repeats 3] [--device auto] [--dtype float32]

GPT-2-small shape (12 x 12, d_model 768), random weights.  Same stimuli for every mode:
--n-prompts sequences of 50 distinct random tokens repeated twice, --n-prompts 64-token
natural-text windows and --n-prompts referent sentences, BOS prepended, batch 16.
Peak memory: each mode alone in its own process (one run after a warm-up).  Timing: one
more process runs the modes in turn, --repeats rounds after a warm-up round; ratios are
medians of per-round ratios.  Modes:
  forward_logits   plain forward to the logits over the same token batches
  forward_blocks   plain forward through all blocks (no unembedding), same batches
  census           headlens census, every registered detector, every head, one pass per stimulus set
  census_x4        the census on 4x as many prompts (memory must not grow with prompts)
  tl_detect_head   transformer_lens.head_detector.detect_head looped over the same prompts
                   for its three head types (previous-token on the windows; duplicate and
                   induction on the repeated sequences); one prompt per call, as its API takes
Targets: census / forward_blocks <= 1.3.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402


class _FixedTokens:
    def __init__(self, bridge, tokens):
        self.bridge, self.tokens, self.cfg = bridge, tokens, bridge.cfg

    def to_tokens(self, seq):
        return self.tokens

    def run_with_cache(self, *args, **kwargs):
        return self.bridge.run_with_cache(*args, **kwargs)


def one_mode(args) -> dict:
    import torch

    from headlens.analyses.heads.census import CensusConfig, build_stimuli, run_census
    from headlens.probes.capture import run_forward
    from headlens.probes.loading import load_model
    from headlens.probes.prompts import iter_batches

    model = load_model(model=args.checkpoint, device=args.device, dtype=args.dtype)
    n = args.n_prompts * (4 if args.mode == "census_x4" else 1)
    config = CensusConfig(n_prompts=n, batch_size=16, n_bootstrap=1000)
    stimuli = build_stimuli(model, config, {"repeated", "natural", "referent"})

    def forward(stop):
        with torch.inference_mode():
            for stim in stimuli.values():
                for _, sub in iter_batches(stim.batch, 16):
                    run_forward(model, sub.tokens, stop_at_layer=stop, return_type="logits" if stop is None else None)

    from transformer_lens.head_detector import detect_head

    def tl_loop():
        jobs = [("natural", "previous_token_head"), ("repeated", "duplicate_token_head"), ("repeated", "induction_head")]
        for kind, name in jobs:
            stim = stimuli[kind]
            for i in range(len(stim.batch)):
                tokens = stim.batch.tokens[i : i + 1, : int(stim.batch.lengths[i])].to(model.device)
                detect_head(_FixedTokens(model.bridge, tokens), "unused", name)

    fns = {
        "forward_logits": lambda: forward(None),
        "forward_blocks": lambda: forward(model.n_layers),
        "census": lambda: run_census(model, config),
        "tl_detect_head": tl_loop,
    }
    if args.mode != "paired":
        res = _common.measure(fns["census" if args.mode == "census_x4" else args.mode], repeats=1, device=str(model.device))
        res.update(device=str(model.device), threads=torch.get_num_threads(), n_prompts=n)
        return res
    timing = _common.interleaved(fns, repeats=args.repeats, device=str(model.device))
    for other in ("forward_blocks", "forward_logits", "tl_detect_head"):
        timing[f"census_vs_{other}"] = _common.round_ratio(timing, "census", other)
    return timing


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=20)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    extra = _common.forwarded(args, ['n_prompts'])
    modes = ["forward_logits", "forward_blocks", "census", "census_x4", "tl_detect_head"]
    mem = _common.run_modes(__file__, modes, extra)
    paired = _common.run_modes(__file__, ["paired"], extra)["paired"]
    first = mem["census"]
    print(f"census benchmark: GPT-2-small shape, random weights, {args.n_prompts} prompts per stimulus set, {first['device']}, {args.dtype}, {first['threads']} threads, {args.repeats} interleaved rounds")
    print(f"{'mode':<16}{'prompts':>8}{'median s':>10}{'peak MiB':>10}  ({first['memory']}, each mode alone)")
    for m in modes:
        t = paired["medians_s"].get(m)
        print(f"{m:<16}{mem[m]['n_prompts']:>8}{(f'{t:.3f}' if t is not None else '-'):>10}{mem[m]['peak_MiB']:>10.0f}")
    print(f"ratio census / forward_blocks = {paired['census_vs_forward_blocks']:.3f}  (target <= 1.3; median of per-round ratios)")
    print(f"ratio census / forward_logits = {paired['census_vs_forward_logits']:.3f}")
    print(f"speed-up over looping detect_head (3 of the 5 detectors) = {1 / paired['census_vs_tl_detect_head']:.1f}x")
    print(f"peak memory census_x4 - census = {mem['census_x4']['peak_MiB'] - mem['census']['peak_MiB']:+.0f} MiB for 4x the prompts")


if __name__ == "__main__":
    main()
