"""One streaming pass that reduces attention patterns to sink statistics inside the hooks.

Nothing per prompt is kept: each hook reduces its batch to running sums of fixed size
(``[layer, head]``, ``[layer, head, position]`` or ``[layer, head, distinct token]``), so
memory does not grow with the number of prompts.  All statistics are in float32 whatever
the model's dtype, and padded positions never count.

Definitions (``A = A[l,h]``, a prompt of ``n`` real tokens, queries ``i``, keys ``j <= i``):

* **Sink alpha** (Gu et al. 2024), :func:`headlens.analyses.attention_stats.sink_alpha`:
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

Sliding windows (each layer's, from :func:`headlens.probes.attention.attention_spec`): in a layer with a
window of ``w`` keys query ``i`` sees only keys ``i - w < j <= i``.  There a uniform head gives
``1/min(i+1, w)`` to each key it sees, and every statistic counts only the queries that can
see the key it is about: alpha(k) and its baseline over ``k <= i < k + w``; excess attention
received by ``j`` is ``A[i,j] - 1/min(i+1, w)`` over ``j <= i < j + w`` (per-layer query counts
``pos_queries_layer``/``tok_queries_layer``); value-norm and attention shares over ``1 <= i < w``
(``vn_queries_layer``).  Full-causal layers are computed exactly as before; the un-suffixed
counts and ``uniform_mean()`` without a layer are those of full-causal attention.

Bidirectional layers (encoders such as BERT, ``[CLS] text [SEP]``): every real query sees every
real key, so a uniform head gives ``1/n`` to each key of a prompt of ``n`` real tokens, and every
statistic averages over *all* real queries: alpha(k) over ``0 <= i < n`` (baseline ``1/n``),
excess attention received ``A[i,j] - 1/n`` over all ``n`` queries, value-norm and attention
shares over ``0 <= i < n`` (query 0 sees every key there).

**Sink targets** (``targets=True``; Clark et al. 2019 report BERT's attention to ``[CLS]``,
``[SEP]`` and punctuation): per head, the attention share ``sum over j in G of A[i, j]`` that a
query gives to a group ``G`` of keys, for three groups: ``first`` (position 0: BOS, ``[CLS]``,
or the first text token), ``suffix`` (the special tokens after the text: ``[SEP]``; decoders
have none: NaN) and ``punctuation`` (text tokens whose string is punctuation, e.g. "." and
",", by :func:`punctuation_ids`; never position 0 or the suffix).  Averaged over the real
queries that can see at least one key of ``G`` (for ``first`` that is exactly alpha(0)), per
sequence, then over the sequences that have such a query.  Uniform baseline: the share a
uniform head gives ``G``, ``#(keys of G it sees) / #(keys it sees)``, averaged the same way.

Every forward passes the batch's attention mask (padding is never attended to).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import inspect
import logging
import unicodedata

import torch
from torch import Tensor

from headlens.analyses.attention_stats import sink_alpha, uniform_sink_alpha
from headlens.probes.attention import attention_spec
from headlens.probes.errors import InputError
from headlens.probes.capture import run_forward
from headlens.probes.hooks import attached
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch, iter_batches

__all__ = [
    "StreamStats",
    "stream_sink_stats",
    "head_output_weights",
    "value_norm_share",
    "excess_received",
    "run_to_last_pattern",
    "layer_causal",
    "batch_attention_mask",
    "punctuation_ids",
    "TARGET_GROUPS",
]

log = logging.getLogger(__name__)

#: The key groups of the sink-target statistic (module docstring), in table order.
TARGET_GROUPS: tuple[str, ...] = ("first", "suffix", "punctuation")


def layer_causal(model: LoadedModel) -> tuple[bool, ...]:
    """Per layer: True for causal attention, False for bidirectional (every query sees every
    real key): a layer the attention spec marks non-causal, or any layer of an encoder."""
    encoder = bool(getattr(model, "is_encoder", False))
    return tuple(bool(getattr(layer, "causal", True)) and not encoder for layer in attention_spec(model).layers)


def batch_attention_mask(batch: TokenBatch) -> Tensor:
    """0/1 ``[prompt, pos]``: 1 on real tokens (``TokenBatch.attention_mask`` where it exists)."""
    mask = getattr(batch, "attention_mask", None)
    if isinstance(mask, Tensor):
        return mask
    return batch.mask.long()


class _Stop(Exception):
    pass


def _stop(act: Tensor, hook: Any = None) -> None:
    raise _Stop


def _forward_takes_mask() -> bool:
    try:
        return "attention_mask" in inspect.signature(run_forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def run_to_last_pattern(model: LoadedModel, tokens: Tensor, hooks: list[tuple[str, Callable[..., Any]]], attention_mask: Tensor | None = None) -> None:
    """One forward pass with ``hooks`` attached that stops right after the last layer's attention pattern.

    The bridge's ``stop_at_layer`` can only stop *before* a block, and ``stop_at_layer=n_layers``
    still runs the whole model and its unembedding (the logits are computed whatever the
    ``return_type``); a statistic of attention patterns needs neither the last layer's
    ``z``/output projection/MLP nor the unembedding, so :func:`headlens.probes.capture.run_forward`
    ends the pass after the last ``hook_pattern`` (its stop hook is attached after ``hooks``,
    so it runs after them).  ``attention_mask`` (0/1 ``[batch, pos]``) keeps padding out of
    every query's attention (an encoder would attend to it otherwise).
    """
    stop = f"blocks.{model.n_layers - 1}.attn.hook_pattern"
    with attached(model.bridge, hooks):
        if attention_mask is None:
            run_forward(model, tokens, stop_after=stop)
        elif _forward_takes_mask():
            run_forward(model, tokens, stop_after=stop, attention_mask=attention_mask)
        else:  # a run_forward without masks: the same stopped pass, with the mask, here
            try:
                with attached(model.bridge, [(stop, _stop)]):
                    model.bridge(tokens.to(model.device), return_type=None, attention_mask=attention_mask.to(model.device, torch.long))
            except _Stop:
                pass


def punctuation_ids(tokenizer: Any, ids: Tensor) -> Tensor:
    """The ids among ``ids`` whose token string is punctuation: decoded alone, stripped of
    spaces (and of WordPiece's ``##``), non-empty and made only of Unicode punctuation (P*);
    special tokens never are.  Returns a sorted LongTensor."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    out = []
    for t in torch.unique(ids).tolist():
        if t in special:
            continue
        text = tokenizer.decode([int(t)]).strip()
        if text.startswith("##"):
            text = text[2:]
        if text and all(unicodedata.category(c).startswith("P") for c in text):
            out.append(int(t))
    return torch.tensor(out, dtype=torch.long)


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
    except (AttributeError, RuntimeError, NotImplementedError) as exc:
        log.debug("layer %d: no usable attn.W_O on the bridge (%s: %s); reading the output projection module", layer, type(exc).__name__, exc)
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
    causal: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per prompt and head: sums over real queries ``i >= 1`` of the sink's norm share and attention share.

    ``pattern`` ``[batch, head, q, k]``, ``value_norm`` ``[batch, head, k]`` = ``||v_j W_O^h||``.
    Returns ``(norm_share_sum, attn_share_sum, n_queries)``, shapes ``[batch, head]``,
    ``[batch, head]``, ``[batch]``; divide to get means (see the module docstring).  With a
    sliding ``window`` only the queries that can see key 0 count (``1 <= i < window``); on a
    bidirectional layer (``causal=False``) every real query counts (``0 <= i < n``).
    """
    width = pattern.shape[2]
    pos = torch.arange(width, device=pattern.device)
    qbool = (pos[None, :] >= (1 if causal else 0)) & (pos[None, :] < lengths[:, None].to(pattern.device))
    if window is not None and causal:
        qbool = qbool & (pos[None, :] < window)
    qmask = qbool.to(pattern.dtype)  # [b, q]
    weighted = torch.einsum("bhqk,bhk->bhq", pattern, value_norm)  # sum_j A[i,j] ||f_j||
    sink = pattern[..., 0] * value_norm[:, :, :1]  # A[i,0] ||f_0||
    # weighted >= sink >= 0; where weighted is 0, sink is 0 too and the share is 0.
    share = sink / weighted.clamp_min(torch.finfo(pattern.dtype).tiny)
    return (share * qmask[:, None]).sum(-1), (pattern[..., 0] * qmask[:, None]).sum(-1), qmask.sum(-1)


def excess_received(pattern: Tensor, lengths: Tensor, *, window: int | None = None, causal: bool = True) -> tuple[Tensor, Tensor]:
    """Per prompt, head and key ``j``: ``sum over real queries i >= j of (A[i,j] - 1/(i+1))`` and the query count.

    Returns ``(excess_sum [batch, head, k], n_queries [batch, k])``; padded keys give 0 and 0.
    With a sliding ``window``: over the real queries that see ``j`` (``j <= i < j + window``),
    of ``A[i,j] - 1/min(i+1, window)``.  Bidirectional (``causal=False``): over all ``n`` real
    queries, of ``A[i,j] - 1/n``.
    """
    b, _, width, _ = pattern.shape
    lengths = lengths.to(pattern.device)
    pos = torch.arange(width, device=pattern.device)
    real = pos[None, :] < lengths[:, None]  # [b, pos]
    if not causal:
        realf = real.to(pattern.dtype)
        received_b = torch.einsum("bhqk,bq->bhk", pattern, realf)
        # a uniform head gives each real key 1/n from each of the n real queries: 1 in all
        excess_b = (received_b - 1.0) * realf[:, None, :]
        return excess_b, realf * lengths[:, None].to(pattern.dtype)
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
    layer, None for full causal attention or a window at least as long as the longest prompt)
    and on whether it is causal (``causal``, one per layer; False: bidirectional):
    ``uniform_layer_sum``/``uniform_layer_above`` ``[key, layer]``, ``pos_queries_layer``
    ``[layer, position]``, ``tok_queries_layer`` ``[layer, token]``, ``vn_queries_layer``
    ``[layer]``.  The un-suffixed ``uniform_sum``, ``pos_queries``, ``tok_queries``,
    ``vn_queries`` are those of full-causal attention (all layers' when the model has neither
    windows nor bidirectional layers).

    Sink targets (``targets=True``): ``target_sum`` ``[group, layer, head]`` (sum over the
    measured sequences of the per-sequence mean share), ``target_uniform_sum`` and
    ``target_n`` ``[group, layer]`` (sequences measured), ``target_keys`` ``[group]`` (keys of
    each group over all sequences), groups in :data:`TARGET_GROUPS` order.
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
    causal: tuple[bool, ...] = ()
    uniform_layer_sum: Tensor | None = None
    uniform_layer_above: Tensor | None = None
    pos_queries_layer: Tensor | None = None
    tok_queries_layer: Tensor | None = None
    vn_queries_layer: Tensor | None = None
    target_sum: Tensor | None = None
    target_uniform_sum: Tensor | None = None
    target_n: Tensor | None = None
    target_keys: Tensor | None = None
    punctuation: Tensor | None = None
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

    @property
    def bidirectional(self) -> bool:
        """True when some layer is bidirectional (an encoder's)."""
        return not all(self.causal)

    def _uniform(self, total: Tensor, per_layer: Tensor, key: int, layer: int | None) -> float:
        """A uniform head's statistic for ``key`` in ``layer``; without a layer, the mean over
        layers (the full-causal total when every layer is full causal)."""
        k = self.keys.index(key)
        if layer is not None:
            value = per_layer[k, layer]
        elif not self.windowed and not self.bidirectional:
            value = total[k]
        else:
            value = per_layer[k].mean()
        return float(value) / self._n(key)

    def uniform_mean(self, key: int = 0, layer: int | None = None) -> float:
        """Alpha of a uniform head in ``layer`` (its window's or bidirectional baseline); without
        a layer, the mean over layers (the full-causal value when every layer is full causal)."""
        return self._uniform(self.uniform_sum, self.uniform_layer_sum, key, layer)

    def uniform_rate(self, key: int = 0, layer: int | None = None) -> float:
        """Fraction of prompts where a uniform head in ``layer`` has alpha > eps (as :meth:`uniform_mean`)."""
        return self._uniform(self.uniform_above, self.uniform_layer_above, key, layer)

    def target_mean(self, group: str) -> Tensor:
        """``[layer, head]``: the attention share of a key group (module docstring); NaN where no
        sequence has a query that sees a key of the group (e.g. ``suffix`` on a decoder)."""
        g = TARGET_GROUPS.index(group)
        n = self.target_n[g][:, None]
        return torch.where(n > 0, self.target_sum[g] / n.clamp_min(1), torch.full_like(self.target_sum[g], float("nan")))

    def target_uniform(self, group: str) -> Tensor:
        """``[layer]``: the same share for a uniform head; NaN where unmeasured."""
        g = TARGET_GROUPS.index(group)
        n = self.target_n[g]
        return torch.where(n > 0, self.target_uniform_sum[g] / n.clamp_min(1), torch.full_like(n, float("nan")))

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

    def attention_notes(self) -> list[str]:
        """One line for the bidirectional layers (none on a causal model)."""
        bi = [layer for layer, c in enumerate(self.causal) if not c]
        if not bi:
            return []
        which = "every layer" if len(bi) == len(self.causal) else "layers " + ", ".join(map(str, bi))
        return [
            f"{which}: bidirectional attention (every query sees every real key); sink alpha of key k is averaged over all"
            " real queries, baseline uniform over all keys (1/n for n real tokens); excess attention A[i,j] - 1/n over all"
            " queries; value-norm shares over all queries"
        ]


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
    token id.  ``value_norm``: sink value-norm and attention shares (module docstring).
    ``targets``: attention shares of the first position, the suffix (``[SEP]``) and punctuation
    (the batch's ``n_prefix``/``n_suffix`` say which positions are framing).  Sliding-window
    and bidirectional layers: see the module docstring.
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
