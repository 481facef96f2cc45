"""Per-head measurements of the IOI class analysis, each per pair (``[pair, layer, head]``) so
that every figure gets a bootstrap interval over pairs.

* **attention** (:func:`measure_attention`): from one clean forward per batch, the pattern's share
  from END to IO, S1 and S2, and from S2 to S1 (duplicate-token) and to S1+1 (induction); the
  same pass keeps the stream after block 0 at IO and both runs' ``logit(IO) - logit(S)``.
* **OV copying** (:func:`copying_shares`, Wang et al. 2022's copying score): the stream after
  block 0 at the IO token, normalised as the head's norm does, through the head's OV circuit
  (``W_V W_O``, the norm gains folded: :func:`headlens.analyses.circuits.weights.head_weights`),
  then the unembedding with the final norm's gain: 1 where the IO name is among the
  :data:`TOP_K` largest logits of the whole vocabulary, else 0.  The negative copying share uses
  minus that output (the IO name among the ``TOP_K`` smallest).  Biases are left out (the
  copying is the matrices').
* **direct effect** (:func:`direct_effects`): each head's direct logit attribution on
  ``logit(IO) - logit(S)`` (:func:`headlens.analyses.patching.dla.run_dla`, the final norm's
  scale frozen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headlens.analyses.circuits.weights import head_weights, norm_gain
from headlens.analyses.patching.dla import run_dla
from headlens.analyses.patching.ioi_task import IOIPairs
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.hooks import attached
from headlens.probes.loading import LoadedModel

__all__ = ["ATTENTION", "TOP_K", "Measures", "measure_attention", "copying_shares", "direct_effects"]

#: Attention read per head: name -> (query position, key position).
ATTENTION: dict[str, tuple[str, str]] = {
    "attn_io": ("end", "io"),
    "attn_s1": ("end", "s1"),
    "attn_s2": ("end", "s2"),
    "attn_dup": ("s2", "s1"),
    "attn_ind": ("s2", "s1_next"),
}
#: The IO name must be among this many largest logits for a pair to count as copied.
TOP_K = 5


@dataclass
class Measures:
    attention: dict[str, np.ndarray]  # ATTENTION key -> [pair, layer, head]
    resid_io: Tensor  # [pair, d_model] the stream after block 0 at the IO token (clean run)
    ld_clean: np.ndarray  # [pair] logit(IO) - logit(S) at END
    ld_corrupt: np.ndarray  # [pair] the same on the ABC-corrupted prompt


def _positions(pairs: IOIPairs, rows: Tensor) -> dict[str, Tensor]:
    return {"end": pairs.end[rows], "io": pairs.io[rows], "s1": pairs.s1[rows], "s2": pairs.s2[rows], "s1_next": pairs.s1[rows] + 1}


def _logit_diff(logits: Tensor, pairs: IOIPairs, rows: Tensor) -> np.ndarray:
    idx = torch.arange(len(rows))
    last = logits[idx, pairs.end[rows].to(logits.device)].double().cpu()
    return (last[idx, pairs.task.correct[rows]] - last[idx, pairs.task.incorrect[rows]]).numpy()


def measure_attention(model: LoadedModel, pairs: IOIPairs, *, batch_size: int = 8) -> Measures:
    """Attention shares, the stream at IO after block 0 and both runs' logit differences."""
    task, n_l = pairs.task, model.n_layers
    n = len(task)
    attention = {key: np.zeros((n, n_l, model.n_heads)) for key in ATTENTION}
    resid, ld_clean, ld_corrupt = [], [], []
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(n_l)] + ["blocks.0.hook_resid_post"]
    missing = [name for name in names if name not in model.hook_names()]
    if missing:
        raise UnsupportedModelError(
            f"the IOI analysis reads attention patterns and the stream after block 0; this model lacks {missing[0]}"
        )
    for start in range(0, n, batch_size):
        rows = torch.arange(start, min(start + batch_size, n))
        width = int(task.lengths[rows].max())
        got: dict[str, Tensor] = {}

        def keep(name: str) -> Any:
            def fn(x: Tensor, hook: Any = None) -> None:
                got[name] = x.detach().float().cpu()

            return fn

        with torch.inference_mode():
            with attached(model.bridge, [(name, keep(name)) for name in names]):
                logits = model.bridge(task.clean[rows, :width].to(model.device), return_type="logits")
            ld_clean.append(_logit_diff(logits, pairs, rows))
            ld_corrupt.append(_logit_diff(model.bridge(task.corrupt[rows, :width].to(model.device), return_type="logits"), pairs, rows))
        pos, idx = _positions(pairs, rows), torch.arange(len(rows))
        for layer in range(n_l):
            pattern = got[names[layer]]  # [batch, head, query, key]
            for key, (q, k) in ATTENTION.items():
                attention[key][rows.numpy(), layer] = pattern[idx, :, pos[q], pos[k]].numpy()
        resid.append(got[names[-1]][idx, pos["io"]])
    return Measures(attention, torch.cat(resid), np.concatenate(ld_clean), np.concatenate(ld_corrupt))


