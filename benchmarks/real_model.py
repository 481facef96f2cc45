"""Benchmark: the cost of a census and of a circuit run at the real model's shape (issue 45 item 7).

    python benchmarks/real_model.py [--pairs 8] [--steps 5] [--confirm 100] [--n-prompts 16] [--repeats 1] [--threads 2] [--json F]
    python benchmarks/real_model.py --smoke      # a tiny Llama with GQA, a few seconds: a check, not a measurement

SmolLM2-135M-Instruct (``--model smollm2``: Llama, 30 layers x 9 query heads, 3 key-value heads, d_model 576,
vocabulary 49,152; the float32 checkpoint headlens dequantized from its GGUF file, loaded by headlens and by plain
Hugging Face from the same folder).  Floors are the plain Hugging Face calls a user would make:
  hf_eager     ``AutoModel`` (LlamaModel), eager attention, ``output_attentions=True``, over the census's own batches
  census       headlens' census, every detector, the same batches                                  target <= 1.1 x hf_eager
  hf_fwd       ``AutoModelForCausalLM`` forward of the circuit's pairs (--pairs x 31 tokens, one batch, no grad)
  hf_fwd_bwd   the same forward, the summed logit difference, ``.backward()`` (weights' gradients included)
  eap_ig       headlens' EAP-IG edge scores (--steps steps) of every edge on those pairs          target <= 10 x hf_fwd_bwd
  exact_top    exact patching of the --confirm best EAP-IG edges, in forward equivalents (/ hf_fwd) target <= 100
  circuit      (memory, own process) ``run_circuit`` with the command's defaults on the pairs: peak resident set above
               the one before it against hf_fwd_bwd's (target <= 3x), its system time as a share of its CPU time
               (target <= 0.1) and its minor page faults
The edge count of the graph under GQA (k and v edges to the key-value heads) is printed beside the count without it.
Timing runs the timed modes in turn in one process, a warm-up round then --repeats rounds (ratios: medians of
per-round ratios); memory: each mode alone in its own process.  On a shared machine times carry its load: the load
average is recorded at the start and the end.  ``--device cuda`` runs every mode on the GPU (benchmarks/gpu.sh's
``real_model`` piece; memory there is the peak allocated above the allocation before).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

TARGETS = {"census": ("hf_eager", 1.1), "eap_ig": ("hf_fwd_bwd", 10.0), "exact_top": ("hf_fwd", 100.0)}
MEMORY_TARGET, SYSTEM_SHARE_TARGET = 3.0, 0.1


def _folder(args) -> Path:
    """The checkpoint folder: SmolLM2's dequantized float32 folder, or (``--smoke``) a tiny Llama with GQA."""
    if args.checkpoint:
        return Path(args.checkpoint)
    if args.smoke:
        from headlens.analyses.synthetic.families import build_family_checkpoint

        folder = Path(args.cache) / "family-llama"
        if not (folder / "headlens_family.json").is_file():
            build_family_checkpoint(folder, "llama")
        return folder
    from headlens.probes.gguf import gguf_checkpoint
    from headlens.reports.api.named_models import smollm2_file

    folder, _ = gguf_checkpoint(smollm2_file(fetch=True), "smollm2")
    return folder


def _setup(args, wanted: set[str]) -> dict:
    import torch

    from headlens.analyses.circuits.graph import build_graph
    from headlens.analyses.patching.builtin import induction_task
    from headlens.probes.loading import load_model

    device = _common.resolve_device(args.device)
    model = load_model(model=args.checkpoint, device=device, dtype=args.dtype)
    task = induction_task(model, n=args.pairs, T=args.T, seed=0)
    s = {"model": model, "task": task, "graph": build_graph(model), "device": device, "fns": {}}
    rows = torch.arange(len(task))
    if wanted & {"hf_fwd", "hf_fwd_bwd"}:
        lm = _common.hf_model(args.checkpoint, attn="sdpa", device=device, dtype=args.dtype, lm=True)
        ids = task.clean.to(device)

        def hf_fwd():
            with torch.inference_mode():
                lm(input_ids=ids)

        def hf_fwd_bwd():
            final = lm(input_ids=ids).logits[rows, task.lengths - 1]
            (final[rows, task.correct] - final[rows, task.incorrect]).sum().backward()
            lm.zero_grad(set_to_none=True)

        s["fns"] |= {"hf_fwd": hf_fwd, "hf_fwd_bwd": hf_fwd_bwd}
    if wanted & {"hf_eager", "census"}:
        _census_fns(args, s)
    return s


