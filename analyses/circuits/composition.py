"""Weight-based composition between heads (no data needed): Q-, K- and V-composition with a random
baseline, and OV copying scores.

Conventions (TransformerLens' row-vector convention: a residual row ``x`` becomes ``x @ W``):

* a head's OV circuit is ``W_OV = W_V W_O`` ``[d_model, d_model]``, its QK circuit
  ``W_QK = W_Q W_K^T`` (query rows against key rows);
* the composition of an earlier head A into a later head B is
  ``||W_OV^A M_B||_F / (||W_OV^A||_F ||M_B||_F)`` (Elhage et al. 2021) with
  ``M_B = W_QK^B`` (Q-composition: A writes what B's queries read), ``(W_QK^B)^T``
  (K-composition: A writes what B's keys read) or ``W_OV^B`` (V-composition) -- the same three
  scores as TransformerLens' ``all_composition_scores("Q"/"K"/"V")``.  Heads of one layer do
  not compose (they read the same stream); only ``sender layer < receiver layer`` is scored.
* grouped-query / multi-query attention: a query head reads its key-value group's ``W_K`` and
  ``W_V`` (head ``h`` reads KV head ``h // (n_heads / n_kv_heads)``), so two query heads of one
  group share their K/V matrices but not ``W_Q``/``W_O``.
* ``fold_ln=True`` (the default) scores the weights as TransformerLens' ``process_weights``
  leaves them (``fold_ln``, ``center_writing_weights``, ``center_unembed``): the gain of the norm in
  front of each attention layer is folded into that layer's ``W_Q``, ``W_K``, ``W_V`` (a Gemma
  norm's ``1 + weight`` included); under LayerNorm the readers are also centred (the norm removes
  the mean) and the writers ``W_O`` and ``W_E`` centred over ``d_model``; the final norm's gain is
  folded into ``W_U``, whose mean over the vocabulary is removed (the softmax ignores it).  A
  post-norm model (BERT, OPT with ``do_layer_norm_before=False``) has no norm in front of its
  attention to fold: its raw weights are scored and a note says so; a norm after the attention
  output (Gemma 2's ``post_attention_layernorm``) is not folded either (a note says so).  ``fold_ln=False``: the raw
  weights.  Biases never enter a composition score (they are not part of ``W_OV`` or ``W_QK``).
* the **baseline** of a score is the same score between matrices of the same shapes drawn i.i.d.
  Gaussian (``n_baseline`` samples, seeded ``seed + 1000 * MODES.index(mode)``: :func:`mode_baseline`,
  the one rule every caller uses): its mean, standard deviation and 99th percentile.  The sd is the
  spread of the random samples' scores (printed "sd over N random samples"), not an error bar.
  A score is *above its baseline* when it exceeds ``mean + BASELINE_Z * sd``.
* **OV copying** (Elhage et al.; Olsson et al. 2022): the eigenvalues of ``W_E W_OV W_U``
  ``[vocab, vocab]`` are, apart from zeros, those of ``W_O (W_U W_E) W_V`` ``[d_head, d_head]``
  (cyclic permutation), computed there.  ``copying = sum(lambda) / sum(|lambda|)`` (real part; +1: all
  eigenvalues positive, a copying head) and ``positive_share`` = the share of eigenvalue mass
  ``|lambda|`` with a positive real part.  ``diagonal``: among ``n_tokens`` sampled tokens, the
  share whose own logit is the largest of the sampled tokens' logits when the token is read through
  the head's OV circuit (Olsson et al.'s diagonal score, restricted to the sample so it stays cheap).
  Position embeddings and the norm's scale are left out (the scores are scale-invariant).

Everything is computed in float64 from the factored forms (``d_head x d_head`` matrices), never
forming a ``d_model x d_model`` product per pair.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.circuits.config import MAX_BASELINE, MODES, CompositionConfig
from headlens.analyses.circuits.weights import HeadWeights, centre, head_weights, norm_gain
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError, UnsupportedModelError
from headlens.probes.loading import LoadedModel

__all__ = [
    "BASELINE_Z",
    "COMPOSITION_COLUMNS",
    "COPYING_COLUMNS",
    "MODES",
    "CompositionConfig",
    "CompositionRun",
    "HeadWeights",
    "check_composition_config",
    "run_composition",
    "copying_scores",
    "head_weights",
    "mode_baseline",
    "pair_scores",
    "paired_scores",
    "random_baseline",
    "right_factors",
]

log = logging.getLogger(__name__)

#: A score is above its baseline when it exceeds the baseline's mean by this many standard deviations.
BASELINE_Z = 3.0
COMPOSITION_COLUMNS = [
    "sender",
    "receiver",
    "input",
    "sender_layer",
    "sender_head",
    "receiver_layer",
    "receiver_head",
    "score",
    "baseline_mean",
    "baseline_sd",
    "z",
    "ratio",
    "above_baseline",
]
COPYING_COLUMNS = ["name", "layer", "head", "copying", "positive_share", "diagonal"]
_DT = torch.float64


def check_composition_config(config: CompositionConfig) -> None:
    """One line per bad setting (parameter names as the library says them)."""
    modes = tuple(config.modes)
    if not modes or any(m not in MODES for m in modes):
        raise InputError(f"modes={modes!r}: choose one or more of {', '.join(MODES)}", modes=modes)
    if len(set(modes)) != len(modes):
        raise InputError(f"modes={modes!r} names a mode twice", modes=modes)
    if not 2 <= config.n_baseline <= MAX_BASELINE:
        raise InputError(f"n_baseline={config.n_baseline} must be between 2 and {MAX_BASELINE}", n_baseline=config.n_baseline)
    if not 0 <= config.n_tokens <= MAX_BASELINE:
        raise InputError(f"n_tokens={config.n_tokens} must be between 0 and {MAX_BASELINE}", n_tokens=config.n_tokens)


@dataclass
class CompositionRun:
    """``scores``: one row per (sender, receiver, input) with ``sender layer < receiver layer``
    (:data:`COMPOSITION_COLUMNS`); ``baseline``: per mode, the random matrices' mean, sd, 99th
    percentile; ``copying``: per head (:data:`COPYING_COLUMNS`), or None; ``summary``; ``notes``."""

    scores: pd.DataFrame
    baseline: pd.DataFrame
    copying: pd.DataFrame | None
    summary: dict[str, Any]
    notes: list[str] = field(default_factory=list)


# -- scores ---------------------------------------------------------------------------------
def right_factors(w: HeadWeights, mode: str) -> tuple[Tensor, Tensor]:
    """``(X, Y)`` with the receiver's matrix ``M = X Y^T`` (both ``[layer, head, d_model, d_head]``)."""
    if mode == "q":
        return w.W_Q, w.W_K
    if mode == "k":
        return w.W_K, w.W_Q
    return w.W_V, w.W_O.transpose(-2, -1)