def copying_shares(
    model: LoadedModel, pairs: IOIPairs, resid_io: Tensor, heads: list[tuple[int, int]], *, chunk: int = 16
) -> tuple[np.ndarray, np.ndarray]:
    """``(copying, negative)`` ``[pair, layer, head]``: 1.0 where the head's OV output of the IO
    token puts the IO name among the :data:`TOP_K` largest (smallest) logits (see the module doc);
    measured for ``heads`` only (each costs a product with the whole unembedding), NaN elsewhere."""
    if model.is_encoder or model.head_is_new:
        raise UnsupportedModelError("OV copying reads the unembedding, which this model has not (an encoder or a new output head)")
    w = head_weights(model)
    bridge = model.bridge
    W_U = bridge.W_U.detach().to("cpu", torch.float64)
    is_ln = w.norm.startswith("LN")
    if w.folded:
        gain = norm_gain(bridge, getattr(bridge, "ln_final", None), "LN" if is_ln else "RMS", W_U.shape[0])
        W_U = W_U if gain is None else W_U * gain[:, None]
    W_U = W_U.float()
    x = resid_io.double()
    x = x - x.mean(-1, keepdim=True) if is_ln else x
    x = x / x.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12)
    io = pairs.task.correct
    n, (n_l, n_h, _, _) = len(x), w.shape
    copying, negative = np.full((n, n_l, n_h), np.nan), np.full((n, n_l, n_h), np.nan)
    with torch.no_grad():
        for layer in sorted({a for a, _ in heads}):
            hs = sorted({b for a, b in heads if a == layer})
            for s in range(0, n, chunk):
                part = torch.arange(s, min(s + chunk, n))
                out = torch.einsum("nd,hde,hef->hnf", x[part], w.W_V[layer, hs], w.W_O[layer, hs]).float()  # [head, pair, d_model]
                logits = out @ W_U  # [head, pair, vocab]
                target = logits[:, torch.arange(len(part)), io[part]].unsqueeze(-1)
                rows = part.numpy()[:, None]
                copying[rows, layer, hs] = ((logits > target).sum(-1) < TOP_K).T.double().numpy()
                negative[rows, layer, hs] = ((logits < target).sum(-1) < TOP_K).T.double().numpy()
    return copying, negative


def direct_effects(model: LoadedModel, pairs: IOIPairs, *, batch_size: int = 8) -> np.ndarray:
    """Each head's direct logit attribution on ``logit(IO) - logit(S)`` per pair, ``[pair, layer, head]``."""
    run = run_dla(model, pairs.task, batch_size=batch_size)
    heads = (run.table["kind"] == "head").to_numpy()
    values = run.per_item[heads]  # [layer * head, pair], layer-major as the table lists them
    return values.T.reshape(len(pairs.task), model.n_layers, model.n_heads)