def _census_fns(args, s: dict) -> None:
    from headlens.analyses.heads.census import build_stimuli, run_census
    from headlens.probes.engine import batch_attention_mask
    from headlens.probes.prompts import iter_batches

    cfg = _common.census_config(n_prompts=args.n_prompts, batch_size=16, n_bootstrap=1000, attention="eager")
    assert cfg is not None
    stimuli = build_stimuli(s["model"], cfg, {"repeated", "natural", "referent"})
    batches = [(sub.tokens, batch_attention_mask(sub)) for stim in stimuli.values() for _, sub in iter_batches(stim.batch, 16)]
    hf = _common.hf_model(args.checkpoint, attn="eager", device=s["device"], dtype=args.dtype)
    s["fns"] |= {"hf_eager": lambda: _common.hf_forward(hf, batches, patterns=True), "census": lambda: run_census(s["model"], cfg)}
    s["n_tokens"] = int(sum(int(m.sum()) for _, m in batches))


def _circuit_fns(args, s: dict) -> None:
    import numpy as np

    from headlens.analyses.circuits.config import CircuitConfig
    from headlens.analyses.circuits.exact import exact_scores
    from headlens.analyses.circuits.run import run_circuit
    from headlens.analyses.circuits.scores import attribution_scores

    model, task, graph = s["model"], s["task"], s["graph"]
    bs = len(task)

    def eap_ig():
        s["ig"] = attribution_scores(model, task, graph, steps=args.steps, batch_size=bs)

    def exact_top():
        if "ig" not in s:
            eap_ig()
        ids = np.argsort(-np.abs(s["ig"].values.mean(0)), kind="stable")[: args.confirm]
        s["exact"] = exact_scores(model, task, graph, ids, batch_size=bs)

    cfg = CircuitConfig(steps=args.steps, n_bootstrap=args.n_bootstrap, batch_size=bs)
    s["fns"] |= {
        "eap_ig": eap_ig,
        "exact_top": exact_top,
        "circuit": lambda: s.__setitem__("run", run_circuit(model, task, cfg, graph=graph)),
    }


