"""The rows of the sink tables, read from one BOS setting's :class:`~headlens.analyses.sinks.stream.SinkStats`.

Definitions:

* **Sink alpha** (Gu et al. 2024): ``alpha[l,h] = mean over queries i of A[i, 0]`` per
  sequence; a (sequence, layer, head) sinks when ``alpha > eps``; the **sink rate** is the
  fraction of (sequence, layer, head) that sink (:func:`census_rows`, :func:`rate_row`,
  :func:`layer_rows`).
* **Uniform baseline**: the same numbers for a head that gives ``1/(i+1)`` to every key
  (alpha = ``H_T / T``, 0.074 at T = 64).
* A head **is a sink head** when its alpha averaged over sequences exceeds ``eps``.
* Secondary sinks and value-norm shares: :mod:`headlens.analyses.sinks.reductions`
  (:func:`secondary_rows`, :func:`value_norm_rows`); sink targets:
  :mod:`headlens.analyses.sinks.targets` (:func:`target_rows`, :func:`target_info`).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from headlens.analyses.sinks.batches import frame_tokens
from headlens.analyses.sinks.stream import SinkStats
from headlens.analyses.sinks.targets import TARGET_GROUPS
from headlens.probes.loading import LoadedModel

__all__ = ["census_rows", "rate_row", "layer_rows", "secondary_rows", "target_rows", "target_info", "value_norm_rows"]

log = logging.getLogger(__name__)


def census_rows(stats: SinkStats, bos: bool, eps: float) -> list[dict[str, Any]]:
    mean, std, rate = stats.alpha.mean(0), stats.alpha.std(0), stats.alpha.rate(0)
    rows = []
    n_l, n_h = mean.shape
    for layer in range(n_l):
        uniform = stats.alpha.uniform_mean(0, layer)
        for head in range(n_h):
            a = float(mean[layer, head])
            rows.append(
                {
                    "bos": bos,
                    "layer": layer,
                    "head": head,
                    "alpha_mean": a,
                    "alpha_std": float(std[layer, head]),
                    "sink_rate": float(rate[layer, head]),
                    "uniform_alpha": uniform,
                    "alpha_over_uniform": a / uniform if uniform > 0 else float("nan"),
                    "is_sink": a > eps,
                }
            )
    return rows


def rate_row(stats: SinkStats, bos: bool, eps: float, width: float) -> dict[str, Any]:
    mean, rate = stats.alpha.mean(0), stats.alpha.rate(0)
    return {
        "bos": bos,
        "eps": eps,
        "n_sequences": stats.n_samples,
        "tokens_per_sequence": width,
        "sink_rate": float(rate.mean()),
        "uniform_sink_rate": stats.alpha.uniform_rate(0),
        "mean_alpha": float(mean.mean()),
        "uniform_alpha": stats.alpha.uniform_mean(0),
        "n_sink_heads": int((mean > eps).sum()),
        "n_heads": int(mean.numel()),
    }


def layer_rows(stats: SinkStats, bos: bool) -> list[dict[str, Any]]:
    mean, rate = stats.alpha.mean(0), stats.alpha.rate(0)
    return [
        {
            "bos": bos,
            "layer": layer,
            "sink_rate": float(rate[layer].mean()),
            "mean_alpha": float(mean[layer].mean()),
            "max_alpha": float(mean[layer].max()),
            "uniform_sink_rate": stats.alpha.uniform_rate(0, layer),
            "uniform_alpha": stats.alpha.uniform_mean(0, layer),
        }
        for layer in range(mean.shape[0])
    ]


def secondary_rows(stats: SinkStats, bos: bool, tokenizer: Any, top_k: int, min_count: int) -> tuple[list[dict], list[dict], list[dict]]:
    pos_rows, tok_rows, overall_rows = [], [], []
    ex = stats.excess
    assert ex is not None
    pos_excess, pos_queries_layer = ex.pos_excess.cpu(), ex.pos_queries_layer()
    tok_count, tok_excess, tok_queries_layer = ex.tok_count.cpu(), ex.tok_excess.cpu(), ex.tok_queries_layer()
    n_l, n_h, width = pos_excess.shape
    for layer in range(n_l):
        pos_q = pos_queries_layer[layer]
        for head in range(n_h):
            for j in range(width):
                if pos_q[j] > 0:
                    pos_rows.append(
                        {
                            "bos": bos,
                            "layer": layer,
                            "head": head,
                            "position": j,
                            "excess": float(pos_excess[layer, head, j] / pos_q[j]),
                            "n_queries": int(pos_q[j]),
                        }
                    )
    ok = (tok_count >= min_count) & (ex.tok_queries_causal() > 0)
    if not bool(ok.any()):
        return pos_rows, tok_rows, overall_rows
    idx = ok.nonzero().flatten()
    per = tok_excess[:, :, idx] / tok_queries_layer[:, idx][:, None, :]  # [L, H, U']
    ids = ex.token_ids.cpu()[idx]
    strings = {int(t): tokenizer.decode([int(t)]) for t in ids}
    in_top = torch.zeros(len(idx), dtype=torch.long)
    k = min(top_k, len(idx))
    for layer in range(n_l):
        for head in range(n_h):
            vals, order = per[layer, head].topk(k)
            in_top[order] += 1
            for rank, (v, o) in enumerate(zip(vals.tolist(), order.tolist(), strict=True), start=1):
                t = int(ids[o])
                tok_rows.append(
                    {
                        "bos": bos,
                        "layer": layer,
                        "head": head,
                        "rank": rank,
                        "token": strings[t],
                        "token_id": t,
                        "occurrences": int(tok_count[idx[o]]),
                        "excess": v,
                    }
                )
    overall = per.mean(dim=(0, 1))
    for o in overall.argsort(descending=True)[: max(top_k * 4, 20)].tolist():
        t = int(ids[o])
        overall_rows.append(
            {
                "bos": bos,
                "token": strings[t],
                "token_id": t,
                "occurrences": int(tok_count[idx[o]]),
                "mean_excess": float(overall[o]),
                "max_excess": float(per[:, :, o].max()),
                "heads_in_top_k": int(in_top[o]),
            }
        )
    return pos_rows, tok_rows, overall_rows


def target_rows(stats: SinkStats, bos: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``sink_targets`` (per head) and ``sink_targets_by_layer`` rows for one BOS setting.

    ``sink_on``: the group whose share exceeds its uniform baseline the most (``none`` when no
    group's does); groups that are absent (no suffix on a decoder) are NaN and never chosen."""
    targets = stats.targets
    assert targets is not None
    share = {g: targets.mean(g) for g in TARGET_GROUPS}  # [layer, head]
    uniform = {g: targets.uniform(g) for g in TARGET_GROUPS}  # [layer]

    def where(excess: dict[str, float]) -> str:
        measured = {g: e for g, e in excess.items() if e == e}
        if not measured:
            return "none"
        best = max(measured, key=lambda g: measured[g])
        return best if measured[best] > 0 else "none"

    head_rows, by_layer = [], []
    n_l, n_h = share["first"].shape
    for layer in range(n_l):
        for head in range(n_h):
            row: dict[str, Any] = {"bos": bos, "layer": layer, "head": head}
            for g in TARGET_GROUPS:
                row[g] = float(share[g][layer, head])
                row[f"{g}_uniform"] = float(uniform[g][layer])
            row["sink_on"] = where({g: row[g] - row[f"{g}_uniform"] for g in TARGET_GROUPS})
            head_rows.append(row)
        lrow: dict[str, Any] = {"bos": bos, "layer": layer}
        for g in TARGET_GROUPS:
            col = share[g][layer]
            measured = bool(torch.isfinite(col).all())
            lrow[f"{g}_mean"] = float(col.mean()) if measured else float("nan")
            lrow[f"{g}_max"] = float(col.max()) if measured else float("nan")
            lrow[f"{g}_max_head"] = int(col.argmax()) if measured else -1
            lrow[f"{g}_uniform"] = float(uniform[g][layer])
        lrow["sink_on"] = where({g: lrow[f"{g}_mean"] - lrow[f"{g}_uniform"] for g in TARGET_GROUPS})
        by_layer.append(lrow)
    return head_rows, by_layer


