"""Benchmark: capture and the head census on a Llama-shaped GQA model vs a plain Hugging Face forward.

    python benchmarks/llama_gqa.py [--n-prompts 16] [--repeats 3] [--device auto] [--dtype float32]

Model: LlamaForCausalLM the size of GPT-2 small (12 layers, d_model 768, 12 query heads
sharing 4 KV heads, MLP 3072, context 1024, GPT-2 vocabulary), random weights: cost does not
depend on them.  Stimuli: the census's own token batches (--n-prompts sequences of 50
distinct random tokens repeated twice, --n-prompts 64-token text windows, --n-prompts
referent sentences; BOS prepended; batches of 16).  Every mode runs over exactly those
batches, in one process, in turn, --repeats rounds after a warm-up round; ratios are the
median of per-round ratios.  Modes:
  hf_eager        the floor: plain transformers LlamaModel (no LM head), eager attention,
                  output_attentions=True: what a user runs to get the patterns without headlens
  hf_eager_lm     plain LlamaForCausalLM to the logits, eager (beside it, not the floor)
  bridge_forward  TransformerBridge forward through the blocks, no hooks (beside it)
  capture         headlens capture of q, k, v and pattern, every layer and head, kept on the CPU
  capture_pattern headlens capture of the patterns only
  census          headlens census, every registered detector (six), every head
Targets (issue 11): capture and census <= 1.2x hf_eager.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402

SHAPE = {"n_layers": 12, "n_heads": 12, "n_kv_heads": 4, "d_model": 768, "d_mlp": 3072, "n_ctx": 1024, "init_std": 0.02}


def build(cache: Path) -> Path:
    from headlens.analyses.synthetic.families import build_family_checkpoint

    folder = cache / "llama-gqa-12x12kv4x768"
    if not (folder / "config.json").exists():
        build_family_checkpoint(folder, "llama", **SHAPE)
    return folder


def run(args) -> dict:
    import torch
    from transformers import AutoModel, AutoModelForCausalLM

    from headlens.analyses.heads.census import CensusConfig, build_stimuli, run_census
    from headlens.probes.capture import capture, run_forward
    from headlens.probes.config import CaptureConfig
    from headlens.probes.loading import load_model
    from headlens.probes.prompts import iter_batches

    folder = build(Path(args.cache))
    model = load_model(model=str(folder), device=args.device, dtype=args.dtype)
    dtype = model.dtype
    hf_base = AutoModel.from_pretrained(str(folder), attn_implementation="eager", dtype=dtype).to(model.device).eval()
    hf_lm = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager", dtype=dtype).to(model.device).eval()
    config = CensusConfig(n_prompts=args.n_prompts, batch_size=16, n_bootstrap=1000)
    stimuli = build_stimuli(model, config, {"repeated", "natural", "referent"})
    batches = [sub.tokens for stim in stimuli.values() for _, sub in iter_batches(stim.batch, 16)]

    def hf(m, **kw):
        with torch.inference_mode():
            for tokens in batches:
                m(tokens.to(model.device), **kw)

    def bridge():
        with torch.inference_mode():
            for tokens in batches:
                run_forward(model, tokens)

    def cap(what):
        for stim in stimuli.values():
            capture(model, stim.batch, CaptureConfig(what=what, batch_size=16))

    fns = {
        "hf_eager": lambda: hf(hf_base, output_attentions=True),
        "hf_eager_lm": lambda: hf(hf_lm),
        "bridge_forward": bridge,
        "capture": lambda: cap(("q", "k", "v", "pattern")),
        "capture_pattern": lambda: cap(("pattern",)),
        "census": lambda: run_census(model, config),
    }
    timing = _common.interleaved(fns, repeats=args.repeats, device=str(model.device))
    for name in fns:
        if name != "hf_eager":
            timing[f"{name}_vs_hf_eager"] = _common.round_ratio(timing, name, "hf_eager")
    timing.update(device=str(model.device), threads=torch.get_num_threads(), n_batches=len(batches), n_tokens=int(sum(t.numel() for t in batches)))
    return timing


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=16)
    args = p.parse_args()
    res = run(args)
    print(
        f"llama_gqa benchmark: Llama 12 layers x 12 query heads / 4 KV heads, d_model 768, random weights; "
        f"{args.n_prompts} prompts per stimulus set ({res['n_batches']} batches, {res['n_tokens']} tokens), {res['device']}, {args.dtype}, "
        f"{res['threads']} threads, {args.repeats} interleaved rounds"
    )
    print(f"{'mode':<16}{'median s':>10}{'x hf_eager':>12}")
    for name, t in res["medians_s"].items():
        ratio = 1.0 if name == "hf_eager" else res[f"{name}_vs_hf_eager"]
        print(f"{name:<16}{t:>10.3f}{ratio:>12.3f}")
    print("ratios: median of per-round ratios; targets capture and census <= 1.2 x hf_eager")
    print(json.dumps({k: v for k, v in res.items() if k.endswith("_vs_hf_eager")}))


if __name__ == "__main__":
    main()
