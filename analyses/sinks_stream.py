"""One streaming pass that reduces attention patterns to sink statistics inside the hooks.

Nothing per prompt is kept: each hook reduces its batch to running sums of fixed size
(``[layer, head]``, ``[layer, head, position]`` or ``[layer, head, distinct token]``), so
memory does not grow with the number of prompts.  All statistics are in float32 whatever
the model's dtype, and padded positions never count.

Definitions (``A = A[l,h]``, a prompt of ``n`` real tokens, queries ``i``, keys ``j <= i``):

* **Sink alpha** (Gu et al. 2024), :func:`analyses.attention_stats.sink_alpha`:
  ``alpha(k) = mean over queries i >= k of A[i, k]``.  Kept for keys 0 and 1 (key 1 answers
  "does attention follow BOS when it is moved to position 1").
* **Uniform baseline**: the same statistic for a head that gives ``1/(i+1)`` to every key.
* **Excess attention received** by key ``j`` (secondary sinks): ``A[i, j] - 1/(i+1)`` pooled
  over every real query ``i >= j`` and every prompt, i.e. ``sum(A[i,j] - 1/(i+1)) / #queries``.
  Pooled per key position, and per token id over key positions ``j >= 1`` (position 0 is the
  primary sink, reported by the census).
* **Value-norm share** (Kobayashi et al. 2020): head ``h``'s output at query ``i`` is
  ``o_i = sum_j A[i,j] f_j`` with ``f_j = v_j W_O^h`` (``v_j`` includes the value bias; the
  layer's output bias is not per head and is left out).  The sink's share of it is
  ``s_i = ||A[i,0] f_0|| / sum_j ||A[i,j] f_j|| = A[i,0] ||f_0|| / sum_j A[i,j] ||f_j||``,
  averaged over real queries ``i >= 1`` (query 0 sees only key 0, so both its shares are 1).
  Beside it, the attention share ``mean over i >= 1 of A[i,0]``.  A sink with a large
  attention share and a tiny norm share writes almost nothing: a no-op.
  ``||f_j||`` is computed as ``sqrt(v_j G_h v_j)`` with ``G_h = W_O^h W_O^h^T`` (``d_head x
  d_head``), so the ``d_model``-wide vectors are never built.

Sliding windows (each layer's, from :func:`probes.attention.attention_spec`): in a layer with a
window of ``w`` keys query ``i`` sees only keys ``i - w < j <= i``.  There a uniform head gives
``1/min(i+1, w)`` to each key it sees, and every statistic counts only the queries that can
see the key it is about: alpha(k) and its baseline over ``k <= i < k + w``; excess attention
received by ``j`` is ``A[i,j] - 1/min(i+1, w)`` over ``j <= i < j + w`` (per-layer query counts
``pos_queries_layer``/``tok_queries_layer``); value-norm and attention shares over ``1 <= i < w``
(``vn_queries_layer``).  Full-causal layers are computed exactly as before; the un-suffixed
counts and ``uniform_mean()`` without a layer are those of full-causal attention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from analyses.attention_stats import sink_alpha, uniform_sink_alpha
from probes.attention import attention_spec
from probes.errors import InputError
from probes.capture import run_forward
from probes.hooks import attached
from probes.loading import LoadedModel
from probes.prompts import TokenBatch, iter_batches

__all__ = ["StreamStats", "stream_sink_stats", "head_output_weights", "value_norm_share", "excess_received", "run_to_last_pattern"]


def run_to_last_pattern(model: LoadedModel, tokens: Tensor, hooks: list[tuple[str, Callable[..., Any]]]) -> None:
    """One forward pass with ``hooks`` attached that stops right after the last layer's attention pattern.

    The bridge's ``stop_at_layer`` can only stop *before* a block, and ``stop_at_layer=n_layers``
    still runs the whole model and its unembedding (the logits are computed whatever the
    ``return_type``); a statistic of attention patterns needs neither the last layer's
    ``z``/output projection/MLP nor the unembedding, so :func:`probes.capture.run_forward`
    ends the pass after the last ``hook_pattern`` (its stop hook is attached after ``hooks``,
    so it runs after them).
    """

    with attached(model.bridge, hooks):
        run_forward(model, tokens, stop_after=f"blocks.{model.n_layers - 1}.attn.hook_pattern")


def head_output_weights(model: LoadedModel, layer: int) -> Tensor:
    """``W_O`` of ``layer`` as ``[head, d_head, d_model]`` (rows of the output projection by head).

    Read from the bridge's ``blocks[layer].attn.W_O`` when it has one; otherwise from the
    output projection module ``blocks[layer].attn.o``: a GPT-2 ``Conv1D`` (weight ``[n_heads *
    d_head, d_model]``) or an ``nn.Linear`` (weight ``[d_model, n_heads * d_head]``), input
    features ordered by head.  Any other layout is an :class:`InputError`.
    """
    attn = model.bridge.blocks[layer].attn
    n_h, d_h = model.n_heads, model.d_head
    try:
        w = attn.W_O
        if tuple(w.shape[:2]) == (n_h, d_h):
            return w.detach()
    except (AttributeError, RuntimeError, NotImplementedError):
        pass
    module = getattr(getattr(attn, "o", None), "original_component", None)
    weight = getattr(module, "weight", None)
    if weight is not None:
        w = weight.detach()
        if type(module).__name__ == "Conv1D" and w.shape[0] == n_h * d_h:
            return w.reshape(n_h, d_h, w.shape[1])
        if isinstance(module, torch.nn.Linear) and w.shape[1] == n_h * d_h:
            return w.T.reshape(n_h, d_h, w.shape[0])
    raise InputError(
        f"cannot find the per-head output projection (W_O) of layer {layer} in this model; "
        "value-norm shares need GPT-2-style Conv1D or nn.Linear output projections (skip them with --skip value_norm)",
        layer=layer,
    )


def value_norm_share(
    pattern: Tensor,
    value_norm: Tensor,
    lengths: Tensor,
    *,
    window: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per prompt and head: sums over real queries ``i >= 1`` of the sink's norm share and attention share.

    ``pattern`` ``[batch, head, q, k]``, ``value_norm`` ``[batch, head, k]`` = ``||v_j W_O^h||``.
    Returns ``(norm_share_sum, attn_share_sum, n_queries)``, shapes ``[batch, head]``,
    ``[batch, head]``, ``[batch]``; divide to get means (see the module docstring).  With a
    sliding ``window`` only the queries that can see key 0 count (``1 <= i < window``).
    """
    width = pattern.shape[2]
    pos = torch.arange(width, device=pattern.device)
    qbool = (pos[None, :] >= 1) & (pos[None, :] < lengths[:, None].to(pattern.device))
    if window is not None:
        qbool = qbool & (pos[None, :] < window)
    qmask = qbool.to(pattern.dtype)  # [b, q]
    weighted = torch.einsum("bhqk,bhk->bhq", pattern, value_norm)  # sum_j A[i,j] ||f_j||
    sink = pattern[..., 0] * value_norm[:, :, :1]  # A[i,0] ||f_0||
    # weighted >= sink >= 0; where weighted is 0, sink is 0 too and the share is 0.
    share = sink / weighted.clamp_min(torch.finfo(pattern.dtype).tiny)
    return (share * qmask[:, None]).sum(-1), (pattern[..., 0] * qmask[:, None]).sum(-1), qmask.sum(-1)


