"""Attention sinks as the context grows: alpha, sink rate and first-token share per head at several lengths.

For each length ``n`` in ``LengthsConfig.lengths`` the model reads ``n_sequences`` sequences of
``n`` tokens (BOS, or an encoder's frame, included) cut one after another from one long text
(:mod:`headlens.analyses.sinks.long_text` says exactly how; the manifest records the offsets).
Per sequence, layer and head (``A = A[l, h]``, queries ``i``):

* ``alpha``: Gu et al.'s ``mean over queries i >= 0 of A[i, 0]``
  (:func:`headlens.analyses.heads.detectors.sink.alpha_sums`);
* ``first_share``: the same mean over queries ``i >= 1`` (query 0 of a causal layer sees only
  key 0, so it always gives it 1);
* ``sink``: whether ``alpha > eps``;
* ``value_norm_share``: the sink's share of the head's output norm (Kobayashi et al. 2020),
  ``A[i,0] ||f_0|| / sum_j A[i,j] ||f_j||`` with ``f_j = v_j W_O^h``, averaged over queries
  ``i >= 1`` (every query on a bidirectional layer, as
  :func:`headlens.analyses.sinks.reductions.value_norm_share`).  ``||f_j||`` comes from
  ``hook_v`` (eager) or from the v the attention function receives (streaming): the engine
  (:func:`headlens.probes.engine.reduce_pass`) hands it over.

**Which queries are averaged** (column ``queries``, and ``n_queries``, the number of queries
alpha averages).  On a sliding-window layer of ``w < n`` keys only the first ``w`` queries can
see key 0.  Two means are written side by side:

* ``queries = "visible"`` (the columns without a suffix): only the queries that can see key 0,
  ``i < w`` (``1 <= i < w`` for the first-token and value-norm shares), as headlens' census
  does: "when a query can attend to the first token, how much does it?".  It does not change
  once ``n`` passes ``w``.
* the ``*_all`` columns: every query (Gu et al.'s definition), the masked-out ``A[i, 0] = 0``
  of queries ``i >= w`` counted as 0 (``n_queries_all`` queries).  It falls as ``w / n``.

On a full-attention or bidirectional layer, or a window at least ``n`` long, the two are the
same and ``queries = "all"``.  The uniform-attention alpha is given under both conventions.

The table holds, per length, layer and head, the means over sequences (``sink_rate`` = the
share of sequences whose alpha exceeds ``eps``).  Long lengths are the reason this exists:
with ``attention="streaming"`` (or ``auto`` when one layer's patterns would not fit,
:func:`headlens.probes.streaming.choose_attention`) the statistics are computed from q and k
in blocks of ``query_block`` queries inside the model's SDPA forward; ``eager`` reads
``hook_pattern``.  Both are :func:`headlens.probes.engine.reduce_pass` with one reducer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from headlens.analyses.measure.attention_stats import alpha_sums, uniform_sink_alpha
from headlens.analyses.sinks.config import LengthsConfig
from headlens.analyses.sinks.long_text import check_lengths, cut_plan, long_text, sequence_ids
from headlens.analyses.sinks.reductions import output_grams, value_norm_block, value_norms
from headlens.probes.attention import LayerAttention, attention_spec
from headlens.probes.engine import LayerView, Sums, layer_causal, reduce_pass
from headlens.probes.loading import LoadedModel
from headlens.probes.streaming import choose_attention

__all__ = ["LengthsConfig", "LengthsRun", "run_sink_lengths", "validate_lengths", "LENGTH_COLUMNS", "QUERY_CONVENTIONS"]

log = logging.getLogger(__name__)

#: The statistics measured under both query conventions (``name`` and ``name_all``).
STATS = ("alpha", "sink_rate", "first_share", "value_norm_share", "uniform_alpha")

LENGTH_COLUMNS = [
    "length", "layer", "head", "window", "queries", "n_queries", *STATS,
    "n_queries_all", *(f"{s}_all" for s in STATS), "n_sequences", "attention",
]  # fmt: skip

#: What the ``queries`` column means (also written to the manifest).
QUERY_CONVENTIONS = {
    "visible": "sliding-window layer of w < length keys: alpha, sink_rate and uniform_alpha average only the n_queries = w queries i < w "
    "that can see key 0; first_share and value_norm_share the w - 1 queries 1 <= i < w (headlens' census convention)",
    "all": "every query: alpha averages all length queries (i >= 0), first_share and value_norm_share queries i >= 1 "
    "(value_norm_share every query on a bidirectional layer); on a window layer the masked-out A[i, 0] of queries i >= w count as 0 "
    "(Gu et al.'s definition). The *_all columns always use it; without a window in effect the unsuffixed columns equal them",
}


@dataclass
class LengthsRun:
    table: pd.DataFrame
    info: dict[str, Any]


def validate_lengths(model: LoadedModel, config: LengthsConfig, *, documents: Sequence[str] | None = None) -> None:
    """Every check of ``config`` that needs no forward pass (framing, context, text length);
    an :class:`~headlens.probes.errors.InputError` on bad input.  Call it for every setting
    before running any of them."""
    text = long_text(model, documents, config.prepend_bos)
    check_lengths(model, config.lengths, config.n_sequences, config.eps, text, config.prepend_bos)


def _vn_sums(rows: Tensor, vnorm: Tensor, n: int, q0: int, window: int | None, causal: bool) -> dict[str, Tensor]:
    """Block sums of :func:`headlens.analyses.sinks.reductions.value_norm_share`'s norm share."""
    share, _, count = value_norm_block(rows, vnorm, torch.tensor([n] * rows.shape[0], device=rows.device), q0, window=window, causal=causal)
    return {"score": share, "count": count}


