"""The head census: every registered detector, every head, one streaming pass per stimulus set.

For each stimulus set (repeated random tokens, natural-text windows, referent sentences)
the model runs once over batches; a hook on each layer's ``hook_pattern`` hands the
pattern to every detector that reads that stimulus, which reduces it to per-prompt,
per-head scores on the spot.  Only those ``[prompt, layer, head]`` numbers are kept.

Sliding windows: each layer's window (from :func:`probes.attention.attention_spec`) goes to
the detectors in ``BatchContext.window`` (unless it is at least as long as the longest prompt,
when it changes nothing).  On a window layer baselines are uniform over the
keys the window allows, and positions whose target lies outside it are not measurable: a
prompt with none left scores NaN, table means skip NaN prompts (``n`` counts the measured
ones), a cell with no measured prompt is NaN (never a role), and ``CensusResult.notes`` says
per window layer and detector what was and was not measured (also in the stimuli info as
``window_notes``, which the summary and the manifest carry).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from analyses.bootstrap import bootstrap_mean_ci
from analyses.detectors import BatchContext, Detector, get_detectors
from probes.attention import attention_spec
from probes.capture import run_forward
from probes.errors import InputError
from probes.hooks import attached
from probes.loading import LoadedModel, check_layers_heads
from probes.prompts import TokenBatch, iter_batches, token_strings

__all__ = ["CensusConfig", "CensusResult", "StimulusSet", "build_stimuli", "run_census", "layer_windows", "SCORE_COLUMNS", "NOTE_COLUMNS"]

SCORE_COLUMNS = ["layer", "head", "detector", "score", "baseline", "ci_low", "ci_high", "n", "accuracy"]
#: One row per (sliding-window layer, detector): ``n_measured`` of ``n`` prompts had a target inside the window.
NOTE_COLUMNS = ["layer", "detector", "window", "n_measured", "n", "note"]


@dataclass(frozen=True, kw_only=True)
class CensusConfig:
    """Settings of a census run; all of them go into the manifest.

    ``n_prompts`` is per stimulus set; natural-text windows and the referent sentences
    are capped at what the text and the sentence set hold (the table's ``n`` says how
    many were used).  ``ablate`` lists heads zeroed on ``hook_z`` during the census (to
    census a pruned model).
    """

    detectors: tuple[str, ...] | None = None
    n_prompts: int = 100
    seq_len: int = 50
    window: int = 64
    prepend_bos: bool = True
    seed: int = 0
    batch_size: int = 16
    n_bootstrap: int = 1000
    referent_file: str | None = None
    ablate: tuple[tuple[int, int], ...] = ()


@dataclass
class StimulusSet:
    kind: str
    batch: TokenBatch
    seq_len: int | None = None
    positions: dict[str, Tensor] = field(default_factory=dict)
    source: str = ""


@dataclass
class CensusResult:
    scores: pd.DataFrame
    per_prompt: dict[str, np.ndarray]  # detector -> [prompt, layer, head]
    stimuli: dict[str, dict[str, Any]]
    config: CensusConfig
    notes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=NOTE_COLUMNS))


def layer_windows(model: LoadedModel, max_len: int | None = None) -> list[int | None]:
    """Each layer's sliding window in keys (None: full causal attention).  With ``max_len``, a
    window of at least ``max_len`` keys is None too: on prompts that short it changes nothing."""
    windows = [layer.window for layer in attention_spec(model).layers]
    if max_len is None:
        return windows
    return [w if w is not None and w < max_len else None for w in windows]


def _batch_from_rows(rows: list[list[int]], tokenizer: Any, prepend_bos: bool) -> TokenBatch:
    width = max(len(r) for r in rows)
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.bos_token_id or 0))
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return TokenBatch(
        tokens=tokens,
        lengths=torch.tensor([len(r) for r in rows]),
        strings=[token_strings(tokenizer, r) for r in rows],
        prepend_bos=prepend_bos,
        pad_id=pad,
    )


def build_stimuli(model: LoadedModel, config: CensusConfig, kinds: set[str]) -> dict[str, StimulusSet]:
    """Build the stimulus sets the chosen detectors need, checking they fit the model."""
    from analyses.stimuli import eval_text, load_referent_file, locate_tokens, random_repeated_tokens, referent_items, text_windows

    tok = model.tokenizer
    bos = [model.bos_id] if config.prepend_bos else []
    if config.prepend_bos and model.bos_id is None:
        raise InputError("this model's tokenizer has no BOS token; run with --no-bos")
    out: dict[str, StimulusSet] = {}
    if "repeated" in kinds:
        need = 2 * config.seq_len + len(bos)
        if need > model.n_ctx:
            raise InputError(f"--seq-len {config.seq_len} needs {need} positions; the model's context is {model.n_ctx}")
        vocab = min(len(tok), int(getattr(model.bridge.cfg, "d_vocab", len(tok))))
        seqs = random_repeated_tokens(config.n_prompts, config.seq_len, config.seed, vocab, exclude=set(tok.all_special_ids), distinct=True)
        rows = [bos + s.tolist() for s in seqs]
        out["repeated"] = StimulusSet(
            "repeated", _batch_from_rows(rows, tok, config.prepend_bos), seq_len=config.seq_len,
            source=f"{config.n_prompts} sequences of {config.seq_len} distinct random tokens, repeated twice (seed {config.seed})",
        )
    if "natural" in kinds:
        if config.window > model.n_ctx:
            raise InputError(f"--window {config.window} is larger than the model's context of {model.n_ctx}")
        windows = text_windows(tok, eval_text(), config.window, None, config.prepend_bos, model.bos_id)[: config.n_prompts]
        rows = [w.tolist() for w in windows]
        out["natural"] = StimulusSet(
            "natural", _batch_from_rows(rows, tok, config.prepend_bos),
            source=f"{len(rows)} consecutive {config.window}-token windows of headlens' evaluation text",
        )
    if "referent" in kinds:
        items = load_referent_file(config.referent_file) if config.referent_file else referent_items(n=config.n_prompts, seed=config.seed)
        if config.referent_file:
            items = items[: config.n_prompts]
        located = locate_tokens(items, tok, config.prepend_bos)
        rows = [list(item.token_ids) for item in located]
        too_long = [i for i, r in enumerate(rows) if len(r) > model.n_ctx]
        if too_long:
            raise InputError(f"referent item {too_long[0]} is longer than the model's context of {model.n_ctx}")
        out["referent"] = StimulusSet(
            "referent", _batch_from_rows(rows, tok, config.prepend_bos),
            positions={k: torch.tensor([getattr(x, k) for x in located]) for k in ("pronoun", "antecedent", "distractor")},
            source=config.referent_file or f"{len(rows)} headlens referent sentences (seed {config.seed})",
        )
    return out


def _ablation_hooks(model: LoadedModel, heads: tuple[tuple[int, int], ...]) -> list[tuple[str, Callable[..., Any]]]:
    by_layer = check_layers_heads(model, None, heads) if heads else {}
    hooks = []
    for layer, hs in by_layer.items():
        idx = torch.tensor(hs)

        def zero(z: Tensor, hook: Any, idx: Tensor = idx) -> Tensor:
            z = z.clone()
            z[:, :, idx.to(z.device)] = 0
            return z

        hooks.append((f"blocks.{layer}.attn.hook_z", zero))
    return hooks


def _stream(
    model: LoadedModel,
    stim: StimulusSet,
    detectors: list[Detector],
    config: CensusConfig,
    progress: Callable[[int, int], None] | None,
    windows: list[int | None],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """Per detector: scores ``[prompt, layer, head]``, baselines ``[prompt, layer]``, extras."""
    n, L, H = len(stim.batch), model.n_layers, model.n_heads
    scores = {d.name: np.full((n, L, H), np.nan, dtype=np.float64) for d in detectors}
    baselines = {d.name: np.full((n, L), np.nan, dtype=np.float64) for d in detectors}
    extras: dict[str, dict[str, np.ndarray]] = {d.name: {} for d in detectors}
    state: dict[str, Any] = {}

    def make_hook(layer: int) -> Callable[..., None]:
        def hook(pattern: Tensor, hook: Any = None) -> None:
            rows, ctx = state["rows"], state["ctx"]
            if windows[layer] is not None:
                ctx = replace(ctx, window=windows[layer])
            for det in detectors:
                result = det.compute(pattern, ctx)
                scores[det.name][rows, layer] = result.score.double().cpu().numpy()
                baselines[det.name][rows, layer] = result.baseline.double().cpu().numpy()
                for key, value in result.extra.items():
                    arr = extras[det.name].setdefault(key, np.full((n, L, H), np.nan))
                    arr[rows, layer] = value.double().cpu().numpy()

        return hook

    hooks = _ablation_hooks(model, config.ablate) + [(f"blocks.{layer}.attn.hook_pattern", make_hook(layer)) for layer in range(L)]
    chunks = iter_batches(stim.batch, config.batch_size)
    offset = 1 if stim.batch.prepend_bos else 0
    with torch.inference_mode(), attached(model.bridge, hooks):
        for done, (rows, sub) in enumerate(chunks, start=1):
            pos = {k: v[rows] for k, v in stim.positions.items()}
            state["rows"] = rows
            state["ctx"] = BatchContext(lengths=sub.lengths.to(model.device), offset=offset, seq_len=stim.seq_len, **pos)
            run_forward(model, sub.tokens, stop_after=f"blocks.{L - 1}.attn.hook_pattern")
            if progress is not None:
                progress(done, len(chunks))
    return scores, baselines, extras


def _mean0(values: np.ndarray) -> np.ndarray:
    """Mean over prompts (axis 0); cells with NaN prompts (not measurable there) use the others,
    and a cell with none is NaN.  Cells without NaN are exactly ``values.mean(0)``."""
    if values.ndim == 1:
        if not np.isnan(values).any():
            return values.mean()
        return np.nanmean(values) if (~np.isnan(values)).any() else np.float64("nan")
    out = values.mean(0)
    bad = np.isnan(out)
    if bad.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells stay NaN
            out[bad] = np.nanmean(values[:, bad], axis=0)
    return out


def _window_notes(windows: list[int | None], stim: StimulusSet, det: Detector, baselines: np.ndarray) -> list[dict[str, Any]]:
    """One note per sliding-window layer: what ``det`` could measure there."""
    rows = []
    for layer, w in enumerate(windows):
        if w is None:
            continue
        n = int(baselines.shape[0])
        measured = int(np.isfinite(baselines[:, layer]).sum())
        of = f" of T={stim.seq_len} repeats" if stim.seq_len is not None else ""
        if measured == 0:
            status = f"{det.name} targets{of} lie outside it: not measurable"
        elif measured < n:
            status = f"{n - measured} of {n} prompts have no {det.name} target inside it and are left out; baseline uniform over the keys it allows, 1/min(i+1, {w})"
        else:
            status = f"baseline uniform over the keys it allows, 1/min(i+1, {w})"
        parts = [f"layer {layer}: sliding window of {w} keys", status]
        if det.window_rule:
            parts.append(det.window_rule.format(window=w, T=stim.seq_len))
        rows.append({"layer": layer, "detector": det.name, "window": w, "n_measured": measured, "n": n, "note": "; ".join(parts)})
    return rows


def run_census(
    model: LoadedModel,
    config: CensusConfig | None = None,
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> CensusResult:
    """Score every head with every chosen detector; returns the long-form table.

    ``progress(stage, done, total)`` is called after each batch.
    """
    config = config or CensusConfig()
    if config.n_prompts < 1:
        raise InputError(f"--n-prompts must be at least 1, got {config.n_prompts}")
    if config.seq_len < 2:
        raise InputError(f"--seq-len must be at least 2, got {config.seq_len}")
    if config.window < 2:
        raise InputError(f"--window must be at least 2, got {config.window}")
    detectors = get_detectors(list(config.detectors) if config.detectors is not None else None)
    kinds = {d.stimulus for d in detectors}
    stimuli = build_stimuli(model, config, kinds)
    per_prompt: dict[str, np.ndarray] = {}
    rows: list[dict[str, Any]] = []
    note_rows: list[dict[str, Any]] = []
    L, H = model.n_layers, model.n_heads
    for kind, stim in stimuli.items():
        windows = layer_windows(model, int(stim.batch.lengths.max()))
        dets = [d for d in detectors if d.stimulus == kind]
        cb = (lambda done, total, kind=kind: progress(kind, done, total)) if progress else None
        scores, baselines, extras = _stream(model, stim, dets, config, cb, windows)
        for det in dets:
            s = scores[det.name]
            per_prompt[det.name] = s
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN cell's interval is NaN
                low, high = bootstrap_mean_ci(s, n_resamples=config.n_bootstrap, seed=config.seed)
            mean = _mean0(s)
            measured = np.isfinite(s).sum(0)
            acc = extras[det.name].get("accuracy")
            acc_mean = _mean0(acc) if acc is not None else None
            b = baselines[det.name]
            note_rows += _window_notes(windows, stim, det, b)
            for layer in range(L):
                base = float(_mean0(np.ascontiguousarray(b[:, layer])))
                for head in range(H):
                    rows.append(
                        {
                            "layer": layer,
                            "head": head,
                            "detector": det.name,
                            "score": float(mean[layer, head]),
                            "baseline": base,
                            "ci_low": float(low[layer, head]),
                            "ci_high": float(high[layer, head]),
                            "n": int(measured[layer, head]),
                            "accuracy": float(acc_mean[layer, head]) if acc_mean is not None else float("nan"),
                        }
                    )
    table = pd.DataFrame(rows, columns=SCORE_COLUMNS)
    order = {d.name: i for i, d in enumerate(detectors)}
    table = table.sort_values(["detector", "layer", "head"], key=lambda c: c.map(order) if c.name == "detector" else c, kind="stable").reset_index(drop=True)
    info = {k: {"source": v.source, "n": len(v.batch), "max_len": int(v.batch.lengths.max()), "seq_len": v.seq_len} for k, v in stimuli.items()}
    notes = pd.DataFrame(note_rows, columns=NOTE_COLUMNS)
    stimulus_of = {d.name: d.stimulus for d in detectors}
    for kind in info:
        kind_notes = [r["note"] for r in note_rows if stimulus_of[r["detector"]] == kind]
        if kind_notes:
            info[kind]["window_notes"] = kind_notes
    return CensusResult(scores=table, per_prompt=per_prompt, stimuli=info, config=config, notes=notes)