def excess_received(pattern: Tensor, lengths: Tensor, *, window: int | None = None) -> tuple[Tensor, Tensor]:
    """Per prompt, head and key ``j``: ``sum over real queries i >= j of (A[i,j] - 1/(i+1))`` and the query count.

    Returns ``(excess_sum [batch, head, k], n_queries [batch, k])``; padded keys give 0 and 0.
    With a sliding ``window``: over the real queries that see ``j`` (``j <= i < j + window``),
    of ``A[i,j] - 1/min(i+1, window)``.
    """
    b, _, width, _ = pattern.shape
    lengths = lengths.to(pattern.device)
    pos = torch.arange(width, device=pattern.device)
    real = pos[None, :] < lengths[:, None]  # [b, pos]
    if window is not None:
        i, j = pos[:, None], pos[None, :]
        sees = real[:, :, None] & ((j <= i) & (j > i - window))[None]  # [b, q, k]: real query i sees key j
        weight = sees.to(pattern.dtype)
        received_w = torch.einsum("bhqk,bqk->bhk", pattern, weight)
        inv_w = 1.0 / (pos + 1).clamp(max=window).to(pattern.dtype)
        uniform_w = torch.einsum("bqk,q->bk", weight, inv_w)
        excess_w = (received_w - uniform_w[:, None, :]) * real[:, None, :].to(pattern.dtype)
        return excess_w, weight.sum(1)
    received = torch.einsum("bhqk,bq->bhk", pattern, real.to(pattern.dtype))
    inv = torch.where(real, 1.0 / (pos[None, :] + 1).to(pattern.dtype), torch.zeros((), dtype=pattern.dtype, device=pattern.device))
    # uniform[b, j] = sum_{i=j}^{n_b - 1} 1/(i+1): reverse cumulative sum over real queries.
    uniform = inv.flip(-1).cumsum(-1).flip(-1)
    n_queries = ((lengths[:, None] - pos[None, :]).clamp_min(0)).to(pattern.dtype)
    excess = (received - uniform[:, None, :]) * real[:, None, :].to(pattern.dtype)
    return excess, n_queries


