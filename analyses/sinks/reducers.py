"""The sink statistics as reducers of :func:`headlens.probes.engine.reduce_pass`.

Each statistic is one reducer: ``partial(rows, ctx, q_offset)`` sums one block of query rows
(the whole pattern is one block on the eager path), ``finish(sums, ctx)`` turns a layer's sums
into that batch's contribution, :meth:`add` keeps the running totals (fixed size, on the
model's device, float64) and the read-outs turn them into the numbers the tables print.
Nothing per prompt is kept, so memory does not grow with the number of prompts.

* :class:`AlphaStat`: Gu et al. alpha of each key in ``keys`` (sum, sum of squares, count above
  ``eps``) and the uniform head's alpha per layer kind (full causal, each sliding window,
  bidirectional), from the lengths alone;
* :class:`ExcessStat`: excess attention received per key position and per token id
  (:func:`headlens.analyses.sinks.reductions.excess_block`);
* :class:`ValueNormStat`: the sink's value-norm share and attention share
  (:func:`headlens.analyses.sinks.reductions.value_norm_block`);
* :class:`TargetStat`: attention shares of the first position, the suffix and punctuation
  (:mod:`headlens.analyses.sinks.targets`).

Definitions (queries counted, baselines on window and bidirectional layers) are in
:mod:`headlens.analyses.sinks.reductions`, :mod:`headlens.analyses.sinks.targets` and
:mod:`headlens.analyses.sinks.layers`; which keys a query sees is
:func:`headlens.probes.attention.visible`, the one rule.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from headlens.analyses.measure.attention_stats import alpha_sums, uniform_sink_alpha
from headlens.analyses.sinks.layers import BIDIRECTIONAL, Kind, SinkLayers
from headlens.analyses.sinks.reductions import excess_block, received_queries, value_norm_block
from headlens.analyses.sinks.targets import TARGET_GROUPS
from headlens.probes.attention import visible
from headlens.probes.engine import Sums

__all__ = ["SinkCtx", "AlphaStat", "ExcessStat", "ValueNormStat", "TargetStat"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SinkCtx:
    """One layer of one batch: real ``lengths`` (device), the layer's window in effect (None on
    full causal or bidirectional layers), causal or not, the value norms ``[batch, head, k]``
    (with value-norm shares), and the batch's token ids and key groups (from ``start_batch``)."""

    layer: int
    lengths: Tensor
    window: int | None
    causal: bool
    vnorm: Tensor | None = None
    compact: Tensor | None = None  # [batch, pos]: index into ExcessStat.token_ids, -1 on padding
    groups: Tensor | None = None  # [group, batch, pos]: 0/1 key groups of the sink targets


def _zeros(*shape: int, device: torch.device | str) -> Tensor:
    return torch.zeros(*shape, dtype=torch.float64, device=device)


