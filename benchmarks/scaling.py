"""Scaling: peak memory and time of the eager and the streaming census against sequence length.

    python benchmarks/scaling.py [--lengths 512,1024,2048,4096] [--device auto] [--dtype float32] [--threads 2]
                                 [--out docs/figures] [--mode-timeout 300] [--query-block N]

Model: a Llama-shaped random checkpoint with a long context (default 4 layers, d_model 512,
8 query heads sharing 2 KV heads, MLP 1408, max_position_embeddings 16384; random weights:
cost does not depend on them).  Stimulus at length n: one sequence of (n - 1) // 2 distinct
random tokens repeated twice after BOS (the census's repeated-token set), scored by the
detectors that read it (duplicate_token, induction).  Modes, each (mode, n) alone in a fresh
process, a warm-up at 128 tokens first, then --repeats timed runs at n:
  hf_sdpa           plain transformers LlamaModel, SDPA attention, no patterns (the fastest forward)
  hf_eager          plain LlamaModel, eager attention, output_attentions=True (every layer's patterns)
  census_eager      headlens census, attention="eager" (each layer's [head, n, n] pattern in a hook)
  census_streaming  headlens census, attention="streaming" (query blocks; "not available" until
                    headlens has it)
Memory: CPU, peak resident set of the process minus its resident set after the warm-up (what
the run itself needed; weights and imports excluded; the absolute peak is in the CSV too);
CUDA, peak allocated device memory minus what was allocated before.  A mode whose estimated
eager patterns do not fit in the free memory, or that ran over --mode-timeout or failed at a
shorter length, is skipped at longer lengths (status in the CSV).  Writes scaling.csv,
scaling.json and the two-panel figure scaling.png (log-log) into --out, and prints the memory
ratio streaming / eager at 8192 tokens (target <= 0.1) or the longest length both ran.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

MODES = ["hf_sdpa", "hf_eager", "census_eager", "census_streaming"]
DETECTORS = ("duplicate_token", "induction")
LLAMA = {"n_layers": 4, "n_heads": 8, "n_kv_heads": 2, "d_model": 512, "d_mlp": 1408, "n_ctx": 16384, "init_std": 0.02}
TINY = {"n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "d_model": 64, "d_mlp": 128, "n_ctx": 4096, "init_std": 0.02}
COLUMNS = [
    "mode",
    "n_tokens",
    "seconds",
    "extra_MiB",
    "peak_MiB",
    "memory",
    "device",
    "dtype",
    "threads",
    "status",
    "max_abs_diff_vs_eager",
]
MEMORY_TARGET = 0.1


def build(cache: Path, shape: str) -> Path:
    from headlens.analyses.synthetic.families import build_family_checkpoint

    s = LLAMA if shape == "small" else TINY
    folder = cache / f"llama-long-{s['n_layers']}x{s['n_heads']}kv{s['n_kv_heads']}x{s['d_model']}-ctx{s['n_ctx']}"
    if not (folder / "config.json").exists():
        build_family_checkpoint(folder, "llama", **s)
    return folder


def _census_config(n: int, attention: str, query_block: int | None):
    kw = {
        "detectors": DETECTORS,
        "n_prompts": 1,
        "seq_len": max(2, (n - 1) // 2),
        "batch_size": 1,
        "n_bootstrap": 0,
        "attention": attention,
    }
    if query_block:
        kw["query_block"] = query_block
    return _common.census_config(**kw)


def one_mode(args) -> dict:
    """One (mode, n) in this process: warm up at 128 tokens, then time and measure at n."""
    import torch

    from headlens.analyses.heads.census import run_census
    from headlens.probes.loading import load_model

    _common.setup_threads(args.threads)
    device = _common.resolve_device(args.device)
    n = args.n
    last: dict = {}  # the census's last result
    info = {"mode": args.mode, "n_tokens": n, "device": device, "dtype": args.dtype, "threads": torch.get_num_threads()}
    if args.mode.startswith("hf_"):
        attn = args.mode[3:]
        model = _common.hf_model(args.checkpoint, attn=attn, device=device, dtype=args.dtype)
        gen = torch.Generator().manual_seed(0)

        def run(length: int) -> Callable[[], object] | None:
            tokens = torch.randint(0, 50256, (1, length), generator=gen)
            return lambda: _common.hf_forward(model, [(tokens, torch.ones_like(tokens))], patterns=attn == "eager")

    else:
        loaded = load_model(model=args.checkpoint, device=device, dtype=args.dtype)
        attention = args.mode.split("_", 1)[1]

        def run(length: int) -> Callable[[], object] | None:  # pyright: ignore[reportRedeclaration] - one per branch
            config = _census_config(length, attention, args.query_block)
            if config is None:
                return None

            def census() -> None:
                last["result"] = run_census(loaded, config)

            return census

    warm = run(128)
    if warm is None:
        return {**info, "status": "not available"}
    warm()
    main = run(n)
    if main is None:
        return {**info, "status": "not available"}
    res = _common.measure(main, repeats=args.repeats, device=device, warmup=False)
    out = {
        **info,
        "seconds": res["median_s"],
        "extra_MiB": res["extra_MiB"],
        "peak_MiB": res["peak_MiB"],
        "memory": res["memory"],
        "status": "ok",
    }
    if "result" in last:  # the last run's scores, to compare streaming with eager
        out["scores"] = last["result"].scores["score"].astype(float).tolist()
    return out


def _estimate_bytes(mode: str, n: int, shape: dict, dtype: str) -> float:
    """Rough peak bytes of the patterns of ``mode`` at ``n`` tokens (the term that grows as n^2)."""
    size = 2 if dtype in ("float16", "bfloat16") else 4
    layer = shape["n_heads"] * n * n * size
    return {"hf_eager": (shape["n_layers"] + 2) * layer, "census_eager": 4 * layer}.get(mode, 0.0)


def _free_bytes(device: str) -> float:
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.mem_get_info()[0])
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024.0
    return math.inf


def sweep(args) -> list[dict]:
    shape = LLAMA if args.shape == "small" else TINY
    folder = build(Path(args.cache), args.shape)
    device = _common.resolve_device(args.device)
    lengths = [int(x) for x in args.lengths.split(",")]
    if max(lengths) > shape["n_ctx"]:
        sys.exit(f"--lengths goes to {max(lengths)} tokens; the model's context is {shape['n_ctx']}")
    rows: list[dict] = []
    stopped: dict[str, str] = {}
    for n in lengths:
        for mode in MODES:
            base = {"mode": mode, "n_tokens": n, "device": device, "dtype": args.dtype}
            if mode in stopped:
                rows.append({**base, "status": f"skipped: {stopped[mode]}"})
                continue
            need, free = _estimate_bytes(mode, n, shape, args.dtype), _free_bytes(device)
            if need > 0.7 * free:
                stopped[mode] = f"patterns need about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free at {n} tokens"
                rows.append({**base, "status": f"skipped: {stopped[mode]}"})
                continue
            extra = [
                "--checkpoint",
                str(folder),
                "--n",
                str(n),
                "--repeats",
                str(args.repeats),
                "--device",
                device,
                "--dtype",
                args.dtype,
                "--threads",
                str(args.threads),
            ]
            if args.query_block:
                extra += ["--query-block", str(args.query_block)]
            r = _common.run_modes(__file__, [mode], extra, timeout=args.mode_timeout)[mode]
            if "error" in r:
                stopped[mode] = f"{r['error']} at {n} tokens"
                rows.append({**base, "status": f"failed: {r['error']}"})
            else:
                rows.append(r)
                if r.get("status") == "not available":
                    stopped[mode] = "not available"
        eager = next((r for r in rows if r["mode"] == "census_eager" and r["n_tokens"] == n and "scores" in r), None)
        stream = next((r for r in rows if r["mode"] == "census_streaming" and r["n_tokens"] == n and "scores" in r), None)
        if eager and stream:
            diffs = [abs(a - b) for a, b in zip(eager["scores"], stream["scores"], strict=True) if not (math.isnan(a) and math.isnan(b))]
            stream["max_abs_diff_vs_eager"] = max(diffs) if diffs else float("nan")
        print(f"  {n} tokens done", file=sys.stderr)
    return rows


def figure(rows: list[dict], path: Path, title: str) -> None:
    """Two panels, log-log: extra peak memory and seconds against tokens, one line per mode."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax_mem, ax_time = fig.subplots(1, 2)
    styles = {
        "hf_sdpa": ("tab:gray", "--"),
        "hf_eager": ("tab:gray", ":"),
        "census_eager": ("tab:red", "-"),
        "census_streaming": ("tab:blue", "-"),
    }
    for mode in MODES:
        pts = [(r["n_tokens"], r["extra_MiB"], r["seconds"]) for r in rows if r["mode"] == mode and r.get("status") == "ok"]
        if not pts:
            continue
        color, ls = styles[mode]
        xs = [p[0] for p in pts]
        ax_mem.plot(xs, [max(p[1], 1e-1) for p in pts], marker="o", color=color, linestyle=ls, label=mode)
        ax_time.plot(xs, [p[2] for p in pts], marker="o", color=color, linestyle=ls, label=mode)
    kind = next((r["memory"] for r in rows if r.get("memory")), "")
    for ax, ylabel in ((ax_mem, f"peak memory above baseline (MiB, {kind})"), (ax_time, "seconds per census / forward")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens in the sequence (n)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_mem.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)


