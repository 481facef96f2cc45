"""Attention sinks as the context grows: alpha, sink rate and first-token share per head at several lengths.

For each length ``n`` in ``LengthsConfig.lengths`` the model reads ``n_sequences`` sequences of
``n`` tokens (BOS, or an encoder's frame, included) cut one after another from one long text:
the given documents concatenated in order (separated by a blank line), by default headlens'
evaluation text.  Per sequence, layer and head (``A = A[l, h]``, queries ``i``):

* ``alpha``: Gu et al.'s ``mean over queries i >= 0 of A[i, 0]``
  (:func:`headlens.analyses.heads.detectors.sink.alpha_sums`; in a sliding-window layer only
  the queries that see key 0, ``i < window``; on a bidirectional layer every real query);
* ``first_share``: the same mean over queries ``i >= 1`` (query 0 of a causal layer sees only
  key 0, so it always gives it 1);
* ``sink``: whether ``alpha > eps``;
* ``value_norm_share``: the sink's share of the head's output norm (Kobayashi et al. 2020),
  ``A[i,0] ||f_0|| / sum_j A[i,j] ||f_j||`` with ``f_j = v_j W_O^h``, averaged over the queries
  :func:`headlens.analyses.sinks.reductions.value_norm_share` counts (``i >= 1``; ``1 <= i < window``
  in a window layer; every query on a bidirectional layer).  ``||f_j||`` comes from ``hook_v``
  (eager) or from the v the attention function receives (streaming).

The table holds, per length, layer and head, the means over sequences (``sink_rate`` = the
share of sequences whose alpha exceeds ``eps``) and the uniform-attention alpha of the layer.
Long lengths are the reason this exists: with ``attention="streaming"`` (or ``auto`` when one
layer's patterns would not fit, :func:`headlens.probes.streaming.choose_attention`) the
statistics are computed from q and k in blocks of ``query_block`` queries inside the model's
SDPA forward; ``eager`` reads ``hook_pattern``.  Both reduce with the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from headlens.analyses.attention_stats import uniform_sink_alpha
from headlens.analyses.heads.detectors.sink import alpha_sums
from headlens.analyses.sinks.forward import layer_causal, run_to_last_pattern
from headlens.analyses.sinks.reductions import head_output_weights
from headlens.probes.attention import LayerAttention, attention_spec
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.streaming import choose_attention, pattern_blocks, streamed_forward

__all__ = ["LengthsConfig", "LengthsResult", "sink_lengths", "LENGTH_COLUMNS"]

log = logging.getLogger(__name__)

LENGTH_COLUMNS = ["length", "layer", "head", "alpha", "sink_rate", "first_share", "value_norm_share", "uniform_alpha", "n_sequences", "attention"]


@dataclass(frozen=True, kw_only=True)
class LengthsConfig:
    """Settings of the long-context sink study (all go into the manifest)."""

    lengths: tuple[int, ...]
    eps: float = 0.3
    n_sequences: int = 1
    prepend_bos: bool = True
    attention: str = "auto"
    query_block: int = 256


@dataclass
class LengthsResult:
    table: pd.DataFrame
    info: dict[str, Any]


def _frame(model: LoadedModel, prepend_bos: bool) -> tuple[list[int], list[int]]:
    from headlens.analyses.heads.census import model_frame

    return model_frame(model, prepend_bos)


def _text_ids(model: LoadedModel, documents: Sequence[str] | None) -> tuple[list[int], str]:
    from headlens.analyses.stimuli import eval_text

    if documents:
        text, source = "\n\n".join(documents), f"{len(documents)} given documents concatenated in order"
    else:
        text, source = eval_text(), "headlens' evaluation text (its documents concatenated, as shipped)"
    ids = model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    return [int(t) for t in ids], source


def _check(model: LoadedModel, config: LengthsConfig, n_text: int, n_frame: int) -> None:
    if not config.lengths:
        raise InputError("--lengths is empty")
    if config.n_sequences < 1:
        raise InputError(f"--n-long must be at least 1, got {config.n_sequences}")
    if not 0 < config.eps < 1:
        raise InputError(f"--eps must be strictly between 0 and 1, got {config.eps}")
    for n in config.lengths:
        if n <= n_frame + 1:
            raise InputError(f"--lengths {n} leaves no room for text beside {n_frame} special tokens")
        if n > model.n_ctx:
            raise InputError(f"--lengths {n} is beyond the model's context of {model.n_ctx} tokens")
    longest = max(config.lengths)
    need = config.n_sequences * (longest - n_frame)
    if need > n_text:
        raise InputError(f"--lengths {longest} needs {need} text tokens ({config.n_sequences} sequence(s) of {longest - n_frame}); the text has only {n_text}")


def value_norms(v: Tensor, gram: Tensor) -> Tensor:
    """``||v_j W_O^h||`` as ``[batch, head, pos]`` from ``v`` ``[batch, pos, kv_head, d_head]``
    (``hook_v``'s layout; KV heads repeated per query head) and ``gram`` = ``W_O^h W_O^h^T``."""
    v = v.detach().float()
    if v.shape[2] != gram.shape[0]:
        v = v.repeat_interleave(gram.shape[0] // v.shape[2], dim=2)
    vg = torch.einsum("bphd,hdf->bphf", v, gram)
    return (vg * v).sum(-1).clamp_min(0).sqrt().permute(0, 2, 1)


def _vn_sums(rows: Tensor, vnorm: Tensor, n: int, q0: int, window: int | None, causal: bool) -> dict[str, Tensor]:
    """Block sums of :func:`headlens.analyses.sinks.reductions.value_norm_share`'s norm share."""
    pos = torch.arange(q0, q0 + rows.shape[2], device=rows.device)
    qbool = (pos >= (1 if causal else 0)) & (pos < n)
    if window is not None and causal:
        qbool = qbool & (pos < window)
    qmask = qbool.to(rows.dtype)[None, None, :]
    weighted = torch.einsum("bhqk,bhk->bhq", rows, vnorm)
    share = rows[..., 0] * vnorm[:, :, :1] / weighted.clamp_min(torch.finfo(rows.dtype).tiny)
    return {"score": (share * qmask).sum(-1), "count": qmask.sum(-1).expand(rows.shape[0], -1)[:, 0]}


def _reduce(rows: Tensor, q0: int, n: int, la: LayerAttention, causal: bool, acc: dict[str, Tensor], vnorm: Tensor) -> None:
    lengths = torch.tensor([n] * rows.shape[0], device=rows.device)
    window = la.window if la.window is not None and la.window < n else None
    a = alpha_sums(rows, lengths, q0, window=window, causal=causal)
    f = alpha_sums(rows, lengths, q0, window=window, causal=causal, start=1)
    vn = _vn_sums(rows, vnorm, n, q0, window, causal)
    for key, part in (("alpha", a), ("first", f), ("vn", vn)):
        for sub, value in part.items():
            name = f"{key}_{sub}"
            acc[name] = acc[name] + value.double() if name in acc else value.double()


def sink_lengths(
    model: LoadedModel,
    config: LengthsConfig,
    *,
    documents: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LengthsResult:
    """The long-context sink table (:data:`LENGTH_COLUMNS`) and what was run (``info``)."""
    prefix, suffix = _frame(model, config.prepend_bos)
    ids, source = _text_ids(model, documents)
    _check(model, config, len(ids), len(prefix) + len(suffix))
    spec = attention_spec(model)
    causal = layer_causal(model)
    grams = []
    for layer in range(model.n_layers):
        w_o = head_output_weights(model, layer).to(model.device, torch.float32)
        grams.append(torch.einsum("hde,hfe->hdf", w_o, w_o))
    rows_out: list[dict[str, Any]] = []
    modes: dict[int, str] = {}
    total = len(config.lengths) * config.n_sequences
    done = 0
    for n in config.lengths:
        mode = choose_attention(config.attention, batch=1, n_heads=model.n_heads, n=n)
        modes[n] = mode
        body = n - len(prefix) - len(suffix)
        per_layer: list[list[dict[str, Tensor]]] = [[] for _ in spec.layers]
        for s in range(config.n_sequences):
            tokens = torch.tensor([prefix + ids[s * body : (s + 1) * body] + suffix])
            mask = torch.ones_like(tokens)
            accs: list[dict[str, Tensor]] = [{} for _ in spec.layers]

            vnorms: dict[int, Tensor] = {}

            def on_layer(la: LayerAttention, q: Tensor, k: Tensor, v: Tensor, accs: list = accs) -> None:
                vnorm = value_norms(v.transpose(1, 2), grams[la.layer])
                for q0, block in pattern_blocks(la, q, k, mask.bool().to(q.device), config.query_block):
                    _reduce(block, q0, n, la, causal[la.layer], accs[la.layer], vnorm)

            def v_hook(v: Tensor, hook: Any = None, layer: int = 0) -> None:
                vnorms[layer] = value_norms(v, grams[layer])

            def p_hook(p: Tensor, hook: Any = None, la: LayerAttention = spec.layers[0], accs: list = accs) -> None:
                _reduce(p.float(), 0, n, la, causal[la.layer], accs[la.layer], vnorms.pop(la.layer))

            if mode == "streaming":
                streamed_forward(model, tokens, mask, on_layer, block=config.query_block)
            else:
                hooks: list[tuple[str, Callable[..., Any]]] = []
                for la in spec.layers:
                    hooks.append((f"blocks.{la.layer}.attn.hook_v", lambda v, hook=None, layer=la.layer: v_hook(v, hook, layer)))
                    hooks.append((f"blocks.{la.layer}.attn.hook_pattern", lambda p, hook=None, la=la: p_hook(p, hook, la)))
                with torch.inference_mode():
                    run_to_last_pattern(model, tokens, hooks, attention_mask=mask)
            for layer, acc in enumerate(accs):
                per_layer[layer].append(acc)
            done += 1
            if progress is not None:
                progress(done, total)
        for la in spec.layers:
            window = la.window if la.window is not None and la.window < n else None
            uniform = float(uniform_sink_alpha(torch.tensor([n]), key=0, window=window, causal=causal[la.layer])[0])
            alpha = torch.stack([(a["alpha_score"] / a["alpha_count"].clamp(min=1)[:, None])[0] for a in per_layer[la.layer]])  # [seq, head]
            first = torch.stack([(a["first_score"] / a["first_count"].clamp(min=1)[:, None])[0] for a in per_layer[la.layer]])
            vn = torch.stack([(a["vn_score"] / a["vn_count"].clamp(min=1)[:, None])[0] for a in per_layer[la.layer]])
            for head in range(model.n_heads):
                rows_out.append({
                    "length": n, "layer": la.layer, "head": head,
                    "alpha": float(alpha[:, head].mean()), "sink_rate": float((alpha[:, head] > config.eps).double().mean()),
                    "first_share": float(first[:, head].mean()), "value_norm_share": float(vn[:, head].mean()), "uniform_alpha": uniform,
                    "n_sequences": config.n_sequences, "attention": mode,
                })  # fmt: skip
    table = pd.DataFrame(rows_out, columns=LENGTH_COLUMNS)
    info = {"text": source, "text_tokens": len(ids), "lengths": list(config.lengths), "attention": {str(k): v for k, v in modes.items()},
            "query_block": config.query_block, "framing": {"prefix_ids": prefix, "suffix_ids": suffix}}  # fmt: skip
    return LengthsResult(table=table, info=info)