class AlphaStat:
    """Gu et al. alpha of each key in ``keys`` per layer and head, and the uniform head's alpha."""

    name = "alpha"

    def __init__(self, layers: SinkLayers, n_heads: int, *, keys: tuple[int, ...], eps: float, device: torch.device | str) -> None:
        self.layers, self.keys, self.eps = layers, keys, eps
        n_l = len(layers.kinds)
        self.sum = _zeros(len(keys), n_l, n_heads, device=device)
        self.sq_sum = _zeros(len(keys), n_l, n_heads, device=device)
        self.above = _zeros(len(keys), n_l, n_heads, device=device)
        self.n = torch.zeros(len(keys), dtype=torch.float64)
        # the uniform head, per layer kind (None: full causal), summed over prompts: alpha and alpha > eps
        self.uniform_sum = {k: torch.zeros(len(keys), dtype=torch.float64) for k in layers.distinct}
        self.uniform_above = {k: torch.zeros(len(keys), dtype=torch.float64) for k in layers.distinct}

    def start_batch(self, lengths: Tensor) -> None:
        """The uniform baselines of one batch (host ``lengths``)."""
        for ki, key in enumerate(self.keys):
            valid = lengths > key
            self.n[ki] += int(valid.sum())
            for kind in self.layers.distinct:
                if isinstance(kind, str):  # bidirectional
                    ua = uniform_sink_alpha(lengths[valid], key=key, causal=False)
                else:
                    ua = uniform_sink_alpha(lengths[valid], key=key, window=kind)
                self.uniform_sum[kind][ki] += ua.sum()
                self.uniform_above[kind][ki] += (ua > self.eps).sum()

    def partial(self, rows: Tensor, ctx: SinkCtx, q0: int) -> Sums:
        rows = rows.float()
        out: Sums = {}
        for ki, key in enumerate(self.keys):
            part = alpha_sums(rows, ctx.lengths, q0, key=key, window=ctx.window, causal=ctx.causal)
            out[f"score{ki}"], out[f"count{ki}"] = part["score"], part["count"]
        return out

    def finish(self, sums: Sums, ctx: SinkCtx) -> Tensor:
        """``[key, batch, head]``: each prompt's alpha (float32, as one float32 block gives it)."""
        return torch.stack(
            [(sums[f"score{ki}"].float() / sums[f"count{ki}"].float().clamp(min=1)[:, None]) for ki in range(len(self.keys))]
        )

    def add(self, layer: int, alpha: Tensor, ctx: SinkCtx) -> None:
        for ki, key in enumerate(self.keys):
            a = alpha[ki].double()
            valid = (ctx.lengths > key).to(a.dtype)[:, None]
            self.sum[ki, layer] += (a * valid).sum(0)
            self.sq_sum[ki, layer] += (a**2 * valid).sum(0)
            self.above[ki, layer] += ((a > self.eps).to(a.dtype) * valid).sum(0)

    def _n(self, key: int) -> float:
        return max(float(self.n[self.keys.index(key)]), 1.0)

    def mean(self, key: int = 0) -> Tensor:
        """``[layer, head]``: alpha averaged over prompts (those longer than ``key``), on the CPU."""
        return self.sum[self.keys.index(key)].cpu() / self._n(key)

    def std(self, key: int = 0) -> Tensor:
        k = self.keys.index(key)
        mean = self.sum[k].cpu() / self._n(key)
        return (self.sq_sum[k].cpu() / self._n(key) - mean**2).clamp_min(0).sqrt()

    def rate(self, key: int = 0) -> Tensor:
        """``[layer, head]``: fraction of prompts with alpha > eps."""
        return self.above[self.keys.index(key)].cpu() / self._n(key)

    def _uniform(self, totals: dict[Kind, Tensor], key: int, layer: int | None) -> float:
        k = self.keys.index(key)
        if layer is not None:
            value = totals[self.layers.kinds[layer]][k]
        elif self.layers.distinct == [None]:
            value = totals[None][k]
        else:
            value = torch.stack([totals[kind][k] for kind in self.layers.kinds]).mean()
        return float(value) / self._n(key)

    def uniform_mean(self, key: int = 0, layer: int | None = None) -> float:
        """Alpha of a uniform head in ``layer`` (its window's or bidirectional baseline); without
        a layer, the mean over layers (the full-causal value when every layer is full causal)."""
        return self._uniform(self.uniform_sum, key, layer)

    def uniform_rate(self, key: int = 0, layer: int | None = None) -> float:
        """Fraction of prompts where a uniform head in ``layer`` has alpha > eps (as :meth:`uniform_mean`)."""
        return self._uniform(self.uniform_above, key, layer)


