"""Hook edits of ``hook_q``/``hook_k``/``hook_v``: pooled KV heads (GQA what-if) and projection knockouts.

Both work on the bridge's pre-rotary ``hook_q``/``hook_k``/``hook_v`` (``[batch, pos, head, d_head]``,
``hook_k``/``hook_v`` with the layer's KV heads), so the family's own rotary embedding, scale,
mask, window and softcap apply afterwards.

* **Pooling** (:func:`pool_hooks`): each group of KV heads is replaced by its mean on
  ``hook_k`` and ``hook_v``.  Projections are affine, so the mean of the outputs is the output
  of the mean-pooled weights and bias (Ainslie et al. 2023's uptraining initialisation), and
  RoPE is linear, so rotating the mean equals the mean of the rotated keys.
* **Knockouts** (:func:`knockout_hooks`): ``q=k`` (queries from the key projection: scores
  become symmetric), ``v=k`` (values from the key projection) and ``q=k=v``.  ``hook_q`` fires
  before ``hook_k``, so the query tensor handed to the attention is overwritten in place when
  ``hook_k`` fires.  Whether that reaches the attention depends on how the family's bridge
  uses the tensor: :func:`check_knockout` compares it, once per model and kind, with an exact
  two-pass reference (capture ``k``, then replace ``q`` by it) and refuses the knockout with
  :class:`~headlens.probes.errors.InterventionError` naming the family when they differ or the
  edit does not move the output at all (OPT: the in-place edit does not reach its attention).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.design.config import KINDS
from headlens.probes.attention import attention_spec, repeat_kv
from headlens.probes.errors import InputError, InterventionError
from headlens.probes.hooks import attached

__all__ = ["KINDS", "Groups", "kv_group", "pool_hooks", "knockout_hooks", "check_knockout", "check_pooling"]

log = logging.getLogger(__name__)

#: Per layer, a partition of the layer's KV heads into groups that share one pooled KV head.
Groups = dict[int, tuple[tuple[int, ...], ...]]

_PROBE_KEY = "design_edit_probe"


def kv_group(model: Any) -> int:
    """Query heads per KV head (1 on multi-head models)."""
    return attention_spec(model).layers[0].group


def _pool(x: Float[Tensor, "batch pos kv_head d_head"], groups: Sequence[Sequence[int]]) -> Float[Tensor, "batch pos kv_head d_head"]:
    out = x.clone()
    for grp in groups:
        idx = torch.tensor(list(grp), device=x.device)
        out[:, :, idx] = x[:, :, idx].double().mean(dim=2, keepdim=True).to(x.dtype)  # float64 sum: the mean rounds once
    return out


def pool_hooks(groups: Groups) -> list[tuple[str, Callable[..., Any]]]:
    """Hooks that replace every KV head of each group by the group's mean, on ``hook_k`` and ``hook_v``."""
    hooks: list[tuple[str, Callable[..., Any]]] = []
    for layer, grps in groups.items():
        if all(len(g) == 1 for g in grps):
            continue

        def fn(x: Tensor, hook: Any = None, grps: tuple = grps) -> Tensor:
            return _pool(x, grps)

        hooks += [(f"blocks.{layer}.attn.hook_k", fn), (f"blocks.{layer}.attn.hook_v", fn)]
    return hooks


def knockout_hooks(model: Any, layer: int, kind: str, heads: Sequence[int] | None = None) -> list[tuple[str, Callable[..., Any]]]:
    """Hooks that tie projections of ``layer`` (``kind`` in :data:`KINDS`), in ``heads`` (query heads; all when None).

    ``q=k``: each query head's query becomes its KV head's key (before rotation).  ``v=k``: the
    value of each KV head read by ``heads`` becomes its key (on grouped-query models the whole
    group shares that value).  Not guarded: use :func:`check_knockout` first.
    """
    if kind not in KINDS:
        raise InputError(f"unknown knockout {kind!r}: choose from {', '.join(KINDS)}", kind=kind)
    spec = attention_spec(model).layers[layer]
    qh = list(range(spec.n_heads)) if heads is None else sorted(set(heads))
    kvh = sorted({spec.kv_head(h) for h in qh})
    state: dict[str, Tensor] = {}
    hooks: list[tuple[str, Callable[..., Any]]] = []
    if "q" in kind:

        def hold_q(q: Tensor, hook: Any = None) -> Tensor:
            state["q"] = q
            return q

        hooks.append((f"blocks.{layer}.attn.hook_q", hold_q))

    def on_k(k: Tensor, hook: Any = None) -> Tensor:
        state["k"] = k
        if "q" in kind:
            q = state.pop("q")
            src = repeat_kv(k, spec.group)
            idx = torch.tensor(qh, device=q.device)
            q[:, :, idx] = src[:, :, idx].to(q.dtype)
        return k

    hooks.append((f"blocks.{layer}.attn.hook_k", on_k))
    if kind in ("v=k", "q=k=v"):

        def on_v(v: Tensor, hook: Any = None) -> Tensor:
            k = state.pop("k")
            out = v.clone()
            idx = torch.tensor(kvh, device=v.device)
            out[:, :, idx] = k[:, :, idx].to(v.dtype)
            return out

        hooks.append((f"blocks.{layer}.attn.hook_v", on_v))
    return hooks