@dataclass
class StreamStats:
    """Running sums from :func:`stream_sink_stats`, on the CPU, float64 where they are sums.

    ``alpha_*``: ``[key, layer, head]`` for the keys in ``keys``; ``uniform_*``: ``[key]``.
    ``pos_excess`` ``[layer, head, position]`` with ``pos_queries`` ``[position]``;
    ``tok_excess`` ``[layer, head, token]`` over ``token_ids`` with ``tok_queries`` and
    ``tok_count`` ``[token]``; ``vn_*`` ``[layer, head]`` with ``vn_queries`` (a number).

    Query counts and uniform baselines depend on a layer's sliding window (``windows``, one per
    layer, None for full causal attention or a window at least as long as the longest prompt): ``uniform_layer_sum``/``uniform_layer_above``
    ``[key, layer]``, ``pos_queries_layer`` ``[layer, position]``, ``tok_queries_layer``
    ``[layer, token]``, ``vn_queries_layer`` ``[layer]``.  The un-suffixed ``uniform_sum``,
    ``pos_queries``, ``tok_queries``, ``vn_queries`` are those of full-causal attention (all
    layers' when the model has no window).
    """

    keys: tuple[int, ...]
    eps: float
    n_samples: int = 0
    n_tokens: int = 0
    alpha_sum: Tensor | None = None
    alpha_sq_sum: Tensor | None = None
    alpha_above: Tensor | None = None
    alpha_n: Tensor | None = None
    uniform_sum: Tensor | None = None
    uniform_above: Tensor | None = None
    pos_excess: Tensor | None = None
    pos_queries: Tensor | None = None
    token_ids: Tensor | None = None
    tok_excess: Tensor | None = None
    tok_queries: Tensor | None = None
    tok_count: Tensor | None = None
    vn_share_sum: Tensor | None = None
    vn_attn_sum: Tensor | None = None
    vn_queries: float = 0.0
    vn_sink_norm_sum: Tensor | None = None
    vn_other_norm_sum: Tensor | None = None
    vn_other_count: float = 0.0
    windows: tuple[int | None, ...] = ()
    uniform_layer_sum: Tensor | None = None
    uniform_layer_above: Tensor | None = None
    pos_queries_layer: Tensor | None = None
    tok_queries_layer: Tensor | None = None
    vn_queries_layer: Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def _n(self, key: int) -> float:
        return max(float(self.alpha_n[self.keys.index(key)]), 1.0)

    def alpha_mean(self, key: int = 0) -> Tensor:
        """``[layer, head]``: alpha averaged over prompts (those longer than ``key``)."""
        return self.alpha_sum[self.keys.index(key)] / self._n(key)

    def alpha_std(self, key: int = 0) -> Tensor:
        k = self.keys.index(key)
        mean = self.alpha_sum[k] / self._n(key)
        return (self.alpha_sq_sum[k] / self._n(key) - mean**2).clamp_min(0).sqrt()

    def alpha_rate(self, key: int = 0) -> Tensor:
        """``[layer, head]``: fraction of prompts with alpha > eps."""
        return self.alpha_above[self.keys.index(key)] / self._n(key)

    @property
    def windowed(self) -> bool:
        """True when some layer attends within a sliding window."""
        return any(w is not None for w in self.windows)

    def uniform_mean(self, key: int = 0, layer: int | None = None) -> float:
        """Alpha of a uniform head in ``layer`` (its window's baseline); without a layer, the
        mean over layers (the full-causal value when no layer has a window)."""
        k = self.keys.index(key)
        if layer is not None:
            return float(self.uniform_layer_sum[k, layer]) / self._n(key)
        if not self.windowed:
            return float(self.uniform_sum[k]) / self._n(key)
        return float(self.uniform_layer_sum[k].mean()) / self._n(key)

    def uniform_rate(self, key: int = 0, layer: int | None = None) -> float:
        """Fraction of prompts where a uniform head in ``layer`` has alpha > eps (as :meth:`uniform_mean`)."""
        k = self.keys.index(key)
        if layer is not None:
            return float(self.uniform_layer_above[k, layer]) / self._n(key)
        if not self.windowed:
            return float(self.uniform_above[k]) / self._n(key)
        return float(self.uniform_layer_above[k].mean()) / self._n(key)

    def window_notes(self) -> list[str]:
        """One line per sliding-window layer: what its statistics average over."""
        notes = []
        for layer, w in enumerate(self.windows):
            if w is None:
                continue
            notes.append(
                f"layer {layer}: sliding window of {w} keys; sink alpha of key k is averaged over the queries that can see it"
                f" (k <= i < k + {w}: i < {w} for key 0), baseline uniform over the keys the window allows (1/min(i+1, {w}));"
                f" excess attention over the queries that see each key; value-norm shares over 1 <= i < {w}"
            )
        return notes


