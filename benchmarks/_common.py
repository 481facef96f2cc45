"""Shared benchmark plumbing: checkpoints, the plain Hugging Face floor, timing, peak memory, the table.

The floor of every benchmark is the plain Hugging Face forward a user would run without
headlens, over exactly the same token batches and attention masks: ``AutoModel`` (no LM
head) loaded from the same checkpoint folder, ``attn_implementation="eager"`` with
``output_attentions=True`` where the headlens mode needs attention patterns, ``"sdpa"``
where it does not.  The bridge's own forward is timed beside it, never used as the floor.

Each mode's peak memory is measured alone, in its own subprocess, so it is its own: on the
CPU the peak resident set (``ru_maxrss``) and that peak minus the resident set just before
the mode first ran (``extra_MiB``: what the mode itself needed, weights and imports left
out); on CUDA the peak of allocated device memory above what was allocated before.
Timing runs the modes in turn in one process, a warm-up round then ``--repeats`` rounds,
so contention from other work hits every mode alike; ratios are medians of per-round ratios.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: ``--shape``: the GPT-2-shaped random checkpoints (``tiny`` is for smoke tests only).
SHAPES = {
    "small": {"n_layer": 12, "n_head": 12, "d_model": 768, "n_ctx": 1024},
    "tiny": {"n_layer": 2, "n_head": 4, "d_model": 64, "n_ctx": 256},
}


def checkpoint(cache: Path, *, shape: str = "small") -> Path:
    """Build (once) a randomly initialised GPT-2-shaped checkpoint under ``cache``."""
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint

    s = SHAPES[shape]
    folder = Path(cache) / f"gpt2shape-{s['n_layer']}x{s['n_head']}x{s['d_model']}"
    if not (folder / "config.json").exists():
        build_tiny_checkpoint(folder, TinySpec(**s, seed=0))
    return folder


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def setup_threads(threads: int) -> None:
    """``--threads N`` (N > 0): torch's intra-op threads for this process."""
    import torch

    if threads and threads > 0:
        torch.set_num_threads(threads)


def hf_model(folder: Path | str, *, attn: str, device: str, dtype: str, lm: bool = False):
    """The plain Hugging Face model of ``folder`` (``AutoModel``; ``AutoModelForCausalLM`` with ``lm``)."""
    from transformers import AutoModel, AutoModelForCausalLM

    cls = AutoModelForCausalLM if lm else AutoModel
    model: Any = cls.from_pretrained(str(folder), attn_implementation=attn, dtype=torch_dtype(dtype))
    return model.to(resolve_device(device)).eval()


def hf_forward(model, batches: list[tuple], *, patterns: bool) -> None:
    """Plain forward of ``model`` over ``batches`` of ``(tokens, attention_mask)``; the patterns
    are returned by every layer with ``patterns`` (eager attention), as a user would ask."""
    import torch

    device = next(model.parameters()).device
    with torch.inference_mode():
        for tokens, mask in batches:
            kw = {"output_attentions": True} if patterns else {}
            model(input_ids=tokens.to(device), attention_mask=mask.to(device), **kw)


def bridge_forward(loaded, batches: list[tuple]) -> None:
    """The bridge's own forward through every block (no unembedding), same batches and masks."""
    import torch

    from headlens.probes.capture import run_forward

    with torch.inference_mode():
        for tokens, mask in batches:
            run_forward(loaded, tokens, attention_mask=mask)


def _peak(device: str, base: float) -> dict:
    import torch

    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() / 2**20
        return {"peak_MiB": peak - base, "extra_MiB": peak - base, "memory": "cuda_peak_alloc_MiB"}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"peak_MiB": peak, "extra_MiB": peak - base, "memory": "cpu_peak_rss_MiB"}


def _base(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    return rss_mib()


def measure(fn: Callable[[], object], *, repeats: int, device: str, warmup: bool = True) -> dict:
    """Run ``fn`` once to warm up (unless ``warmup`` is False), then ``repeats`` times; median
    seconds and peak memory (see the module docstring; the warm-up counts towards the peak)."""
    import torch

    base = _base(device)
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "times_s": times, **_peak(device, base)}


def run_modes(script: str, modes: list[str], extra: list[str], *, timeout: float | None = None) -> dict[str, dict]:
    """Run ``script --mode M`` for each mode in a subprocess; each prints one JSON line last.

    A mode that fails (or exceeds ``timeout`` seconds) is reported as ``{"error": ...}`` and the
    others still run."""
    results = {}
    for mode in modes:
        try:
            out = subprocess.run(
                [sys.executable, script, "--mode", mode, *extra], check=True, capture_output=True, text=True, timeout=timeout
            )
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            results[mode] = {"error": f"over {timeout:.0f} s"}
        except (subprocess.CalledProcessError, json.JSONDecodeError, IndexError) as exc:
            tail = (getattr(exc, "stderr", "") or "").strip().splitlines()[-1:] or [str(exc)]
            results[mode] = {"error": tail[0][:200]}
        r = results[mode]
        if "median_s" in r:
            print(f"  {mode}: {r['median_s']:.3f} s, peak {r['peak_MiB']:.0f} MiB ({r['extra_MiB']:+.0f} MiB)", file=sys.stderr)
        elif "error" in r:
            print(f"  {mode}: failed: {r['error']}", file=sys.stderr)
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
    return statistics.median(a / b for a, b in zip(t[num], t[den], strict=True))