def _probe_tokens(model: Any) -> Tensor:
    gen = torch.Generator().manual_seed(0)
    vocab = int(model.bridge.cfg.d_vocab)
    return torch.randint(0, min(vocab, 1000), (2, 12), generator=gen).to(model.device)


def _two_pass(model: Any, toks: Tensor, layer: int, kind: str) -> Tensor:
    """The exact reference of a one-layer knockout: capture that layer's ``k``, then replace ``q``/``v`` by it."""
    spec = attention_spec(model).layers[layer]
    cap: dict[str, Tensor] = {}

    def grab(k: Tensor, hook: Any = None) -> None:
        cap["k"] = k.clone()

    with attached(model.bridge, [(f"blocks.{layer}.attn.hook_k", grab)]):
        model.bridge(toks, return_type=None)
    k = cap["k"]
    hooks = []
    if "q" in kind:
        hooks.append((f"blocks.{layer}.attn.hook_q", lambda q, hook=None: repeat_kv(k, spec.group).to(q.dtype)))
    if "v" in kind:
        hooks.append((f"blocks.{layer}.attn.hook_v", lambda v, hook=None: k.to(v.dtype)))
    with attached(model.bridge, hooks):
        return model.bridge(toks, return_type="logits")


def check_knockout(model: Any, kind: str) -> None:
    """Refuse ``kind`` on this model unless the one-pass hooks equal the two-pass reference in every layer
    and move the output (verdict cached in ``model.extra``)."""
    verdicts = model.extra.setdefault(_PROBE_KEY, {})
    if kind not in verdicts:
        verdicts[kind] = _knockout_verdict(model, kind)
    if verdicts[kind] is not None:
        raise InterventionError(verdicts[kind], family=attention_spec(model).family, kind=kind)


def _knockout_verdict(model: Any, kind: str) -> str | None:
    family = attention_spec(model).family
    toks = _probe_tokens(model)
    with torch.inference_mode():
        base = model.bridge(toks, return_type="logits")
        for layer in range(model.n_layers):
            ref = _two_pass(model, toks, layer, kind)
            with attached(model.bridge, knockout_hooks(model, layer, kind)):
                got = model.bridge(toks, return_type="logits")
            scale = float(base.abs().max()) or 1.0
            if float((ref - base).abs().max()) <= 1e-6 * scale:
                return (
                    f"projection knockout {kind}: edits of hook_q/hook_k/hook_v do not reach the attention of {family}"
                    f" (layer {layer}: the output did not move)"
                )
            if float((got - ref).abs().max()) > 1e-4 * scale:
                log.info("%s: one-pass %s knockout differs from the two-pass reference in layer %d", family, kind, layer)
                return (
                    f"projection knockout {kind}: on {family} the query tensor cannot be replaced after the key projection runs"
                    f" (layer {layer}: the hooked forward differs from the two-pass reference); this family's hooks cannot carry it"
                )
    return None


def check_pooling(model: Any) -> None:
    """Refuse KV pooling when replacing ``hook_k``/``hook_v`` does not move the output (cached in ``model.extra``)."""
    verdicts = model.extra.setdefault(_PROBE_KEY, {})
    if "pool" not in verdicts:
        family = attention_spec(model).family
        toks = _probe_tokens(model)
        verdicts["pool"] = None
        with torch.inference_mode():
            base = model.bridge(toks, return_type="logits")
            for layer in range(model.n_layers):
                for name in ("hook_k", "hook_v"):
                    with attached(model.bridge, [(f"blocks.{layer}.attn.{name}", lambda x, hook=None: x.flip(2) * 0.5 + 1.0)]):
                        moved = float((model.bridge(toks, return_type="logits") - base).abs().max())
                    if moved <= 1e-6 * (float(base.abs().max()) or 1.0):
                        verdicts["pool"] = (
                            f"GQA what-if: edits of {name} do not reach the attention of {family} (layer {layer}: the output did not move)"
                        )
                        break
                if verdicts["pool"]:
                    break
    if verdicts["pool"] is not None:
        raise InterventionError(verdicts["pool"], family=attention_spec(model).family)