def pair_scores(
    V: Float[Tensor, "a d_model d_head"],
    O: Float[Tensor, "a d_head d_model"],
    X: Float[Tensor, "b d_model d_head"],
    Y: Float[Tensor, "b d_model d_head"],
) -> Float[Tensor, "a b"]:
    """``||V_a O_a X_b Y_b^T||_F / (||V_a O_a||_F ||X_b Y_b^T||_F)`` for every a, b, from ``d_head x d_head`` factors:
    with ``M = O_a X_b``, ``G = V_a^T V_a`` and ``H = Y_b^T Y_b``, the numerator squared is ``tr(M^T G M H)``."""
    G = V.transpose(-2, -1) @ V  # [a, r, r]
    H = Y.transpose(-2, -1) @ Y  # [b, r, r]
    M = torch.einsum("ard,bds->abrs", O, X)
    GMH = torch.einsum("art,abts,bsu->abru", G, M, H)
    num = _root_of_sum(M * GMH)
    return num / (_norm_vo(G, O)[:, None] * _norm_xy(X, H)[None, :])


def _root_of_sum(t: Tensor) -> Tensor:
    """``sqrt(sum over the last two dimensions)``, clamped at 0 against rounding: a Frobenius norm from its square."""
    return t.sum(dim=(-2, -1)).clamp_min(0).sqrt()


