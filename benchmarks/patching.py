"""Benchmark: exact per-head activation patching vs the naive loop, and attribution patching in forward passes.

    python benchmarks/patching.py [--pairs 64] [--T 15] [--batch-size 8] [--repeats 3] [--shape small|tiny] [--threads N] [--device auto]

GPT-2-small shape (12 layers x 12 heads, d_model 768), random weights, the built-in induction
task (``--pairs`` pairs of ``2 + 3T/2`` tokens, BOS included), denoising, logit difference at
the last position.  Modes, timed in turn in one process (a warm-up round, then ``--repeats``
rounds; ratios are medians of per-round ratios):
  forward      one forward of the bridge over the corrupted pairs (the forward-pass unit)
  naive        the loop a user would write: the clean z cached, then for each of the 144 heads one
               hooked full forward per batch with that head's z replaced by the clean one
  exact        headlens.analyses.patching.activation.run_patching (denoising only, no bootstrap):
               each layer's heads as copies of the batch, started at their block from the stored residual
  attribution  headlens.analyses.patching.attribution.run_attribution_patching (clean forward, corrupted
               forward + backward to the gates)
Targets: exact / naive <= 1.1; attribution / forward <= 3 (forward-equivalents).  The script also
checks that the exact and the naive tables agree.  Memory is not measured here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common


def main() -> None:
    import numpy as np
    import torch

    p = _common.parser(__doc__ or "")
    p.add_argument("--pairs", type=int, default=64)
    p.add_argument("--T", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    _common.setup_threads(args.threads)
    from headlens.analyses.ablation.hooks import z_hook_name
    from headlens.analyses.patching.activation import PatchConfig, run_patching
    from headlens.analyses.patching.attribution import run_attribution_patching
    from headlens.analyses.patching.builtin import induction_task
    from headlens.probes.hooks import attached
    from headlens.probes.loading import load_model

    folder = _common.checkpoint(Path(args.cache), shape=args.shape)
    model = load_model(model=str(folder), device=_common.resolve_device(args.device), dtype=args.dtype)
    dev = str(model.device)
    task = induction_task(model, n=args.pairs, T=args.T, seed=0)
    bs = args.batch_size
    batches = [list(range(i, min(i + bs, len(task)))) for i in range(0, len(task), bs)]
    heads = [(layer, h) for layer in range(model.n_layers) for h in range(model.n_heads)]
    last = task.lengths - 1

    def ld(logits, rows):
        r = torch.arange(len(rows))
        final = logits[r, last[rows]].double()
        return final[r, task.correct[rows]] - final[r, task.incorrect[rows]]

    def forward():
        with torch.inference_mode():
            for rows in batches:
                model.bridge(task.corrupt[rows].to(dev), return_type="logits")

    def naive():
        out = np.zeros((len(heads), len(task)))
        with torch.inference_mode():
            clean_z = {}
            for rows in batches:
                keep = [
                    (z_hook_name(layer), lambda z, hook=None, layer=layer, rows=rows: clean_z.__setitem__((layer, rows[0]), z.clone()))
                    for layer in range(model.n_layers)
                ]
                with attached(model.bridge, keep):
                    model.bridge(task.clean[rows].to(dev), return_type="logits")
            for i, (layer, h) in enumerate(heads):
                for rows in batches:
                    src = clean_z[(layer, rows[0])]

                    def patch(z, hook=None, src=src, h=h):
                        z = z.clone()
                        z[:, :, h] = src[:, :, h]
                        return z

                    with attached(model.bridge, [(z_hook_name(layer), patch)]):
                        out[i, rows] = ld(model.bridge(task.corrupt[rows].to(dev), return_type="logits"), rows).cpu().numpy()
        return out

    results = {}
    fns = {
        "forward": forward,
        "naive": lambda: results.__setitem__("naive", naive()),
        "exact": lambda: results.__setitem__(
            "exact", run_patching(model, task, PatchConfig(directions=("denoising",), n_resamples=0, batch_size=bs)).per_item["denoising"]
        ),
        "attribution": lambda: run_attribution_patching(model, task, batch_size=bs, n_resamples=0),
    }
    timing = _common.interleaved(fns, repeats=args.repeats, device=dev)
    agree = float(np.abs(results["exact"] - results["naive"]).max())
    rows = [
        {"mode": "forward", "median_s": timing["medians_s"]["forward"], "ratio": 1.0, "floor": "forward"},
        {"mode": "naive", "median_s": timing["medians_s"]["naive"], "ratio": 1.0, "floor": "naive"},
        {
            "mode": "exact",
            "median_s": timing["medians_s"]["exact"],
            "ratio": _common.round_ratio(timing, "exact", "naive"),
            "floor": "naive",
            "target": 1.1,
        },
        {
            "mode": "attribution",
            "median_s": timing["medians_s"]["attribution"],
            "ratio": _common.round_ratio(timing, "attribution", "forward"),
            "floor": "forward",
            "target": 3.0,
        },
    ]
    print(
        f"{args.shape} shape, {len(task)} pairs x {int(task.lengths[0])} tokens, batch {bs}, {len(heads)} heads, {args.repeats} rounds, "
        f"torch threads {torch.get_num_threads()}"
    )
    for line in _common.table(rows):
        print(line)
    print(f"exact vs naive per-pair logit differences: max |difference| {agree:.2e}")
    _common.write_json(args.json, {"timing": timing, "rows": rows, "max_abs_difference": agree, "args": vars(args)})


if __name__ == "__main__":
    main()