class ExcessStat:
    """Excess attention received per key position (``[layer, head, position]``) and per token id
    over key positions ``j >= 1`` (``[layer, head, token]`` over :attr:`token_ids`)."""

    name = "excess"

    def __init__(self, layers: SinkLayers, n_heads: int, *, width: int, token_ids: Tensor, device: torch.device | str) -> None:
        self.layers = layers
        n_l, u = len(layers.kinds), len(token_ids)
        self.token_ids = token_ids.to(device)
        self.pos_excess = _zeros(n_l, n_heads, width, device=device)
        self.tok_excess = _zeros(n_l, n_heads, u, device=device)
        self.tok_count = _zeros(u, device=device)
        # per layer kind: how many queries see each key position / token
        self.pos_queries = {k: _zeros(width, device=device) for k in layers.distinct}
        self.tok_queries = {k: _zeros(u, device=device) for k in layers.distinct}

    def start_batch(self, tokens: Tensor, mask: Tensor, lengths: Tensor) -> Tensor:
        """The query counts of one batch; returns its ``compact`` ids (``[batch, pos]``, -1 on padding)."""
        width = int(tokens.shape[1])
        compact = torch.searchsorted(self.token_ids, tokens)
        compact = torch.where(mask, compact, torch.full_like(compact, -1))
        keep = (compact >= 0) & (torch.arange(width, device=tokens.device)[None, :] >= 1)
        self.tok_count.index_add_(0, compact[keep], torch.ones(int(keep.sum()), dtype=torch.float64, device=tokens.device))
        for kind in self.layers.distinct:
            window = kind if isinstance(kind, int) else None
            n_q = received_queries(lengths, width, window=window, causal=kind != BIDIRECTIONAL)
            self.pos_queries[kind][:width] += n_q.sum(0)
            self.tok_queries[kind].index_add_(0, compact[keep], n_q[keep])
        return compact

    @staticmethod
    def partial(rows: Tensor, ctx: SinkCtx, q0: int) -> Sums:
        return {"excess": excess_block(rows.float(), ctx.lengths, q0, window=ctx.window, causal=ctx.causal)}

    @staticmethod
    def finish(sums: Sums, ctx: SinkCtx) -> Tensor:
        """``[batch, head, k]``: each prompt's excess (float32, as one float32 block gives it)."""
        return sums["excess"].float()

    def add(self, layer: int, excess: Tensor, ctx: SinkCtx) -> None:
        width = excess.shape[-1]
        self.pos_excess[layer, :, :width] += excess.sum(0).double()
        compact = ctx.compact
        assert compact is not None
        keep = compact >= 0
        keep[:, 0] = False
        per_key = excess.permute(0, 2, 1)[keep]  # [n_keys, head]
        self.tok_excess[layer].index_add_(1, compact[keep], per_key.T.double())

    def pos_queries_layer(self) -> Tensor:
        """``[layer, position]``: queries that see each key position in each layer (CPU)."""
        return torch.stack([self.pos_queries[k] for k in self.layers.kinds]).cpu()

    def tok_queries_layer(self) -> Tensor:
        """``[layer, token]``: queries that see each token in each layer (CPU)."""
        return torch.stack([self.tok_queries[k] for k in self.layers.kinds]).cpu()

    def tok_queries_causal(self) -> Tensor:
        """``[token]``: the full-causal query counts (the rule of a token's minimum count)."""
        n = self.tok_queries.get(None)
        if n is None:
            raise ValueError("no full-causal layer")
        return n.cpu()


class ValueNormStat:
    """The sink's value-norm share and attention share per layer and head, and the norms of
    the sink's and the other positions' value vectors."""

    name = "value_norm"

    def __init__(self, n_layers: int, n_heads: int, *, device: torch.device | str) -> None:
        self.share_sum = _zeros(n_layers, n_heads, device=device)
        self.attn_sum = _zeros(n_layers, n_heads, device=device)
        self.sink_norm_sum = _zeros(n_layers, n_heads, device=device)
        self.other_norm_sum = _zeros(n_layers, n_heads, device=device)
        self.queries_layer = torch.zeros(n_layers, dtype=torch.float64)
        self.queries = 0.0  # full-causal count: real queries i >= 1
        self.other_count = 0.0  # prompts

    def start_batch(self, lengths: Tensor) -> None:
        self.queries += float((lengths - 1).clamp_min(0).sum())
        self.other_count += float(len(lengths))

    @staticmethod
    def partial(rows: Tensor, ctx: SinkCtx, q0: int) -> Sums:
        assert ctx.vnorm is not None
        share, attn, n_q = value_norm_block(rows.float(), ctx.vnorm, ctx.lengths, q0, window=ctx.window, causal=ctx.causal)
        return {"share": share, "attn": attn, "n": n_q}

    @staticmethod
    def finish(sums: Sums, ctx: SinkCtx) -> Sums:
        return {k: v.float() for k, v in sums.items()}

    def add(self, layer: int, out: Sums, ctx: SinkCtx) -> None:
        vnorm = ctx.vnorm
        assert vnorm is not None
        self.share_sum[layer] += out["share"].sum(0).double()
        self.attn_sum[layer] += out["attn"].sum(0).double()
        pos = torch.arange(vnorm.shape[-1], device=vnorm.device)
        other = ((pos[None, :] >= 1) & (pos[None, :] < ctx.lengths[:, None])).to(vnorm.dtype)  # [b, k]
        self.sink_norm_sum[layer] += vnorm[:, :, 0].sum(0).double()
        self.other_norm_sum[layer] += ((vnorm * other[:, None]).sum(-1) / other.sum(-1).clamp_min(1)[:, None]).sum(0).double()
        self.queries_layer[layer] += float(out["n"].sum())