def _window(la: LayerAttention, n: int, causal: bool) -> int | None:
    """The layer's window where it hides key 0 from some of ``n`` queries, else None."""
    return la.window if causal and la.window is not None and la.window < n else None


@dataclass(frozen=True, kw_only=True)
class _Ctx:
    """One layer of one sequence: its length, causal or not, the window in effect, the value norms."""

    n: int
    causal: bool
    window: int | None
    vnorm: Tensor


class _LengthStats:
    """The reducer of the length curves: visible-query sums, and all-query sums on a window layer."""

    name = "lengths"

    @staticmethod
    def partial(rows: Tensor, ctx: _Ctx, q0: int) -> Sums:
        rows = rows.float()
        lengths = torch.tensor([ctx.n] * rows.shape[0], device=rows.device)
        parts = {
            "alpha": alpha_sums(rows, lengths, q0, window=ctx.window, causal=ctx.causal),
            "first": alpha_sums(rows, lengths, q0, window=ctx.window, causal=ctx.causal, start=1),
            "vn": _vn_sums(rows, ctx.vnorm, ctx.n, q0, ctx.window, ctx.causal),
        }
        if ctx.window is not None:  # every query, the masked-out A[i, 0] = 0 included
            parts["alpha_all"] = alpha_sums(rows, lengths, q0, causal=ctx.causal)
            parts["first_all"] = alpha_sums(rows, lengths, q0, causal=ctx.causal, start=1)
            parts["vn_all"] = _vn_sums(rows, ctx.vnorm, ctx.n, q0, None, ctx.causal)
        return {f"{key}_{sub}": value for key, part in parts.items() for sub, value in part.items()}

    @staticmethod
    def finish(sums: Sums, ctx: _Ctx) -> Sums:
        return sums


def _uniform_all(n: int, window: int | None, causal: bool) -> float:
    """Alpha of a uniform head over every query: ``1/(i+1)`` for the queries that see key 0, 0 for the rest."""
    if not causal:
        return 1.0 / n
    seen = torch.arange(min(n, window or n), dtype=torch.float64)
    return float((1.0 / (seen + 1)).sum() / n)


def _means(accs: list[dict[str, Tensor]], name: str) -> tuple[Tensor, int]:
    """Per sequence and head the mean ``name`` (``[seq, head]``) and the number of queries averaged."""
    means = torch.stack([(a[f"{name}_score"] / a[f"{name}_count"].clamp(min=1)[:, None])[0] for a in accs])
    return means, int(accs[0][f"{name}_count"][0])