def _norm_vo(G: Tensor, O: Tensor) -> Tensor:
    """``||V O||_F`` from ``G = V^T V``: ``tr(O^T G O)``."""
    return _root_of_sum(G * (O @ O.transpose(-2, -1)))


def _norm_xy(X: Tensor, H: Tensor) -> Tensor:
    """``||X Y^T||_F`` from ``H = Y^T Y``: ``tr(X^T X H)``."""
    return _root_of_sum((X.transpose(-2, -1) @ X) * H)


def random_baseline(d_model: int, d_head: int, *, n: int, seed: int, chunk: int = 32) -> np.ndarray:
    """The composition score of ``n`` i.i.d. Gaussian quadruples ``(V, O, X, Y)`` of the heads' shapes (seeded)."""
    gen = torch.Generator().manual_seed(int(seed))
    out: list[Tensor] = []
    for start in range(0, n, chunk):
        k = min(chunk, n - start)
        V, X, Y = (torch.randn(k, d_model, d_head, generator=gen, dtype=_DT) for _ in range(3))
        O = torch.randn(k, d_head, d_model, generator=gen, dtype=_DT)
        out.append(paired_scores(V, O, X, Y))
    return torch.cat(out).numpy()


def mode_baseline(d_model: int, d_head: int, mode: str, *, n: int, seed: int) -> dict[str, Any]:
    """The baseline row of ``mode`` (``input, mean, sd, p99, n_samples, d_model, d_head``): the random
    samples seeded ``seed + 1000 * MODES.index(mode)``, so every caller gets the same numbers."""
    base = random_baseline(d_model, d_head, n=n, seed=seed + 1000 * MODES.index(mode))
    return {"input": mode, "mean": float(base.mean()), "sd": float(base.std(ddof=1)), "p99": float(np.quantile(base, 0.99)),
            "n_samples": n, "d_model": d_model, "d_head": d_head}  # fmt: skip


def paired_scores(
    V: Float[Tensor, "n d_model d_head"],
    O: Float[Tensor, "n d_head d_model"],
    X: Float[Tensor, "n d_model d_head"],
    Y: Float[Tensor, "n d_model d_head"],
) -> Float[Tensor, " n"]:
    """:func:`pair_scores` of the i-th sender with the i-th receiver only (the diagonal), batched."""
    G = V.transpose(-2, -1) @ V
    H = Y.transpose(-2, -1) @ Y
    M = O @ X
    return _root_of_sum(M * (G @ M @ H)) / (_norm_vo(G, O) * _norm_xy(X, H))


def _head_name(layer: int, head: int) -> str:
    return f"{layer}.{head}"


def mode_scores(w: HeadWeights, mode: str) -> Float[Tensor, "layer head layer head"]:
    """All-pairs ``[sender layer, sender head, receiver layer, receiver head]`` scores of one mode;
    pairs with ``sender layer >= receiver layer`` are 0 (as TransformerLens masks them)."""
    n_l, n_h, _, _ = w.shape
    X, Y = right_factors(w, mode)
    out = torch.zeros(n_l, n_h, n_l, n_h, dtype=_DT)
    for sl in range(n_l - 1):
        rx = X[sl + 1 :].reshape(-1, *X.shape[2:])
        ry = Y[sl + 1 :].reshape(-1, *Y.shape[2:])
        out[sl, :, sl + 1 :, :] = pair_scores(w.W_V[sl], w.W_O[sl], rx, ry).reshape(n_h, n_l - sl - 1, n_h)
    return out