class TargetStat:
    """Attention shares of the key groups of :data:`TARGET_GROUPS` per layer and head, and a uniform head's."""

    name = "targets"

    def __init__(self, n_layers: int, n_heads: int, *, punct: Tensor, frame: tuple[int, int], device: torch.device | str) -> None:
        g = len(TARGET_GROUPS)
        self.punct, self.frame = punct.to(device), frame
        self.share_sum = _zeros(g, n_layers, n_heads, device=device)
        self.uniform_sum = _zeros(g, n_layers, device=device)
        self.n = _zeros(g, n_layers, device=device)
        self.keys = _zeros(g, device=device)

    def start_batch(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """The batch's key groups ``[group, batch, pos]`` (0/1 float)."""
        n_prefix, n_suffix = self.frame
        pos = torch.arange(int(tokens.shape[1]), device=tokens.device)
        real = pos[None, :] < lengths[:, None]
        first = real & (pos[None, :] == 0)
        suffix = real & (pos[None, :] >= lengths[:, None] - n_suffix) if n_suffix > 0 else torch.zeros_like(real)
        text = real & (pos[None, :] >= max(n_prefix, 1)) & (pos[None, :] < lengths[:, None] - n_suffix)
        punct = text & torch.isin(tokens, self.punct)
        groups = torch.stack([first, suffix, punct]).float()
        self.keys += groups.sum(dim=(1, 2)).double()
        return groups

    @staticmethod
    def partial(rows: Tensor, ctx: SinkCtx, q0: int) -> Sums:
        groups = ctx.groups
        assert groups is not None
        rows = rows.float()
        n_rows, width = rows.shape[2], rows.shape[3]
        q_pos = torch.arange(q0, q0 + n_rows, device=rows.device)
        k_pos = torch.arange(width, device=rows.device)
        real_q = q_pos[None, :] < ctx.lengths[:, None]
        real_k = k_pos[None, :] < ctx.lengths[:, None]
        rule = visible(q_pos[:, None], k_pos[None, :], window=ctx.window, causal=ctx.causal)
        vis = (real_q[:, :, None] & real_k[:, None, :] & rule[None]).float()  # [b, q, k]: real query i sees real key j
        share = torch.einsum("bhqk,gbk->gbhq", rows, groups)  # attention to the group
        seen = torch.einsum("bqk,gbk->gbq", vis, groups)  # group keys each query sees
        total = vis.sum(-1).clamp_min(1)  # keys each query sees
        qmask = (seen > 0).float()  # queries that see a key of the group
        return {"share": (share * qmask[:, :, None, :]).sum(-1), "uniform": (seen / total[None] * qmask).sum(-1), "n": qmask.sum(-1)}

    @staticmethod
    def finish(sums: Sums, ctx: SinkCtx) -> Sums:
        """Per group and prompt: the mean share ``[g, b, h]`` and uniform share ``[g, b]`` over the
        queries that see a key of the group, and whether there is one (``measured``)."""
        nq = sums["n"].float()
        return {
            "share": sums["share"].float() / nq.clamp_min(1)[:, :, None],
            "uniform": sums["uniform"].float() / nq.clamp_min(1),
            "measured": (nq > 0).double(),
        }

    def add(self, layer: int, out: Sums, ctx: SinkCtx) -> None:
        measured = out["measured"]
        self.share_sum[:, layer] += (out["share"].double() * measured[:, :, None]).sum(1)
        self.uniform_sum[:, layer] += (out["uniform"].double() * measured).sum(1)
        self.n[:, layer] += measured.sum(1)

    def mean(self, group: str) -> Tensor:
        """``[layer, head]``: the attention share of a key group; NaN where no sequence has a query
        that sees a key of the group (e.g. ``suffix`` on a decoder)."""
        g = TARGET_GROUPS.index(group)
        n, total = self.n[g].cpu()[:, None], self.share_sum[g].cpu()
        return torch.where(n > 0, total / n.clamp_min(1), torch.full_like(total, float("nan")))

    def uniform(self, group: str) -> Tensor:
        """``[layer]``: the same share for a uniform head; NaN where unmeasured."""
        g = TARGET_GROUPS.index(group)
        n = self.n[g].cpu()
        return torch.where(n > 0, self.uniform_sum[g].cpu() / n.clamp_min(1), torch.full_like(n, float("nan")))