class _Reducer:
    """Holds the running sums on the model's device and the hooks that fill them."""

    def __init__(self, model: LoadedModel, *, keys: tuple[int, ...], eps: float, width: int, token_ids: Tensor | None, value_norm: bool) -> None:
        dev = model.device
        n_l, n_h = model.n_layers, model.n_heads
        f32 = torch.float32
        self.model = model
        self.keys = keys
        self.eps = eps
        # a window at least as long as the prompts changes nothing: those layers are full causal here
        self.windows: tuple[int | None, ...] = tuple(
            layer.window if layer.window is not None and layer.window < width else None for layer in attention_spec(model).layers
        )
        self.alpha_sum = torch.zeros(len(keys), n_l, n_h, dtype=torch.float64, device=dev)
        self.alpha_sq_sum = torch.zeros_like(self.alpha_sum)
        self.alpha_above = torch.zeros_like(self.alpha_sum)
        self.secondary = token_ids is not None
        if self.secondary:
            assert token_ids is not None
            self.pos_excess = torch.zeros(n_l, n_h, width, dtype=torch.float64, device=dev)
            self.pos_queries = torch.zeros(width, dtype=torch.float64, device=dev)
            self.token_ids = token_ids.to(dev)
            u = len(token_ids)
            self.tok_excess = torch.zeros(n_l, n_h, u, dtype=torch.float64, device=dev)
            self.tok_queries = torch.zeros(u, dtype=torch.float64, device=dev)
            self.tok_count = torch.zeros(u, dtype=torch.float64, device=dev)
            # per sliding window: query counts of the queries that see each key
            self.pos_queries_w = {w: torch.zeros(width, dtype=torch.float64, device=dev) for w in set(self.windows) if w is not None}
            self.tok_queries_w = {w: torch.zeros(u, dtype=torch.float64, device=dev) for w in set(self.windows) if w is not None}
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
        # Per-batch state, set by ``start_batch``.
        self.lengths: Tensor | None = None
        self.compact: Tensor | None = None  # [b, pos] index into token_ids (-1 on padding)

    def start_batch(self, sub: TokenBatch) -> None:
        dev = self.model.device
        self.lengths = sub.lengths.to(dev)
        if self.secondary:
            tokens = sub.tokens.to(dev)
            compact = torch.searchsorted(self.token_ids, tokens)
            self.compact = torch.where(sub.mask.to(dev), compact, torch.full_like(compact, -1))
            width = tokens.shape[1]
            pos = torch.arange(width, device=dev)
            n_queries = (self.lengths[:, None] - pos[None, :]).clamp_min(0).to(torch.float64)
            self.pos_queries[:width] += n_queries.sum(0)
            keep = (self.compact >= 0) & (pos[None, :] >= 1)
            self.tok_queries.index_add_(0, self.compact[keep], n_queries[keep])
            self.tok_count.index_add_(0, self.compact[keep], torch.ones_like(n_queries[keep]))
            for w in self.pos_queries_w:
                # queries j <= i < min(length, j + w) see key j
                n_w = (torch.minimum(self.lengths[:, None], pos[None, :] + w) - pos[None, :]).clamp_min(0).to(torch.float64)
                self.pos_queries_w[w][:width] += n_w.sum(0)
                self.tok_queries_w[w].index_add_(0, self.compact[keep], n_w[keep])

    def v_hook(self, layer: int) -> Callable[..., None]:
        gram = self.gram[layer]

        def hook(v: Tensor, hook: Any = None) -> None:
            v = v.detach().float()
            if v.shape[2] != gram.shape[0]:  # grouped-query attention: one value head per group
                v = v.repeat_interleave(gram.shape[0] // v.shape[2], dim=2)
            vg = torch.einsum("bphd,hdf->bphf", v, gram)
            self._vnorm[layer] = (vg * v).sum(-1).clamp_min(0).sqrt().permute(0, 2, 1)  # [b, head, pos]

        return hook

    def pattern_hook(self, layer: int) -> Callable[..., None]:
        window = self.windows[layer]

        def hook(pattern: Tensor, hook: Any = None) -> None:
            p = pattern.detach().float()
            lengths = self.lengths
            assert lengths is not None
            for ki, key in enumerate(self.keys):
                alpha = sink_alpha(p, lengths, key=key, window=window).double()  # [b, head]
                valid = (lengths > key).to(alpha.dtype)[:, None]
                self.alpha_sum[ki, layer] += (alpha * valid).sum(0)
                self.alpha_sq_sum[ki, layer] += (alpha**2 * valid).sum(0)
                self.alpha_above[ki, layer] += ((alpha > self.eps).to(alpha.dtype) * valid).sum(0)
            if self.secondary:
                excess, _ = excess_received(p, lengths, window=window)  # [b, head, k]
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
                share, attn, n_q = value_norm_share(p, vnorm, lengths, window=window)
                self.vn_share_sum[layer] += share.sum(0).double()
                self.vn_attn_sum[layer] += attn.sum(0).double()
                pos = torch.arange(vnorm.shape[-1], device=vnorm.device)
                other = ((pos[None, :] >= 1) & (pos[None, :] < lengths[:, None])).to(vnorm.dtype)  # [b, k]
                self.vn_sink_norm_sum[layer] += vnorm[:, :, 0].sum(0).double()
                self.vn_other_norm_sum[layer] += ((vnorm * other[:, None]).sum(-1) / other.sum(-1).clamp_min(1)[:, None]).sum(0).double()
                self.vn_queries_layer[layer] += float(n_q.sum())
                if layer == 0:
                    self.vn_other_count += float(len(lengths))

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
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> StreamStats:
    """Run ``batch`` through every layer (no unembedding) and reduce the patterns on the fly.

    Always: Gu et al. alpha for each key in ``keys`` (sum, sum of squares, count above ``eps``)
    and its uniform baseline.  ``secondary``: excess attention received per key position and per
    token id.  ``value_norm``: sink value-norm and attention shares (module docstring).  Sliding-
    window layers: see the module docstring.
    """
    width = int(batch.tokens.shape[1])
    token_ids = torch.unique(batch.tokens[batch.mask]) if secondary else None
    red = _Reducer(model, keys=keys, eps=eps, width=width, token_ids=token_ids, value_norm=value_norm)
    stats = StreamStats(keys=keys, eps=eps, windows=red.windows)
    distinct = list(dict.fromkeys(red.windows))
    alpha_n = torch.zeros(len(keys), dtype=torch.float64)
    uniform_sum = torch.zeros(len(keys), dtype=torch.float64)
    uniform_above = torch.zeros(len(keys), dtype=torch.float64)
    w_sum = {w: torch.zeros(len(keys), dtype=torch.float64) for w in distinct if w is not None}
    w_above = {w: torch.zeros(len(keys), dtype=torch.float64) for w in distinct if w is not None}
    vn_queries = 0.0
    chunks = iter_batches(batch, batch_size)
    hooks = red.hooks()
    with torch.inference_mode():
        for done, (_, sub) in enumerate(chunks, start=1):
            red.start_batch(sub)
            run_to_last_pattern(model, sub.tokens, hooks)
            for ki, key in enumerate(keys):
                valid = sub.lengths > key
                ua = uniform_sink_alpha(sub.lengths[valid], key=key)
                alpha_n[ki] += int(valid.sum())
                uniform_sum[ki] += ua.sum()
                uniform_above[ki] += (ua > eps).sum()
                for w in w_sum:
                    ua_w = uniform_sink_alpha(sub.lengths[valid], key=key, window=w)
                    w_sum[w][ki] += ua_w.sum()
                    w_above[w][ki] += (ua_w > eps).sum()
            vn_queries += float((sub.lengths - 1).clamp_min(0).sum())  # real queries i >= 1
            if progress is not None:
                progress(done, len(chunks))

    def by_layer(full: Tensor, per_window: dict[int, Tensor]) -> Tensor:
        """``[..., layer]``: the full-causal value or the layer's window's."""
        return torch.stack([full if w is None else per_window[w] for w in red.windows], dim=-1)

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
        stats.pos_queries_layer = by_layer(stats.pos_queries, {w: t.cpu() for w, t in red.pos_queries_w.items()}).T.contiguous()
        stats.tok_queries_layer = by_layer(stats.tok_queries, {w: t.cpu() for w, t in red.tok_queries_w.items()}).T.contiguous()
    if value_norm:
        stats.vn_share_sum = red.vn_share_sum.cpu()
        stats.vn_attn_sum = red.vn_attn_sum.cpu()
        stats.vn_queries = vn_queries
        stats.vn_queries_layer = red.vn_queries_layer
        stats.vn_sink_norm_sum = red.vn_sink_norm_sum.cpu()
        stats.vn_other_norm_sum = red.vn_other_norm_sum.cpu()
        stats.vn_other_count = red.vn_other_count
    return stats