def target_info(model: LoadedModel, stats: SinkStats, bos: bool) -> dict[str, Any]:
    """What the three groups were for one BOS setting: token strings, keys per sequence."""
    prefix, suffix = frame_tokens(model, bos)
    conv = model.tokenizer.convert_ids_to_tokens
    n = max(stats.n_samples, 1)
    keys = stats.targets.keys.tolist() if stats.targets is not None else [0.0] * len(TARGET_GROUPS)
    punct = stats.targets.punct.tolist() if stats.targets is not None else []
    return {
        "first": conv(prefix[0]) if prefix else "the first text token",
        "suffix": [conv(t) for t in suffix],
        "punctuation": [model.tokenizer.decode([t]).strip() for t in punct],
        "keys_per_sequence": {g: keys[i] / n for i, g in enumerate(TARGET_GROUPS)},
    }


def value_norm_rows(stats: SinkStats, bos: bool) -> list[dict[str, Any]]:
    rows = []
    vn = stats.value_norm
    assert vn is not None
    n_l, n_h = vn.share_sum.shape
    s = max(vn.other_count, 1.0)
    for layer in range(n_l):
        q = max(float(vn.queries_layer[layer]), 1.0)
        for head in range(n_h):
            attn = float(vn.attn_sum[layer, head]) / q
            share = float(vn.share_sum[layer, head]) / q
            sink_norm = float(vn.sink_norm_sum[layer, head]) / s
            other = float(vn.other_norm_sum[layer, head]) / s
            rows.append(
                {
                    "bos": bos,
                    "layer": layer,
                    "head": head,
                    "attn_share": attn,
                    "value_norm_share": share,
                    "share_ratio": share / attn if attn > 0 else float("nan"),
                    "sink_value_norm": sink_norm,
                    "other_value_norm": other,
                    "norm_ratio": sink_norm / other if other > 0 else float("nan"),
                }
            )
    return rows