def main() -> None:
    p = _common.parser(__doc__ or "")
    p.add_argument("--n", type=int, default=None, help=argparse_suppress())
    p.add_argument("--lengths", default="512,1024,2048,4096")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "figures"))
    p.add_argument(
        "--mode-timeout",
        type=float,
        default=300.0,
        help="seconds one (mode, length) may take before longer lengths of that mode are skipped",
    )
    p.add_argument("--query-block", type=int, default=None, help="the streaming census's query block (default: headlens' choice)")
    p.set_defaults(repeats=1)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args)))
        return
    rows = sweep(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scaling.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (out / "scaling.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "scores"} for r in rows], indent=1) + "\n")
    shape = LLAMA if args.shape == "small" else TINY
    device = _common.resolve_device(args.device)
    title = (
        f"Llama-shaped random model ({shape['n_layers']} layers, {shape['n_heads']} query / {shape['n_kv_heads']} KV heads, "
        f"d_model {shape['d_model']}), one sequence, {device}, {args.dtype}"
    )
    figure(rows, out / "scaling.png", title)
    print(f"{'mode':<18}{'n':>7}{'seconds':>10}{'extra MiB':>11}{'peak MiB':>10}  status")
    for r in rows:
        s, e, pk = r.get("seconds"), r.get("extra_MiB"), r.get("peak_MiB")
        cells = (f"{s:.3f}" if s is not None else "-", f"{e:.0f}" if e is not None else "-", f"{pk:.0f}" if pk is not None else "-")
        print(
            f"{r['mode']:<18}{r['n_tokens']:>7}{cells[0]:>10}{cells[1]:>11}{cells[2]:>10}  {r.get('status', '')}"
            + (f" (max |score - eager| {r['max_abs_diff_vs_eager']:.1e})" if r.get("max_abs_diff_vs_eager") is not None else "")
        )
    ok = {(r["mode"], r["n_tokens"]): r for r in rows if r.get("status") == "ok"}
    both = [n for n in sorted({r["n_tokens"] for r in rows}) if ("census_eager", n) in ok and ("census_streaming", n) in ok]
    if both:
        n = 8192 if 8192 in both else both[-1]
        ratio = ok[("census_streaming", n)]["extra_MiB"] / ok[("census_eager", n)]["extra_MiB"]
        met = "yes" if ratio <= MEMORY_TARGET else "NO"
        print(
            f"memory streaming / eager census at {n} tokens = {ratio:.3f} (target <= {MEMORY_TARGET} at 8192; met: "
            f"{met if n == 8192 else 'not measured at 8192'})"
        )
    else:
        print("memory streaming / eager census: not measured (no length where both ran)")
    print(f"wrote {out / 'scaling.csv'}, {out / 'scaling.png'}")


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