def copying_scores(
    model: LoadedModel, w: HeadWeights, *, n_tokens: int, seed: int, progress: Callable[..., None] | None = None
) -> pd.DataFrame:
    """Per head: the OV circuit's eigenvalue copying score, its positive share and the sampled diagonal score
    (``progress("copying", heads done, heads)``)."""
    bridge = model.bridge
    if model.is_encoder or model.head_is_new:
        raise UnsupportedModelError("OV copying scores read the unembedding, which this model has not (an encoder or a new output head)")
    with torch.no_grad():
        W_E = bridge.W_E.detach().to("cpu", _DT)  # [vocab, d_model]
        W_U = bridge.W_U.detach().to("cpu", _DT)  # [d_model, vocab]
        if w.folded:
            kind = "LN" if w.norm.startswith("LN") else "RMS"
            gain = norm_gain(bridge, getattr(bridge, "ln_final", None), kind, W_U.shape[0])
            if gain is not None:
                W_U = W_U * gain[:, None]
            W_U = centre(W_U, 1)
            if kind == "LN":
                W_E = centre(W_E, 1)
        n_vocab = min(W_E.shape[0], W_U.shape[1])
        UE = W_U[:, :n_vocab] @ W_E[:n_vocab]  # [d_model, d_model]
        M = torch.einsum("lhrd,de,lhes->lhrs", w.W_O, UE, w.W_V)  # W_O W_U W_E W_V
        eig = torch.linalg.eigvals(M)  # [layer, head, d_head]
        mass = eig.abs().sum(-1)
        copying = (eig.real.sum(-1) / mass).numpy()
        positive = ((eig.abs() * (eig.real > 0)).sum(-1) / mass).numpy()
        diagonal = np.full(copying.shape, np.nan)
        if n_tokens > 0:
            diagonal = _diagonal(W_E, W_U, w, k=min(n_tokens, n_vocab), n_vocab=n_vocab, seed=seed, progress=progress)
    n_l, n_h = copying.shape
    rows = [
        {
            "name": _head_name(layer, head),
            "layer": layer,
            "head": head,
            "copying": float(copying[layer, head]),
            "positive_share": float(positive[layer, head]),
            "diagonal": float(diagonal[layer, head]),
        }
        for layer in range(n_l)
        for head in range(n_h)
    ]
    return pd.DataFrame(rows, columns=COPYING_COLUMNS)


def diagonal_bytes_per_token(d_model: int) -> int:
    """Bytes each sampled token of the diagonal score takes (float64): its embedding row, its
    unembedding column and its row through a head's OV circuit; the logit block is
    :data:`DIAGONAL_BLOCK` bytes whatever the count."""
    return 3 * 8 * d_model


#: Bytes of one block of sampled-token logits (rows x sampled tokens, float64) in the diagonal score.
DIAGONAL_BLOCK = 64 * 2**20