def _layer_rows(
    model: LoadedModel, accs: list[dict[str, Tensor]], n: int, la: LayerAttention, causal: bool, config: LengthsConfig, mode: str
) -> list[dict[str, Any]]:
    window = _window(la, n, causal)
    suffix = "_all" if window is not None else ""
    alpha, n_q = _means(accs, "alpha")
    first, _ = _means(accs, "first")
    vn, _ = _means(accs, "vn")
    alpha_all, n_all = _means(accs, f"alpha{suffix}")
    first_all, _ = _means(accs, f"first{suffix}")
    vn_all, _ = _means(accs, f"vn{suffix}")
    uniform = float(uniform_sink_alpha(torch.tensor([n]), key=0, window=window, causal=causal)[0])
    uniform_all = _uniform_all(n, window, causal)
    rows = []
    for head in range(model.n_heads):
        rows.append({
            "length": n, "layer": la.layer, "head": head, "window": la.window if causal and la.window is not None else None,
            "queries": "visible" if window is not None else "all", "n_queries": n_q,
            "alpha": float(alpha[:, head].mean()), "sink_rate": float((alpha[:, head] > config.eps).double().mean()),
            "first_share": float(first[:, head].mean()), "value_norm_share": float(vn[:, head].mean()), "uniform_alpha": uniform,
            "n_queries_all": n_all,
            "alpha_all": float(alpha_all[:, head].mean()), "sink_rate_all": float((alpha_all[:, head] > config.eps).double().mean()),
            "first_share_all": float(first_all[:, head].mean()), "value_norm_share_all": float(vn_all[:, head].mean()),
            "uniform_alpha_all": uniform_all,
            "n_sequences": config.n_sequences, "attention": mode,
        })  # fmt: skip
    return rows


def run_sink_lengths(
    model: LoadedModel,
    config: LengthsConfig,
    *,
    documents: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LengthsRun:
    """The long-context sink table (:data:`LENGTH_COLUMNS`) and what was run (``info``)."""
    text = long_text(model, documents, config.prepend_bos)
    check_lengths(model, config.lengths, config.n_sequences, config.eps, text, config.prepend_bos)
    spec = attention_spec(model)
    causal = layer_causal(model)
    grams = output_grams(model)
    rows_out: list[dict[str, Any]] = []
    modes: dict[int, str] = {}
    total = len(config.lengths) * config.n_sequences
    done = 0
    for n in config.lengths:
        mode = choose_attention(config.attention, batch=1, n_heads=model.n_heads, n=n)
        modes[n] = mode
        per_layer: list[list[dict[str, Tensor]]] = [[] for _ in spec.layers]
        for s in range(config.n_sequences):
            tokens = torch.tensor([sequence_ids(text, n, s)])
            accs: list[dict[str, Tensor]] = [{} for _ in spec.layers]

            def context(view: LayerView, n: int = n) -> _Ctx:
                la = view.layer
                assert view.v is not None
                return _Ctx(n=n, causal=view.causal, window=_window(la, n, view.causal), vnorm=value_norms(view.v, grams[la.layer]))

            def keep(layer: int, out: dict[str, Sums], ctx: _Ctx, accs: list = accs) -> None:
                accs[layer] = out[_LengthStats.name]

            reduce_pass(
                model,
                tokens,
                torch.ones_like(tokens),
                [_LengthStats()],
                context=context,
                on_layer=keep,
                attention=mode,
                query_block=config.query_block,
                values=True,
            )
            for layer, acc in enumerate(accs):
                per_layer[layer].append(acc)
            done += 1
            if progress is not None:
                progress(done, total)
        for la in spec.layers:
            rows_out += _layer_rows(model, per_layer[la.layer], n, la, causal[la.layer], config, mode)
    table = pd.DataFrame(rows_out, columns=LENGTH_COLUMNS)
    windows = {str(la.layer): la.window for la in spec.layers if causal[la.layer] and la.window is not None}
    info = {**cut_plan(text, config.lengths, config.n_sequences, config.prepend_bos), "lengths": list(config.lengths),
            "attention": {str(k): v for k, v in modes.items()}, "query_block": config.query_block,
            "windows": windows, "queries": QUERY_CONVENTIONS}  # fmt: skip
    return LengthsRun(table=table, info=info)