def ratios(timing: dict, floors: dict[str, str]) -> dict[str, float]:
    """``{mode: median per-round ratio to its floor}`` for every timed mode; ``floors`` maps a
    mode to its floor (modes not named there are compared with the first floor given)."""
    default = next(iter(floors.values()))
    return {m: round_ratio(timing, m, floors.get(m, default)) for m in timing["times_s"]}


def table(rows: Iterable[dict], *, floor_note: str = "") -> list[str]:
    """The result table: mode, median seconds, ratio to its floor, floor, target, met.

    Each row: ``mode``, ``median_s``, optional ``ratio``, ``floor``, ``target`` (a ratio the
    mode must stay at or under), ``peak_MiB``/``extra_MiB`` (memory, each mode alone)."""
    lines = [f"{'mode':<18}{'median s':>10}{'ratio':>8}  {'floor':<10}{'target':>8}{'met':>5}{'peak MiB':>10}{'extra MiB':>11}"]
    for r in rows:
        t = r.get("median_s")
        ratio, target = r.get("ratio"), r.get("target")
        met = "-" if target is None or ratio is None else ("yes" if ratio <= target else "NO")
        mem = r.get("peak_MiB")
        extra = r.get("extra_MiB")
        lines.append(
            f"{r['mode']:<18}{(f'{t:.3f}' if t is not None else '-'):>10}{(f'{ratio:.3f}' if ratio is not None else '-'):>8}  "
            f"{(r.get('floor') or '-'):<10}{(f'<= {target:g}' if target is not None else '-'):>8}{met:>5}"
            f"{(f'{mem:.0f}' if mem is not None else '-'):>10}{(f'{extra:+.0f}' if extra is not None else '-'):>11}"
        )
    if floor_note:
        lines.append(floor_note)
    return lines


def census_config(**kwargs):
    """A :class:`CensusConfig`; ``attention`` (eager/streaming/auto) and ``query_block`` are
    passed only where this headlens has them (``None`` when ``attention`` is asked for and
    missing: that mode is not available yet)."""
    import dataclasses

    from headlens.analyses.heads.census import CensusConfig

    names = {f.name for f in dataclasses.fields(CensusConfig)}
    for key in ("attention", "query_block"):
        if key in kwargs and key not in names:
            if key == "attention" and kwargs[key] != "eager":
                return None
            kwargs.pop(key)
    return CensusConfig(**kwargs)


def parser(doc: str | None, *, repeats: bool = True):
    """The options every benchmark shares: --repeats, --device, --dtype, --threads, --shape,
    --cache (and the hidden --mode/--checkpoint its subprocesses are called with)."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    if repeats:
        p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (default: torch's choice)")
    p.add_argument("--shape", default="small", choices=sorted(SHAPES), help="model shape (tiny: smoke tests only)")
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "headlens-bench"))
    p.add_argument("--json", default=None, help="also write every measurement to this JSON file")
    return p


def forwarded(args, names: list[str]) -> list[str]:
    """Command-line options for a mode subprocess: the checkpoint plus ``names`` (argparse dests)."""
    extra = ["--checkpoint", str(checkpoint(Path(args.cache), shape=args.shape))]
    for name in names + [n for n in ("repeats", "device", "dtype", "threads", "shape") if hasattr(args, n)]:
        extra += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return extra


def measure_against_floor(
    script: str, modes: list[str], extra: list[str], *, floor: str, target_mode: str, target: float
) -> tuple[dict, dict, list[dict]]:
    """Memory of each mode in its own process, then the interleaved timing (mode ``paired``) in one
    more; returns ``(memory, timing, table rows)`` with every ratio taken to ``floor`` and the
    target on ``target_mode``.  A failed timing run ends the script with its error."""
    mem = run_modes(script, modes, extra)
    paired = run_modes(script, ["paired"], extra)["paired"]
    if "error" in paired:
        sys.exit(f"paired timing failed: {paired['error']}")
    rows = []
    for m in modes:
        row = {
            "mode": m,
            "median_s": paired["medians_s"][m],
            "ratio": paired["ratios"][m],
            "floor": floor,
            "target": target if m == target_mode else None,
        }
        row.update({k: mem[m][k] for k in ("peak_MiB", "extra_MiB") if k in mem[m]})
        rows.append(row)
    return mem, paired, rows


def write_json(path: str | None, payload: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=1, default=str) + "\n")
