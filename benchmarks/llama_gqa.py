"""Benchmark: capture and the head census on a Llama-shaped GQA model vs a plain Hugging Face forward.

    python benchmarks/llama_gqa.py [--n-prompts 16] [--repeats 3] [--threads 2] [--device auto] [--dtype float32]

Model: LlamaForCausalLM the size of GPT-2 small (12 layers, d_model 768, 12 query heads
sharing 4 KV heads, MLP 3072, context 1024, GPT-2 vocabulary), random weights: cost does not
depend on them.  Stimuli: the census's own token batches (--n-prompts sequences of 50
distinct random tokens repeated twice, --n-prompts 64-token text windows, --n-prompts
referent sentences; BOS prepended; batches of 16) and their attention masks.  Every mode runs
over exactly those batches, in one process, in turn, --repeats rounds after a warm-up round; ratios are the
median of per-round ratios.  Modes:
  hf_eager        the floor: plain transformers LlamaModel (no LM head), eager attention,
                  output_attentions=True: what a user runs to get the patterns without headlens
  hf_sdpa         the floor of the streaming census: plain LlamaModel, SDPA attention, no patterns
  hf_eager_lm     plain LlamaForCausalLM to the logits, eager (beside it, not the floor)
  bridge_forward  TransformerBridge forward through the blocks, no hooks (beside it)
  capture         headlens capture of q, k, v and pattern, every layer and head, kept on the CPU
  capture_pattern headlens capture of the patterns only
  census          headlens census, every registered detector (six), every head (attention="eager")
  census_streaming the census with attention="streaming" ("not available" until headlens has it)
Targets: capture <= 1.2x hf_eager (issue 11), census <= 1.15x hf_eager and census_streaming
<= 1.5x hf_sdpa (issue 14).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

TARGETS = {
    "capture": ("hf_eager", 1.2),
    "capture_pattern": ("hf_eager", 1.2),
    "census": ("hf_eager", 1.15),
    "census_streaming": ("hf_sdpa", 1.5),
}
SHAPE = {"n_layers": 12, "n_heads": 12, "n_kv_heads": 4, "d_model": 768, "d_mlp": 3072, "n_ctx": 1024, "init_std": 0.02}
#: --shape tiny (smoke tests only)
TINY = {"n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_model": 64, "d_mlp": 128, "n_ctx": 256, "init_std": 0.02}


def build(cache: Path, shape: str = "small") -> Path:
    from headlens.analyses.synthetic.families import build_family_checkpoint

    s = SHAPE if shape == "small" else TINY
    folder = cache / f"llama-gqa-{s['n_layers']}x{s['n_heads']}kv{s['n_kv_heads']}x{s['d_model']}"
    if not (folder / "config.json").exists():
        build_family_checkpoint(folder, "llama", **s)
    return folder


def run(args) -> dict:
    import torch

    from headlens.analyses.heads.census import build_stimuli, run_census
    from headlens.probes.capture import capture
    from headlens.probes.config import CaptureConfig
    from headlens.probes.engine import batch_attention_mask
    from headlens.probes.loading import load_model
    from headlens.probes.prompts import iter_batches

    _common.setup_threads(args.threads)
    device = _common.resolve_device(args.device)
    folder = build(Path(args.cache), args.shape)
    model = load_model(model=str(folder), device=device, dtype=args.dtype)
    hf_base = _common.hf_model(folder, attn="eager", device=device, dtype=args.dtype)
    hf_sdpa = _common.hf_model(folder, attn="sdpa", device=device, dtype=args.dtype)
    hf_lm = _common.hf_model(folder, attn="eager", device=device, dtype=args.dtype, lm=True)
    config = _common.census_config(n_prompts=args.n_prompts, batch_size=16, n_bootstrap=1000, attention="eager")
    streaming = _common.census_config(n_prompts=args.n_prompts, batch_size=16, n_bootstrap=1000, attention="streaming")
    assert config is not None  # attention='eager' is always available
    stimuli = build_stimuli(model, config, {"repeated", "natural", "referent"})
    batches = [(sub.tokens, batch_attention_mask(sub)) for stim in stimuli.values() for _, sub in iter_batches(stim.batch, 16)]

    def cap(what):
        for stim in stimuli.values():
            capture(model, stim.batch, CaptureConfig(what=what, batch_size=16))

    fns = {
        "hf_eager": lambda: _common.hf_forward(hf_base, batches, patterns=True),
        "hf_sdpa": lambda: _common.hf_forward(hf_sdpa, batches, patterns=False),
        "hf_eager_lm": lambda: _common.hf_forward(hf_lm, batches, patterns=False),
        "bridge_forward": lambda: _common.bridge_forward(model, batches),
        "capture": lambda: cap(("q", "k", "v", "pattern")),
        "capture_pattern": lambda: cap(("pattern",)),
        "census": lambda: run_census(model, config),
    }
    if streaming is not None:
        fns["census_streaming"] = lambda: run_census(model, streaming)
    timing = _common.interleaved(fns, repeats=args.repeats, device=device)
    floors = {m: TARGETS.get(m, ("hf_eager",))[0] for m in fns}
    floors["hf_sdpa"] = "hf_sdpa"
    timing["ratios"] = _common.ratios(timing, floors)
    timing["floors"] = floors
    timing.update(
        device=str(model.device),
        threads=torch.get_num_threads(),
        n_batches=len(batches),
        n_tokens=int(sum(int(m.sum()) for _, m in batches)),
    )
    return timing


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=16)
    args = p.parse_args()
    res = run(args)
    s = SHAPE if args.shape == "small" else TINY
    print(
        f"llama_gqa benchmark: Llama {s['n_layers']} layers x {s['n_heads']} query heads / {s['n_kv_heads']} KV heads, d_model "
        f"{s['d_model']}, random weights; "
        f"{args.n_prompts} prompts per stimulus set ({res['n_batches']} batches, {res['n_tokens']} real tokens), {res['device']}, "
        f"{args.dtype}, "
        f"{res['threads']} threads, {args.repeats} interleaved rounds"
    )
    rows = [
        {"mode": m, "median_s": t, "ratio": res["ratios"][m], "floor": res["floors"][m], "target": TARGETS.get(m, (None, None))[1]}
        for m, t in res["medians_s"].items()
    ]
    for line in _common.table(
        rows, floor_note="ratio: median of per-round ratios to the floor (same batches and masks); memory not measured here"
    ):
        print(line)
    if "census_streaming" not in res["medians_s"]:
        print("census_streaming: not available (this headlens' CensusConfig has no attention='streaming')")
    _common.write_json(args.json, {"timing": res, "rows": rows})


if __name__ == "__main__":
    main()