def _diagonal(
    W_E: torch.Tensor, W_U: torch.Tensor, w: HeadWeights, *, k: int, n_vocab: int, seed: int, progress: Callable[..., None] | None
) -> np.ndarray:
    """Per head, the share of ``k`` sampled tokens whose own logit through the head's OV circuit is the
    largest among the sampled tokens': one head at a time, in row blocks of :data:`DIAGONAL_BLOCK`
    bytes (the whole ``[layer, head, k, k]`` tensor was 161 GB at k = 50,257 on the demo)."""
    gen = torch.Generator().manual_seed(int(seed))
    toks = torch.randperm(n_vocab, generator=gen)[:k]
    E, U = W_E[toks], W_U[:, toks]  # [k, d_model], [d_model, k]
    n_l, n_h = w.W_V.shape[:2]
    rows = max(1, DIAGONAL_BLOCK // (8 * k))
    out = np.zeros((n_l, n_h))
    for layer in range(n_l):
        for head in range(n_h):
            through = E @ w.W_V[layer, head] @ w.W_O[layer, head]  # [k, d_model]
            hits = 0
            for r0 in range(0, k, rows):
                best = (through[r0 : r0 + rows] @ U).argmax(-1)
                hits += int((best == torch.arange(r0, min(r0 + rows, k))).sum())
            out[layer, head] = hits / k
            if progress is not None:
                progress("copying", layer * n_h + head + 1, n_l * n_h)
    return out


def run_composition(
    model: LoadedModel, config: CompositionConfig | None = None, *, progress: Callable[..., None] | None = None
) -> CompositionRun:
    """Q-, K- and V-composition for every pair of heads beside the random baseline, and OV copying scores."""
    cfg = config or CompositionConfig()
    check_composition_config(cfg)
    w = head_weights(model, fold_ln=cfg.fold_ln)
    n_l, n_h, d_model, d_head = w.shape
    if cfg.copying:  # the diagonal score's sampled tokens, against this machine's memory, before any work
        check_count("n_tokens", cfg.n_tokens, minimum=0, bytes_each=diagonal_bytes_per_token(d_model))
    notes = list(w.notes)
    if n_l < 2:
        notes.append("one layer: no head composes with another (only sender layer < receiver layer is scored)")
    frames: list[pd.DataFrame] = []
    base_rows: list[dict[str, Any]] = []
    idx = torch.arange(n_l)
    s_l, s_h, r_l, r_h = torch.meshgrid(idx, torch.arange(n_h), idx, torch.arange(n_h), indexing="ij")
    keep = (s_l < r_l).flatten().numpy()
    names = np.array([_head_name(la, h) for la in range(n_l) for h in range(n_h)])
    for i, mode in enumerate(cfg.modes):
        scores = mode_scores(w, mode).flatten().numpy()[keep]
        b = mode_baseline(d_model, d_head, mode, n=cfg.n_baseline, seed=cfg.seed)
        mean, sd = b["mean"], b["sd"]
        base_rows.append(b)
        sender = (s_l * n_h + s_h).flatten().numpy()[keep]
        receiver = (r_l * n_h + r_h).flatten().numpy()[keep]
        frame = pd.DataFrame(
            {
                "sender": names[sender],
                "receiver": names[receiver],
                "input": mode,
                "sender_layer": s_l.flatten().numpy()[keep],
                "sender_head": s_h.flatten().numpy()[keep],
                "receiver_layer": r_l.flatten().numpy()[keep],
                "receiver_head": r_h.flatten().numpy()[keep],
                "score": scores,
                "baseline_mean": mean,
                "baseline_sd": sd,
            }
        )
        frame["z"] = (frame["score"] - mean) / sd if sd > 0 else np.nan
        frame["ratio"] = frame["score"] / mean if mean > 0 else np.nan
        frame["above_baseline"] = frame["score"] > mean + BASELINE_Z * sd
        frames.append(frame)
        if progress is not None:
            progress("composition", i + 1, len(cfg.modes))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COMPOSITION_COLUMNS)
    copying = copying_scores(model, w, n_tokens=cfg.n_tokens, seed=cfg.seed, progress=progress) if cfg.copying else None
    summary = {
        "n_pairs": int(keep.sum()),
        "d_model": d_model,
        "d_head": d_head,
        "n_kv_heads": w.n_kv_heads,
        "normalization": w.norm,
        "folded": w.folded,
        "baseline_z": BASELINE_Z,
        "above_baseline": {m: int(table.loc[table["input"] == m, "above_baseline"].sum()) for m in cfg.modes},
    }
    return CompositionRun(
        scores=table[COMPOSITION_COLUMNS], baseline=pd.DataFrame(base_rows), copying=copying, summary=summary, notes=notes
    )
