"""Benchmark: edge scores of the circuit graph against one forward+backward of the same batch.

    python benchmarks/circuits.py [--pairs 16] [--T 13] [--steps 5] [--confirm 100] [--repeats 1] [--threads 2] [--small]

GPT-2-small shape (12 layers x 12 heads, d_model 768, random weights from GPT2Config; 32,491
edges), the built-in induction task (``--pairs`` pairs of ``1 + T + T//2`` tokens: 20 at T=13),
one batch of every pair, noising, logit difference at the last position.  ``--small``: the tiny
shape (2 x 4, d_model 64) and 4 pairs, for development only.  Modes:
  forward      one plain forward of the bridge over the batch (the forward unit)
  fwd_bwd      the plain call a user would make: the forward, the summed logit difference, ``.backward()``
               (weights' gradients included): the floor of time and memory
  eap_ig       headlens.analyses.circuits.scores.attribution_scores(steps=--steps): every edge, per pair
  exact_top    headlens.analyses.circuits.exact.exact_scores of the --confirm best EAP-IG edges
Targets: eap_ig / fwd_bwd <= 10 (time); exact_top in forward equivalents (time / forward) <= 100;
eap_ig's peak memory / fwd_bwd's <= 3, each mode alone in its own process (``extra_MiB``: the peak
resident set above the one before the mode ran, weights and imports left out; on CUDA the peak
allocated above the allocation before it).  ``--device cuda`` runs everything on the GPU
(benchmarks/gpu.sh's ``circuits`` piece).  Timing runs the
modes in turn in one process (a warm-up round, then --repeats rounds; ratios are medians of
per-round ratios).  On a shared machine the times carry its load: say so beside any figure.

Measured 2026-12-03 on the shared 2-core machine under a load average of 10-14 (so absolute
times are several times a quiet machine's; ratios interleaved in one process): eap_ig 5.76x
fwd_bwd (235 s / 40.8 s), exact_top 18.8 forward equivalents by time (58.2 counted), eap_ig's
extra memory 1.66x fwd_bwd's (+2545 / +1538 MiB, before the single sender store of commit 7c7a163).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common


def _setup(args):
    import torch

    from headlens.analyses.circuits.graph import build_graph
    from headlens.analyses.patching.builtin import induction_task
    from headlens.probes.loading import load_model

    folder = args.checkpoint or _common.checkpoint(Path(args.cache), shape=args.shape)
    model = load_model(model=str(folder), device=_common.resolve_device(args.device), dtype=args.dtype)
    task = induction_task(model, n=args.pairs, T=args.T, seed=0)
    graph = build_graph(model)
    dev = str(model.device)
    rows = torch.arange(len(task))

    def forward():
        with torch.inference_mode():
            model.bridge(task.clean.to(dev), return_type="logits")

    def fwd_bwd():
        logits = model.bridge(task.clean.to(dev), return_type="logits")
        final = logits[rows, task.lengths - 1]
        (final[rows, task.correct] - final[rows, task.incorrect]).sum().backward()
        model.bridge.zero_grad(set_to_none=True)

    return model, task, graph, forward, fwd_bwd


def _modes(args):
    import numpy as np

    from headlens.analyses.circuits.exact import exact_scores
    from headlens.analyses.circuits.scores import attribution_scores

    model, task, graph, forward, fwd_bwd = _setup(args)
    bs = len(task)
    state: dict = {}

    def eap_ig():
        state["ig"] = attribution_scores(model, task, graph, steps=args.steps, batch_size=bs)

    def exact_top():
        ig = state.get("ig") or attribution_scores(model, task, graph, steps=args.steps, batch_size=bs)
        state["ig"] = ig
        top = ig.values.mean(0)
        ids = np.argsort(-np.abs(top), kind="stable")[: args.confirm]
        state["exact"] = exact_scores(model, task, graph, ids, batch_size=bs)

    fns: dict[str, Callable[[], object]] = {"forward": forward, "fwd_bwd": fwd_bwd, "eap_ig": eap_ig, "exact_top": exact_top}
    return fns, state, graph, task


def _one_mode(args) -> None:
    import numpy as np

    fns, state, _graph, _task = _modes(args)
    device = _common.resolve_device(args.device)
    if args.mode == "paired":
        import torch

        timing = _common.interleaved(fns, repeats=args.repeats, device=device)
        timing["ratios"] = {
            "eap_ig": _common.round_ratio(timing, "eap_ig", "fwd_bwd"),
            "exact_top": _common.round_ratio(timing, "exact_top", "forward"),
            "fwd_bwd": _common.round_ratio(timing, "fwd_bwd", "forward"),
        }
        timing["counted_forwards"] = {"exact_top": state["exact"].forwards, "eap_ig": state["ig"].forwards}
        timing["threads"] = torch.get_num_threads()
        timing["finite"] = bool(np.isfinite(state["ig"].values).all())
        print(json.dumps(timing))
        return
    if args.mode == "exact_top":  # the EAP-IG ranking is not part of this mode's memory
        fns["eap_ig"]()
    fn = fns[args.mode]
    print(json.dumps(_common.measure(fn, repeats=1, device=device, warmup=False)))


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--pairs", type=int, default=16)
    p.add_argument("--T", type=int, default=13)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--confirm", type=int, default=100)
    p.add_argument("--small", action="store_true", help="development size: the tiny shape and 4 pairs")
    p.set_defaults(repeats=1, threads=2)
    args = p.parse_args()
    if args.small:
        args.shape, args.pairs = "tiny", min(args.pairs, 4)
    for name in ("pairs", "T", "steps", "confirm", "repeats"):
        if getattr(args, name) < 1:
            sys.exit(f"--{name} must be >= 1, got {getattr(args, name)}")
    _common.setup_threads(args.threads)
    if args.mode:
        _one_mode(args)
        return
    extra = _common.forwarded(args, ["pairs", "T", "steps", "confirm"])
    mem = _common.run_modes(__file__, ["fwd_bwd", "eap_ig"], extra)  # exact_top's memory has no target
    paired = _common.run_modes(__file__, ["paired"], extra)["paired"]
    if "error" in paired:
        sys.exit(f"paired timing failed: {paired['error']}")
    med, ratio = paired["medians_s"], paired["ratios"]
    mem_ratio = None
    if "extra_MiB" in mem.get("eap_ig", {}) and "extra_MiB" in mem.get("fwd_bwd", {}):
        mem_ratio = mem["eap_ig"]["extra_MiB"] / max(1.0, mem["fwd_bwd"]["extra_MiB"])
    rows = [
        {"mode": "forward", "median_s": med["forward"], "ratio": 1.0, "floor": "forward"},
        {"mode": "fwd_bwd", "median_s": med["fwd_bwd"], "ratio": ratio["fwd_bwd"], "floor": "forward", **_mem(mem, "fwd_bwd")},
        {"mode": "eap_ig", "median_s": med["eap_ig"], "ratio": ratio["eap_ig"], "floor": "fwd_bwd", "target": 10.0, **_mem(mem, "eap_ig")},
        {"mode": "exact_top", "median_s": med["exact_top"], "ratio": ratio["exact_top"], "floor": "forward", "target": 100.0},
        {"mode": "eap_ig_memory", "median_s": None, "ratio": mem_ratio, "floor": "fwd_bwd", "target": 3.0},
    ]
    print(
        f"{args.shape} shape, {args.pairs} pairs x {1 + args.T + args.T // 2} tokens in one batch, EAP-IG steps {args.steps}, "
        f"top {args.confirm} edges confirmed, {args.repeats} rounds, torch threads {paired['threads']}"
    )
    for line in _common.table(rows):
        print(line)
    print(
        f"exact_top counted {paired['counted_forwards']['exact_top']:.1f} forward equivalents (rows x blocks run / one forward); "
        f"eap_ig counted {paired['counted_forwards']['eap_ig']:.0f}; eap_ig_memory = extra MiB of eap_ig / fwd_bwd"
    )
    _common.write_json(args.json, {"memory": mem, "timing": paired, "rows": rows, "args": vars(args)})


def _mem(mem: dict, mode: str) -> dict:
    return {k: mem[mode][k] for k in ("peak_MiB", "extra_MiB") if k in mem.get(mode, {})}


if __name__ == "__main__":
    main()
