"""Benchmark: weight-based composition scores against TransformerLens' ``all_composition_scores``.

    python benchmarks/composition.py [--repeats 1] [--threads 2] [--shape small|tiny]

GPT-2-small shape (12 layers x 12 heads, d_model 768, d_head 64, random weights from GPT2Config).
Equality (target: max |difference| <= 1e-5 for each of Q, K, V):
  raw        headlens.analyses.circuits.composition (fold_ln=False) vs the bridge's
             ``all_composition_scores`` on the checkpoint's weights as loaded
  processed  headlens' analytic LayerNorm folding of the raw weights (fold_ln=True, the default) vs
             ``all_composition_scores`` of a second bridge whose weights TransformerLens processed
             itself (``enable_compatibility_mode``: fold_ln, center_writing_weights, center_unembed)
Time (the three modes, all head pairs; the floor is the plain call a user would make):
  tl_all_pairs   ``bridge.all_composition_scores(m)`` for m in Q, K, V
  headlens       ``mode_scores(head_weights(model, fold_ln=False), m)`` for m in q, k, v (weights read each time)
On a shared machine the times carry its load: say so beside any figure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

#: The issue's target for the equality with TransformerLens.
TARGET = 1e-5


def main() -> None:
    p = _common.parser(__doc__ or "")
    args = p.parse_args()
    _common.setup_threads(args.threads)
    from transformer_lens.model_bridge import TransformerBridge

    from headlens.analyses.circuits.composition import MODES, head_weights, mode_scores
    from headlens.probes.loading import load_model

    folder = args.checkpoint or _common.checkpoint(Path(args.cache), shape=args.shape)
    model = load_model(model=str(folder), device="cpu")
    processed = TransformerBridge.boot_transformers(str(folder), device="cpu")
    processed.enable_compatibility_mode()
    raw_w, folded_w = head_weights(model, fold_ln=False), head_weights(model, fold_ln=True)
    equality = {}
    for m in MODES:
        tl_raw = model.bridge.all_composition_scores(m.upper()).scores.detach().double()
        tl_proc = processed.all_composition_scores(m.upper()).scores.detach().double()
        equality[m] = {
            "raw": float((mode_scores(raw_w, m) - tl_raw).abs().max()),
            "processed": float((mode_scores(folded_w, m) - tl_proc).abs().max()),
        }

    def theirs() -> None:
        for m in MODES:
            model.bridge.all_composition_scores(m.upper())

    def ours() -> None:
        w = head_weights(model, fold_ln=False)
        for m in MODES:
            mode_scores(w, m)

    timing = _common.interleaved({"tl_all_pairs": theirs, "headlens": ours}, repeats=args.repeats, device="cpu")
    rows = [
        {"mode": "tl_all_pairs", "median_s": timing["medians_s"]["tl_all_pairs"], "ratio": 1.0, "floor": "tl"},
        {
            "mode": "headlens",
            "median_s": timing["medians_s"]["headlens"],
            "ratio": _common.round_ratio(timing, "headlens", "tl_all_pairs"),
            "floor": "tl",
        },
    ]
    print(f"composition at shape {args.shape}: max |headlens - TransformerLens| (target <= {TARGET:g})")
    for m, d in equality.items():
        met = "yes" if max(d.values()) <= TARGET else "NO"
        print(f"  {m.upper()}: raw weights {d['raw']:.1e}, TL-processed weights {d['processed']:.1e}  met {met}")
    for line in _common.table(rows):
        print(line)
    print(json.dumps({"equality": equality, "medians_s": timing["medians_s"]}))
    _common.write_json(args.json, {"equality": equality, "timing": timing, "rows": rows, "args": vars(args)})


if __name__ == "__main__":
    main()
