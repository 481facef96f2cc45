"""Shared benchmark plumbing: a GPT-2-small-shaped checkpoint, timing, peak memory.

Each mode runs in its own subprocess so that its peak resident memory (CPU) is its
own; on CUDA the peak of allocated device memory is read directly.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def checkpoint(cache: Path, *, n_layer: int = 12, n_head: int = 12, d_model: int = 768, n_ctx: int = 1024) -> Path:
    """Build (once) a randomly initialised GPT-2-shaped checkpoint under ``cache``."""
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint

    folder = cache / f"gpt2shape-{n_layer}x{n_head}x{d_model}"
    if not (folder / "config.json").exists():
        build_tiny_checkpoint(folder, TinySpec(n_layer=n_layer, n_head=n_head, d_model=d_model, n_ctx=n_ctx, seed=0))
    return folder


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(fn: Callable[[], object], *, repeats: int, device: str) -> dict:
    """Run ``fn`` once to warm up, then ``repeats`` times; median seconds and peak memory."""
    import torch

    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if device.startswith("cuda"):
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        kind = "cuda_peak_alloc_MiB"
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        kind = "cpu_peak_rss_MiB"
    return {"median_s": statistics.median(times), "times_s": times, "peak_MiB": peak, "memory": kind}


def run_modes(script: str, modes: list[str], extra: list[str]) -> dict[str, dict]:
    """Run ``script --mode M`` for each mode in a subprocess; each prints one JSON line last."""
    results = {}
    for mode in modes:
        out = subprocess.run([sys.executable, script, "--mode", mode, *extra], check=True, capture_output=True, text=True)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[mode]
        if "median_s" in r:
            print(f"  {mode}: {r['median_s']:.3f} s, peak {r['peak_MiB']:.0f} MiB", file=sys.stderr)
    return results


def interleaved(fns: dict[str, Callable[[], object]], *, repeats: int, device: str) -> dict:
    """Time ``fns`` in turn, ``repeats`` rounds after a warm-up round, in this process.

    Contention from other work then hits every mode alike; ratios should be taken per round
    (see :func:`round_ratio`).  Returns per-mode lists of seconds and their medians.
    """
    import torch

    times: dict[str, list[float]] = {name: [] for name in fns}
    for rnd in range(repeats + 1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            if rnd:  # round 0 warms up
                times[name].append(time.perf_counter() - t0)
    return {"times_s": times, "medians_s": {name: statistics.median(t) for name, t in times.items()}}


def round_ratio(timing: dict, num: str, den: str) -> float:
    """Median over rounds of ``time[num] / time[den]`` measured in the same round."""
    t = timing["times_s"]
    return statistics.median(a / b for a, b in zip(t[num], t[den]))


def parser(doc: str, *, repeats: bool = True):
    """The options every benchmark shares: --repeats, --device, --dtype, --cache (and the
    hidden --mode/--checkpoint its subprocesses are called with)."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    if repeats:
        p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "headlens-bench"))
    return p


def forwarded(args, names: list[str]) -> list[str]:
    """Command-line options for a mode subprocess: the checkpoint plus ``names`` (argparse dests)."""
    extra = ["--checkpoint", str(checkpoint(Path(args.cache)))]
    for name in names + [n for n in ("repeats", "device", "dtype") if hasattr(args, n)]:
        extra += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return extra
