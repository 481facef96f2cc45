"""One streaming pass that reduces attention patterns to sink statistics inside the hooks.

Nothing per prompt is kept: each hook reduces its batch to running sums of fixed size
(``[layer, head]``, ``[layer, head, position]`` or ``[layer, head, distinct token]``), so
memory does not grow with the number of prompts.  All statistics are in float32 whatever
the model's dtype, and padded positions never count.

The statistics and their sliding-window and bidirectional variants are defined where they are
computed: sink alpha and the uniform baseline in :mod:`headlens.analyses.sinks.stats` (the
:class:`~headlens.analyses.sinks.stats.StreamStats` this pass returns), excess attention
received and value-norm shares in :mod:`headlens.analyses.sinks.reductions`, sink targets in
:mod:`headlens.analyses.sinks.targets`.

Every forward passes the batch's attention mask (padding is never attended to;
:mod:`headlens.analyses.sinks.forward`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import logging

import torch
from torch import Tensor

from headlens.analyses.attention_stats import sink_alpha, uniform_sink_alpha
from headlens.analyses.sinks.forward import batch_attention_mask, layer_causal, run_to_last_pattern
from headlens.analyses.sinks.reductions import excess_received, head_output_weights, value_norm_share
from headlens.analyses.sinks.stats import StreamStats
from headlens.analyses.sinks.targets import TARGET_GROUPS, punctuation_ids
from headlens.probes.attention import attention_spec
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch, iter_batches

__all__ = ["stream_sink_stats"]

log = logging.getLogger(__name__)


_BI = "bidirectional"


class _Reducer:
    """Holds the running sums on the model's device and the hooks that fill them."""

    def __init__(
        self,
        model: LoadedModel,
        *,
        keys: tuple[int, ...],
        eps: float,
        width: int,
        token_ids: Tensor | None,
        value_norm: bool,
        punct: Tensor | None = None,
        frame: tuple[int, int] = (0, 0),
    ) -> None:
        dev = model.device
        n_l, n_h = model.n_layers, model.n_heads
        f32 = torch.float32
        self.model = model
        self.keys = keys
        self.eps = eps
        self.causal = layer_causal(model)
        # a window at least as long as the prompts changes nothing: those layers are full causal
        # here; headlens knows no bidirectional family with a window
        self.windows: tuple[int | None, ...] = tuple(
            layer.window if layer.window is not None and layer.window < width and c else None
            for layer, c in zip(attention_spec(model).layers, self.causal)
        )
        #: per layer: None (full causal), a window size, or "bidirectional"
        self.kinds: tuple[int | str | None, ...] = tuple(w if c else _BI for w, c in zip(self.windows, self.causal))
        self.alpha_sum = torch.zeros(len(keys), n_l, n_h, dtype=torch.float64, device=dev)
        self.alpha_sq_sum = torch.zeros_like(self.alpha_sum)
        self.alpha_above = torch.zeros_like(self.alpha_sum)
        self.secondary = token_ids is not None
        other_kinds = [k for k in dict.fromkeys(self.kinds) if k is not None]
        if self.secondary:
            assert token_ids is not None
            self.pos_excess = torch.zeros(n_l, n_h, width, dtype=torch.float64, device=dev)
            self.pos_queries = torch.zeros(width, dtype=torch.float64, device=dev)
            self.token_ids = token_ids.to(dev)
            u = len(token_ids)
            self.tok_excess = torch.zeros(n_l, n_h, u, dtype=torch.float64, device=dev)
            self.tok_queries = torch.zeros(u, dtype=torch.float64, device=dev)
            self.tok_count = torch.zeros(u, dtype=torch.float64, device=dev)
            # per sliding window (and bidirectional): query counts of the queries that see each key
            self.pos_queries_w = {k: torch.zeros(width, dtype=torch.float64, device=dev) for k in other_kinds}
            self.tok_queries_w = {k: torch.zeros(u, dtype=torch.float64, device=dev) for k in other_kinds}
        self.value_norm = value_norm
        if value_norm:
            self.gram = []
            for layer in range(n_l):
                w_o = head_output_weights(model, layer).to(dev, f32)
                self.gram.append(torch.einsum("hde,hfe->hdf", w_o, w_o))  # W_O^h W_O^h^T
            self.vn_share_sum = torch.zeros(n_l, n_h, dtype=torch.float64, device=dev)
            self.vn_attn_sum = torch.zeros_like(self.vn_share_sum)
            self.vn_sink_norm_sum = torch.zeros_like(self.vn_share_sum)
            self.vn_other_norm_sum = torch.zeros_like(self.vn_share_sum)
            self.vn_queries = 0.0
            self.vn_queries_layer = torch.zeros(n_l, dtype=torch.float64)
            self.vn_other_count = 0.0
            self._vnorm: dict[int, Tensor] = {}
        self.targets = punct is not None
        self.frame = frame
        if self.targets:
            assert punct is not None
            self.punct = punct.to(dev)
            g = len(TARGET_GROUPS)
            self.target_sum = torch.zeros(g, n_l, n_h, dtype=torch.float64, device=dev)
            self.target_uniform_sum = torch.zeros(g, n_l, dtype=torch.float64, device=dev)
            self.target_n = torch.zeros(g, n_l, dtype=torch.float64, device=dev)
            self.target_keys = torch.zeros(g, dtype=torch.float64, device=dev)
        # Per-batch state, set by ``start_batch``.
        self.lengths: Tensor | None = None
        self.compact: Tensor | None = None  # [b, pos] index into token_ids (-1 on padding)
        self.groups: Tensor | None = None  # [group, b, pos] 0/1 key groups of the sink targets
        self._visible: dict[Any, Tensor] = {}

    def start_batch(self, sub: TokenBatch) -> None:
        dev = self.model.device
        self.lengths = sub.lengths.to(dev)
        self._visible = {}
        width = int(sub.tokens.shape[1])
        pos = torch.arange(width, device=dev)
        if self.secondary:
            tokens = sub.tokens.to(dev)
            compact = torch.searchsorted(self.token_ids, tokens)
            self.compact = torch.where(sub.mask.to(dev), compact, torch.full_like(compact, -1))
            n_queries = (self.lengths[:, None] - pos[None, :]).clamp_min(0).to(torch.float64)
            self.pos_queries[:width] += n_queries.sum(0)
            keep = (self.compact >= 0) & (pos[None, :] >= 1)
            self.tok_queries.index_add_(0, self.compact[keep], n_queries[keep])
            self.tok_count.index_add_(0, self.compact[keep], torch.ones_like(n_queries[keep]))
            for k in self.pos_queries_w:
                if k == _BI:  # all n real queries see each real key
                    n_w = torch.where(pos[None, :] < self.lengths[:, None], self.lengths[:, None], 0).to(torch.float64)
                else:  # queries j <= i < min(length, j + w) see key j
                    n_w = (torch.minimum(self.lengths[:, None], pos[None, :] + k) - pos[None, :]).clamp_min(0).to(torch.float64)
                self.pos_queries_w[k][:width] += n_w.sum(0)
                self.tok_queries_w[k].index_add_(0, self.compact[keep], n_w[keep])
        if self.targets:
            n_prefix, n_suffix = self.frame
            real = pos[None, :] < self.lengths[:, None]
            first = real & (pos[None, :] == 0)
            suffix = real & (pos[None, :] >= self.lengths[:, None] - n_suffix) if n_suffix > 0 else torch.zeros_like(real)
            text = real & (pos[None, :] >= max(n_prefix, 1)) & (pos[None, :] < self.lengths[:, None] - n_suffix)
            punct = text & torch.isin(sub.tokens.to(dev), self.punct)
            self.groups = torch.stack([first, suffix, punct]).float()  # [group, b, pos]
            self.target_keys += self.groups.sum(dim=(1, 2)).double()

    def visible(self, kind: int | str | None, width: int) -> Tensor:
        """0/1 ``[b, q, k]``: real query i sees real key j in a layer of this kind."""
        if kind not in self._visible:
            assert self.lengths is not None
            pos = torch.arange(width, device=self.lengths.device)
            real = pos[None, :] < self.lengths[:, None]
            ok = real[:, :, None] & real[:, None, :]
            i, j = pos[:, None], pos[None, :]
            if kind != _BI:
                rule = j <= i
                if kind is not None:
                    rule = rule & (j > i - int(kind))
                ok = ok & rule[None]
            self._visible[kind] = ok.float()
        return self._visible[kind]

    def v_hook(self, layer: int) -> Callable[..., None]:
        gram = self.gram[layer]

        def hook(v: Tensor, hook: Any = None) -> None:
            v = v.detach().float()
            if v.shape[2] != gram.shape[0]:  # grouped-query attention: one value head per group
                v = v.repeat_interleave(gram.shape[0] // v.shape[2], dim=2)
            vg = torch.einsum("bphd,hdf->bphf", v, gram)
            self._vnorm[layer] = (vg * v).sum(-1).clamp_min(0).sqrt().permute(0, 2, 1)  # [b, head, pos]

        return hook

    def _targets(self, layer: int, p: Tensor) -> None:
        groups = self.groups
        assert groups is not None
        vis = self.visible(self.kinds[layer], p.shape[-1])  # [b, q, k]
        share = torch.einsum("bhqk,gbk->gbhq", p, groups)  # attention to the group
        seen = torch.einsum("bqk,gbk->gbq", vis, groups)  # group keys each query sees
        total = vis.sum(-1).clamp_min(1)  # keys each query sees
        qmask = (seen > 0).float()  # queries that see a key of the group
        nq = qmask.sum(-1)  # [g, b]
        measured = (nq > 0).double()
        mean_share = (share * qmask[:, :, None, :]).sum(-1) / nq.clamp_min(1)[:, :, None]  # [g, b, h]
        mean_uniform = (seen / total[None] * qmask).sum(-1) / nq.clamp_min(1)  # [g, b]
        self.target_sum[:, layer] += (mean_share.double() * measured[:, :, None]).sum(1)
        self.target_uniform_sum[:, layer] += (mean_uniform.double() * measured).sum(1)
        self.target_n[:, layer] += measured.sum(1)

    def pattern_hook(self, layer: int) -> Callable[..., None]:
        window = self.windows[layer]
        causal = self.causal[layer]

        def hook(pattern: Tensor, hook: Any = None) -> None:
            p = pattern.detach().float()
            lengths = self.lengths
            assert lengths is not None
            for ki, key in enumerate(self.keys):
                alpha = sink_alpha(p, lengths, key=key, window=window, causal=causal).double()  # [b, head]
                valid = (lengths > key).to(alpha.dtype)[:, None]
                self.alpha_sum[ki, layer] += (alpha * valid).sum(0)
                self.alpha_sq_sum[ki, layer] += (alpha**2 * valid).sum(0)
                self.alpha_above[ki, layer] += ((alpha > self.eps).to(alpha.dtype) * valid).sum(0)
            if self.secondary:
                excess, _ = excess_received(p, lengths, window=window, causal=causal)  # [b, head, k]
                width = p.shape[-1]
                self.pos_excess[layer, :, :width] += excess.sum(0).double()
                compact = self.compact
                assert compact is not None
                keep = compact >= 0
                keep[:, 0] = False
                per_key = excess.permute(0, 2, 1)[keep]  # [n_keys, head]
                self.tok_excess[layer].index_add_(1, compact[keep], per_key.T.double())
            if self.value_norm:
                vnorm = self._vnorm.pop(layer)
                share, attn, n_q = value_norm_share(p, vnorm, lengths, window=window, causal=causal)
                self.vn_share_sum[layer] += share.sum(0).double()
                self.vn_attn_sum[layer] += attn.sum(0).double()
                pos = torch.arange(vnorm.shape[-1], device=vnorm.device)
                other = ((pos[None, :] >= 1) & (pos[None, :] < lengths[:, None])).to(vnorm.dtype)  # [b, k]
                self.vn_sink_norm_sum[layer] += vnorm[:, :, 0].sum(0).double()
                self.vn_other_norm_sum[layer] += ((vnorm * other[:, None]).sum(-1) / other.sum(-1).clamp_min(1)[:, None]).sum(0).double()
                self.vn_queries_layer[layer] += float(n_q.sum())
                if layer == 0:
                    self.vn_other_count += float(len(lengths))
            if self.targets:
                self._targets(layer, p)

        return hook

    def hooks(self) -> list[tuple[str, Callable[..., None]]]:
        out = []
        for layer in range(self.model.n_layers):
            if self.value_norm:
                out.append((f"blocks.{layer}.attn.hook_v", self.v_hook(layer)))
            out.append((f"blocks.{layer}.attn.hook_pattern", self.pattern_hook(layer)))
        return out


def stream_sink_stats(
    model: LoadedModel,
    batch: TokenBatch,
    *,
    eps: float,
    keys: tuple[int, ...] = (0,),
    secondary: bool = False,
    value_norm: bool = False,
    targets: bool = False,
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> StreamStats:
    """Run ``batch`` through every layer (no unembedding) and reduce the patterns on the fly.

    Always: Gu et al. alpha for each key in ``keys`` (sum, sum of squares, count above ``eps``)
    and its uniform baseline.  ``secondary``: excess attention received per key position and per
    token id.  ``value_norm``: sink value-norm and attention shares (both in :mod:`headlens.analyses.sinks.reductions`).
    ``targets``: attention shares of the first position, the suffix (``[SEP]``) and punctuation
    (the batch's ``n_prefix``/``n_suffix`` say which positions are framing).  Sliding-window
    and bidirectional layers: see :mod:`headlens.analyses.sinks.stats`.
    """
    width = int(batch.tokens.shape[1])
    token_ids = torch.unique(batch.tokens[batch.mask]) if secondary else None
    frame = (int(getattr(batch, "n_prefix", None) or (1 if batch.prepend_bos else 0)), int(getattr(batch, "n_suffix", 0) or 0))
    punct = punctuation_ids(model.tokenizer, batch.tokens[batch.mask]) if targets else None
    red = _Reducer(model, keys=keys, eps=eps, width=width, token_ids=token_ids, value_norm=value_norm, punct=punct, frame=frame)
    stats = StreamStats(keys=keys, eps=eps, windows=red.windows, causal=red.causal)
    distinct = list(dict.fromkeys(red.kinds))
    alpha_n = torch.zeros(len(keys), dtype=torch.float64)
    uniform_sum = torch.zeros(len(keys), dtype=torch.float64)
    uniform_above = torch.zeros(len(keys), dtype=torch.float64)
    w_sum = {k: torch.zeros(len(keys), dtype=torch.float64) for k in distinct if k is not None}
    w_above = {k: torch.zeros(len(keys), dtype=torch.float64) for k in distinct if k is not None}
    vn_queries = 0.0
    chunks = iter_batches(batch, batch_size)
    hooks = red.hooks()
    with torch.inference_mode():
        for done, (_, sub) in enumerate(chunks, start=1):
            red.start_batch(sub)
            run_to_last_pattern(model, sub.tokens, hooks, attention_mask=batch_attention_mask(sub))
            for ki, key in enumerate(keys):
                valid = sub.lengths > key
                ua = uniform_sink_alpha(sub.lengths[valid], key=key)
                alpha_n[ki] += int(valid.sum())
                uniform_sum[ki] += ua.sum()
                uniform_above[ki] += (ua > eps).sum()
                for k in w_sum:
                    if k == _BI:
                        ua_w = uniform_sink_alpha(sub.lengths[valid], key=key, causal=False)
                    else:
                        ua_w = uniform_sink_alpha(sub.lengths[valid], key=key, window=k)
                    w_sum[k][ki] += ua_w.sum()
                    w_above[k][ki] += (ua_w > eps).sum()
            vn_queries += float((sub.lengths - 1).clamp_min(0).sum())  # real queries i >= 1
            if progress is not None:
                progress(done, len(chunks))

    def by_layer(full: Tensor, per_kind: dict[Any, Tensor]) -> Tensor:
        """``[..., layer]``: the full-causal value or the layer's window's (or bidirectional)."""
        return torch.stack([full if k is None else per_kind[k] for k in red.kinds], dim=-1)

    stats.n_samples = len(batch)
    stats.n_tokens = int(batch.lengths.sum())
    stats.alpha_sum = red.alpha_sum.cpu()
    stats.alpha_sq_sum = red.alpha_sq_sum.cpu()
    stats.alpha_above = red.alpha_above.cpu()
    stats.alpha_n = alpha_n
    stats.uniform_sum = uniform_sum
    stats.uniform_above = uniform_above
    stats.uniform_layer_sum = by_layer(uniform_sum, w_sum)
    stats.uniform_layer_above = by_layer(uniform_above, w_above)
    if secondary:
        stats.pos_excess = red.pos_excess.cpu()
        stats.pos_queries = red.pos_queries.cpu()
        stats.token_ids = red.token_ids.cpu()
        stats.tok_excess = red.tok_excess.cpu()
        stats.tok_queries = red.tok_queries.cpu()
        stats.tok_count = red.tok_count.cpu()
        stats.pos_queries_layer = by_layer(stats.pos_queries, {k: t.cpu() for k, t in red.pos_queries_w.items()}).T.contiguous()
        stats.tok_queries_layer = by_layer(stats.tok_queries, {k: t.cpu() for k, t in red.tok_queries_w.items()}).T.contiguous()
    if value_norm:
        stats.vn_share_sum = red.vn_share_sum.cpu()
        stats.vn_attn_sum = red.vn_attn_sum.cpu()
        stats.vn_queries = vn_queries
        stats.vn_queries_layer = red.vn_queries_layer
        stats.vn_sink_norm_sum = red.vn_sink_norm_sum.cpu()
        stats.vn_other_norm_sum = red.vn_other_norm_sum.cpu()
        stats.vn_other_count = red.vn_other_count
    if targets:
        stats.target_sum = red.target_sum.cpu()
        stats.target_uniform_sum = red.target_uniform_sum.cpu()
        stats.target_n = red.target_n.cpu()
        stats.target_keys = red.target_keys.cpu()
        stats.punctuation = red.punct.cpu()
    return stats