def _cpu(fn) -> dict:
    """Seconds of user and system CPU time and minor page faults of ``fn`` (this process)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    fn()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    user, system = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    return {
        "user_s": user,
        "system_s": system,
        "system_share": system / max(1e-9, user + system),
        "minor_faults": r1.ru_minflt - r0.ru_minflt,
    }


def one_mode(args) -> dict:
    import torch

    from headlens.analyses.circuits.graph import expected_edge_count

    timed = ["hf_eager", "census", "hf_fwd", "hf_fwd_bwd", "eap_ig", "exact_top"]
    wanted = set(timed) if args.mode == "paired" else {args.mode}
    s = _setup(args, wanted)
    _circuit_fns(args, s)
    model, graph = s["model"], s["graph"]
    info = {
        "threads": torch.get_num_threads(),
        "graph": graph.size(),
        "edges_without_gqa": expected_edge_count(model.n_layers, model.n_heads, model.n_heads),
        "n_kv_heads": model.n_kv_heads,
        "pairs": len(s["task"]),
        "width": int(s["task"].lengths.max()),
        "census_tokens": s.get("n_tokens"),
    }
    if args.mode != "paired":
        box: dict = {}
        out = _common.measure(lambda: box.update(_cpu(s["fns"][args.mode])), repeats=1, device=s["device"], warmup=False)
        if args.mode == "circuit":
            run = s["run"].summary
            out["circuit"] = {
                k: run.get(k) for k in ("n_circuit", "smallest_reaching_target", "circuit_faithfulness", "readable", "forwards")
            }
        return {**out, **box, **info}
    timing = _common.interleaved({m: s["fns"][m] for m in timed}, repeats=args.repeats, device=s["device"])
    timing["ratios"] = {m: _common.round_ratio(timing, m, floor) for m, (floor, _) in TARGETS.items()}
    timing["ratios"]["hf_fwd_bwd"] = _common.round_ratio(timing, "hf_fwd_bwd", "hf_fwd")
    timing["counted_forwards"] = {"exact_top": s["exact"].forwards, "eap_ig": s["ig"].forwards}
    return {**timing, **info}


def _rows(mem: dict, paired: dict) -> list[dict]:
    med, ratio = paired["medians_s"], paired["ratios"]
    rows = [
        {"mode": "hf_eager", "median_s": med["hf_eager"], "ratio": 1.0, "floor": "hf_eager"},
        {"mode": "census", "median_s": med["census"], "ratio": ratio["census"], "floor": "hf_eager", "target": 1.1},
        {"mode": "hf_fwd", "median_s": med["hf_fwd"], "ratio": 1.0, "floor": "hf_fwd"},
        {"mode": "hf_fwd_bwd", "median_s": med["hf_fwd_bwd"], "ratio": ratio["hf_fwd_bwd"], "floor": "hf_fwd", **_mem(mem, "hf_fwd_bwd")},
        {"mode": "eap_ig", "median_s": med["eap_ig"], "ratio": ratio["eap_ig"], "floor": "hf_fwd_bwd", "target": 10.0},
        {"mode": "exact_top", "median_s": med["exact_top"], "ratio": ratio["exact_top"], "floor": "hf_fwd", "target": 100.0},
    ]
    c, f = mem.get("circuit", {}), mem.get("hf_fwd_bwd", {})
    if "extra_MiB" in c and "extra_MiB" in f:
        rows.append({"mode": "circuit_memory", "median_s": c.get("median_s"), "ratio": c["extra_MiB"] / max(1.0, f["extra_MiB"]),
                     "floor": "hf_fwd_bwd", "target": MEMORY_TARGET, **_mem(mem, "circuit")})  # fmt: skip
    if "system_share" in c:
        rows.append(
            {"mode": "circuit_system", "median_s": None, "ratio": c["system_share"], "floor": "cpu time", "target": SYSTEM_SHARE_TARGET}
        )
    return rows


def _mem(mem: dict, mode: str) -> dict:
    return {k: mem[mode][k] for k in ("peak_MiB", "extra_MiB") if k in mem.get(mode, {})}


def _report(args, paired: dict, mem: dict, rows: list[dict], load0: tuple) -> list[str]:
    g, c = paired["graph"], mem.get("circuit", {})
    name = "tiny Llama (smoke)" if args.smoke else "SmolLM2-135M"
    by = ", ".join(f"{k} {v:,}" for k, v in g["by_input"].items())
    nan = float("nan")
    return [
        f"{name}: {paired['pairs']} pairs x {paired['width']} tokens, EAP-IG {args.steps} steps, top {args.confirm} confirmed, "
        f"census {args.n_prompts} prompts per set ({paired['census_tokens']} tokens), {args.repeats} rounds, "
        f"{paired['threads']} threads, load average {load0[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end",
        *_common.table(rows),
        f"edges with GQA ({paired['n_kv_heads']} key-value heads): {g['n_edges']:,} ({by}); without GQA {paired['edges_without_gqa']:,}",
        f"exact_top counted {paired['counted_forwards']['exact_top']:.1f} forward equivalents; circuit run: user "
        f"{c.get('user_s', nan):.1f} s, system {c.get('system_s', nan):.1f} s, {c.get('minor_faults', 0):,} minor page faults",
        f"circuit: {c.get('circuit')}",
    ]


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--T", type=int, default=20, help="tokens repeated per induction pair (width 1 + T + T // 2)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--confirm", type=int, default=100)
    p.add_argument("--n-prompts", type=int, default=16)
    p.add_argument("--n-bootstrap", type=int, default=1000)
    p.add_argument("--smoke", action="store_true", help="a tiny Llama with GQA and tiny settings: a check, not a measurement")
    p.set_defaults(repeats=1, threads=2)
    args = p.parse_args()
    if args.smoke:
        args.pairs, args.T, args.steps, args.confirm, args.n_prompts, args.n_bootstrap = 4, 6, 2, 10, 2, 20
    _common.setup_threads(args.threads)
    if args.mode:
        print(json.dumps(one_mode(args), default=str))
        return
    args.checkpoint = str(_folder(args))
    extra = ["--checkpoint", args.checkpoint, "--device", args.device, "--dtype", args.dtype, "--threads", str(args.threads),
             "--repeats", str(args.repeats), "--cache", args.cache]  # fmt: skip
    for name in ("pairs", "T", "steps", "confirm", "n_prompts", "n_bootstrap"):
        extra += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    extra += ["--smoke"] if args.smoke else []
    load0, t0 = os.getloadavg(), time.time()
    mem = _common.run_modes(__file__, ["hf_fwd_bwd", "circuit"], extra)
    paired = _common.run_modes(__file__, ["paired"], extra)["paired"]
    if "error" in paired:
        sys.exit(f"paired timing failed: {paired['error']}")
    rows = _rows(mem, paired)
    for line in _report(args, paired, mem, rows, load0):
        print(line)
    _common.write_json(args.json, {"memory": mem, "timing": paired, "rows": rows, "args": vars(args), "load": [load0, os.getloadavg()],
                                   "wall_s": time.time() - t0})  # fmt: skip


if __name__ == "__main__":
    main()
