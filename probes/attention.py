"""How each layer of a loaded model computes attention, and that computation redone from q and k.

:func:`attention_spec` reads, from the Hugging Face attention modules and config the bridge
wraps and from the bridge's own components, what turns ``q`` and ``k`` into a pattern in
each layer (:class:`LayerAttention`): the number of KV heads (grouped- and multi-query
attention), the score scale (``1/sqrt(d_head)``, Gemma's ``query_pre_attn_scalar``,
Granite's ``attention_multiplier``, none for GPT-Neo), ALiBi slopes (Bloom, MPT), a sliding
window, a logit softcap, the rotary embedding (where q and k after it are read, its base and
width per layer), a QK-norm, and whether the bridge computes attention itself (so edits of
``hook_attn_scores``/``hook_pattern`` take effect) or hands it to Hugging Face and fires
those hooks afterwards.  The readers and the per-family data the model cannot tell live in
:mod:`headlens.probes.attention_rules` (one entry per family).

:func:`rotate` turns the bridge's pre-rotary ``hook_q``/``hook_k`` into what enters the dot
product where the bridge does not hook the rotated ones (GPT-NeoX, Phi-3, Falcon rotate-half
with the bridge's ``hook_cos``/``hook_sin``; GPT-J rotate-every-two), and
:func:`scores_from_qk` / :func:`pattern_from_qk` redo the attention equation with the
layer's own scale, ALiBi bias, mask, window and softcap.  ``verify`` compares that with the
captured pattern; the streaming statistics use the same code.

Bidirectional encoders (BERT, RoBERTa: ``causal=False``) have no causal mask; what keeps a
query off padding there is the batch's attention mask, which :func:`allowed_keys` and
:func:`scores_from_qk` take as ``key_mask``.

Only families whose attention has been checked against Hugging Face are reconstructed;
any other raises :class:`~headlens.probes.errors.UnsupportedModelError` naming the family
and why (:attr:`AttentionSpec.refusal`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from headlens.probes.architectures import refusal_reason
from headlens.probes.attention_rules import (
    FAMILY_RULES,
    LENGTH_DEPENDENT_ROPE,
    alibi_slopes,
    family_rules,
    qk_norm,
    read_rotary,
    read_scale,
    read_window,
    rope,
)
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.loading import is_encoder_config

__all__ = [
    "LayerAttention",
    "AttentionSpec",
    "attention_spec",
    "attention_core",
    "RECONSTRUCTED_FAMILIES",
    "rotate",
    "allowed_keys",
    "scores_from_qk",
    "pattern_from_qk",
    "position_bias",
    "repeat_kv",
    "visible",
]

log = logging.getLogger(__name__)

#: Families (Hugging Face ``model_type``) whose attention :func:`scores_from_qk` redoes exactly
#: (one entry each in :data:`headlens.probes.attention_rules.FAMILY_RULES`).
RECONSTRUCTED_FAMILIES: frozenset[str] = frozenset(FAMILY_RULES)


@dataclass(frozen=True, kw_only=True)
class LayerAttention:
    """What one layer does between q, k and the pattern.

    ``scale`` multiplies ``q . k``; ``window`` (keys) limits query ``i`` to keys
    ``j > i - window``; ``softcap`` replaces scores ``s`` by ``softcap * tanh(s / softcap)``;
    ``rotary`` is ``none``, ``hooks`` (the bridge fires ``hook_rot_q``/``hook_rot_k``),
    ``neox`` (rotate-half on the first ``rotary_dim`` dims, cos/sin from ``hook_cos``/
    ``hook_sin``: GPT-NeoX, Phi-3, Falcon) or ``gptj`` (rotate-every-two on the first ``rotary_dim`` dims);
    ``native`` is True when the bridge computes the attention itself, so that edits of
    ``hook_attn_scores`` and ``hook_pattern`` change the output; ``causal`` is False in
    bidirectional encoders (BERT), where every query sees every real key.

    ``alibi`` (Bloom, MPT): per-head slopes; the score of key ``j`` for query ``i`` gains
    ``slope * (j - i)`` after the scale.  Recorded, not redone (``hooks`` gives q and k after
    them): ``rope_theta``, the layer's rotary base, and ``rope_type`` (``default``, ``longrope``...),
    both None where it does not rotate (no rotary embedding, SmolLM3's no-rope layers);
    ``qk_norm``, where a QK-norm sits before the rotary embedding (``head``: per head, Qwen 3,
    Gemma 3, StableLM, Cohere; ``projection``: the whole projection before the head split, OLMo 2,
    OLMoE).  The bridge's ``hook_q``/``hook_k`` are taken before the QK-norm, its
    ``hook_rot_q``/``hook_rot_k`` after the norm and the rotation.
    """

    layer: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    scale: float
    window: int | None
    softcap: float | None
    rotary: str
    rotary_dim: int | None
    native: bool
    causal: bool = True
    alibi: tuple[float, ...] | None = None
    rope_theta: float | None = None
    rope_type: str | None = None
    qk_norm: str | None = None

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    def kv_head(self, head: int) -> int:
        """The KV head that query head ``head`` reads (Hugging Face's ``repeat_kv`` order)."""
        return head // self.group


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """Per-layer attention facts of a loaded model (see :class:`LayerAttention`)."""

    family: str
    architecture: str
    layers: tuple[LayerAttention, ...]
    reconstructable: bool
    refusal: str | None = None

    @property
    def n_kv_heads(self) -> int:
        return self.layers[0].n_kv_heads

    @property
    def native(self) -> bool:
        """True when every layer's scores and pattern hooks sit inside the computation."""
        return all(layer.native for layer in self.layers)

    def kv_map(self) -> dict[int, int]:
        """Query head -> KV head (the same in every layer)."""
        first = self.layers[0]
        return {h: first.kv_head(h) for h in range(first.n_heads)}

    def require_reconstruction(self, what: str) -> None:
        """Raise a one-line error when this family's attention cannot be redone from q and k."""
        if not self.reconstructable:
            why = f" ({self.refusal})" if self.refusal else ""
            raise UnsupportedModelError(
                f"{what}: headlens cannot redo the attention of {self.family} ({self.architecture}) from q and k{why};"
                f" supported families: {', '.join(sorted(RECONSTRUCTED_FAMILIES))}",
                family=self.family,
            )

    def describe(self) -> dict[str, Any]:
        """Manifest entry: the facts per layer plus the query -> KV head map."""
        return {
            "family": self.family,
            "architecture": self.architecture,
            "n_kv_heads": self.n_kv_heads,
            "kv_map": {str(h): kv for h, kv in self.kv_map().items()},
            "reconstructable": self.reconstructable,
            "layers": [asdict(layer) for layer in self.layers],
        }


def attention_core(module: Any) -> Any:
    """The Hugging Face module that computes attention inside the one the bridge wraps.

    BERT-style layers wrap ``BertAttention``, whose ``self`` (``BertSelfAttention``) holds
    the scale and calls the attention function; elsewhere it is the wrapped module itself.
    """
    inner = getattr(module, "self", None)
    return inner if isinstance(inner, torch.nn.Module) else module


def _hf_attention(bridge: Any, layer: int) -> Any:
    return attention_core(bridge.blocks[layer].attn.original_component)


def _causal(hf_config: Any, module: Any) -> bool:
    if is_encoder_config(hf_config):
        return False
    return bool(getattr(module, "is_causal", True))


def _is_native(bridge: Any, layer: int) -> bool:
    """True when the bridge's attention component computes the pattern itself."""
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    comp = bridge.blocks[layer].attn
    if getattr(comp.original_component, "accepts_pattern_fn", False):
        return True
    return type(comp).forward is not AttentionBridge.forward


def _layer(bridge: Any, layer: int, family: str, n_heads: int, n_kv: int) -> LayerAttention:
    """One layer's facts, read from the bridge, its Hugging Face module and config, and the family's rules."""
    hf_config = bridge.original_model.config
    rules = family_rules(family) or FAMILY_RULES["llama"]  # unknown families: read, then refused
    module = _hf_attention(bridge, layer)
    d_head = int(getattr(module, "head_dim", None) or bridge.cfg.d_head)
    cap = getattr(module, "attn_logit_softcapping", None) or getattr(hf_config, "attn_logit_softcapping", None)
    rotary, rotary_dim = read_rotary(rules, bridge, layer, module, d_head)
    theta, rope_type = rope(hf_config, module, layer, rotary)
    return LayerAttention(
        layer=layer,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        d_head=d_head,
        scale=read_scale(rules, module, d_head),
        window=read_window(family, hf_config, module, layer),
        softcap=float(cap) if cap else None,
        rotary=rotary,
        rotary_dim=rotary_dim,
        native=_is_native(bridge, layer),
        causal=_causal(hf_config, module),
        alibi=alibi_slopes(rules, bridge.original_model, n_heads),
        rope_theta=theta,
        rope_type=rope_type,
        qk_norm=qk_norm(module, d_head),
    )


def _refusal(family: str, hf_config: Any, layers: list[LayerAttention]) -> str | None:
    """Why this model's attention is not redone (None: it is)."""
    rules = family_rules(family)
    if rules is None:
        return refusal_reason(family) or "its attention has not been checked against Hugging Face"
    if rules.refuse is not None and (reason := rules.refuse(hf_config)):
        return reason
    unknown = [la.layer for la in layers if la.rotary == "unknown"]
    return f"the rotary embedding of layers {unknown} is neither hooked by the bridge nor known to headlens" if unknown else None


def attention_spec(model: Any) -> AttentionSpec:
    """The :class:`AttentionSpec` of a :class:`~headlens.probes.loading.LoadedModel` (computed once, then cached)."""
    cached = model.extra.get("attention_spec")
    if cached is not None:
        return cached
    bridge = model.bridge
    hf_config = bridge.original_model.config
    family = str(getattr(hf_config, "model_type", "unknown"))
    n_heads = int(bridge.cfg.n_heads)
    n_kv = int(getattr(bridge.cfg, "n_key_value_heads", None) or n_heads)
    layers = [_layer(bridge, layer, family, n_heads, n_kv) for layer in range(int(bridge.cfg.n_layers))]
    refusal = _refusal(family, hf_config, layers)
    arch = type(bridge.original_model).__name__
    spec = AttentionSpec(family=family, architecture=arch, layers=tuple(layers), reconstructable=refusal is None, refusal=refusal)
    if refusal is not None:
        log.info("%s: attention is not redone from q and k (%s); verify refuses it", family, refusal)
    if any(la.rope_type in LENGTH_DEPENDENT_ROPE for la in layers):
        log.warning(
            "%s: its %s rotary depends on the forward's length: past original_max_position_embeddings (%s), a batch's padded"
            " width changes every prompt's rotation in it (as in Hugging Face); batch such long prompts apart",
            family,
            next(la.rope_type for la in layers if la.rope_type in LENGTH_DEPENDENT_ROPE),
            getattr(hf_config, "original_max_position_embeddings", None) or "the trained context",
        )
    model.extra["attention_spec"] = spec
    return spec


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_every_two(x: Tensor) -> Tensor:
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def _gptj_sin_cos(n: int, dim: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """GPT-J's sinusoids for positions ``0..n-1``: ``[pos, dim]`` each, every frequency repeated twice."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() / dim))
    angles = torch.arange(n, device=device).float()[:, None] * inv_freq
    return angles.sin().repeat_interleave(2, dim=-1), angles.cos().repeat_interleave(2, dim=-1)


def rotate(
    layer: LayerAttention,
    x: Float[Tensor, "batch pos head d_head"],
    *,
    cos: Float[Tensor, "batch pos rot"] | None = None,
    sin: Float[Tensor, "batch pos rot"] | None = None,
) -> Float[Tensor, "batch pos head d_head"]:
    """Apply the layer's rotary embedding to pre-rotary ``hook_q``/``hook_k`` output (positions 0, 1, ...).

    ``neox`` needs the bridge's ``hook_cos``/``hook_sin``; ``gptj`` computes its own
    sinusoids; ``none`` returns ``x``; ``hooks`` is refused (read ``hook_rot_q``/``hook_rot_k``).
    """
    if layer.rotary == "none":
        return x
    if layer.rotary == "neox":
        if cos is None or sin is None:
            raise ValueError("GPT-NeoX rotation needs hook_cos and hook_sin")
        r = layer.rotary_dim or x.shape[-1]
        if cos.shape[-1] != r:
            raise ValueError(f"layer {layer.layer} rotates {r} dims, but hook_cos has {cos.shape[-1]}")
        c, s = cos[:, :, None, :].to(x.dtype), sin[:, :, None, :].to(x.dtype)
        head = x[..., :r]
        return torch.cat((head * c + _rotate_half(head) * s, x[..., r:]), dim=-1)
    if layer.rotary == "gptj":
        r = layer.rotary_dim or x.shape[-1]
        s, c = _gptj_sin_cos(x.shape[1], r, x.device)
        s, c = s[None, :, None, :].to(x.dtype), c[None, :, None, :].to(x.dtype)
        head = x[..., :r]
        return torch.cat((head * c + _rotate_every_two(head) * s, x[..., r:]), dim=-1)
    raise ValueError(f"rotary kind {layer.rotary!r}: read the bridge's hook_rot_q/hook_rot_k instead")


def repeat_kv(x: Float[Tensor, "... pos kv_head d_head"], group: int, *, dim: int = -2) -> Float[Tensor, "... pos head d_head"]:
    """KV heads repeated to one per query head, in Hugging Face's ``repeat_kv`` order (KV head
    ``h // group`` serves query head ``h``).  ``dim`` is the head dimension: ``-2`` in the
    bridge's ``[..., pos, kv_head, d_head]`` layout (default), ``1`` in ``[batch, kv_head, pos, d_head]``.
    The one place headlens repeats KV heads."""
    return x if group == 1 else x.repeat_interleave(group, dim=dim)


def visible(q_idx: Tensor, k_idx: Tensor, *, window: int | None = None, causal: bool = True) -> Bool[Tensor, ...]:
    """Whether query position ``q_idx`` sees key position ``k_idx`` (broadcast): causal ``k <= q``
    (all True on a bidirectional layer, ``causal=False``) and, with a sliding ``window``, ``k > q - window``.

    The one visibility rule: :func:`allowed_keys`, the detectors, the sink statistics and the
    windowed-attention intervention all call it.  Padding is not its business (``key_mask``).
    """
    shape = torch.broadcast_shapes(q_idx.shape, k_idx.shape)
    ok = k_idx <= q_idx if causal else torch.ones(shape, dtype=torch.bool, device=q_idx.device)
    if window is not None:
        ok = ok & (k_idx > q_idx - window)
    return ok.expand(shape)


def allowed_keys(
    layer: LayerAttention,
    n_q: int,
    n_k: int | None = None,
    *,
    q_offset: int = 0,
    device: torch.device | str = "cpu",
    key_mask: Bool[Tensor, "*batch k"] | None = None,
) -> Bool[Tensor, "*batch q k"]:
    """Which keys each query may see: causal (``j <= i``, not in bidirectional layers), inside
    the window (``j > i - window``) and, with ``key_mask``, real (not padding).

    Queries are positions ``q_offset .. q_offset + n_q - 1`` against keys ``0 .. n_k - 1``.
    ``key_mask`` (True on real keys) is ``[k]`` for one prompt (result ``[q, k]``) or
    ``[batch, k]`` (result ``[batch, q, k]``), e.g. :attr:`headlens.probes.prompts.TokenBatch.mask`.
    """
    n_k = n_q + q_offset if n_k is None else n_k
    i = torch.arange(q_offset, q_offset + n_q, device=device)[:, None]
    j = torch.arange(n_k, device=device)[None, :]
    ok = visible(i, j, window=layer.window, causal=layer.causal)
    if key_mask is not None:
        km = key_mask.to(device=ok.device, dtype=torch.bool)
        if km.shape[-1] != n_k:
            raise ValueError(f"key_mask has {km.shape[-1]} keys, expected {n_k}")
        ok = ok & km[..., None, :]
    return ok


def position_bias(
    layer: LayerAttention, n_q: int, n_k: int, *, q_offset: int = 0, device: torch.device | str = "cpu"
) -> Float[Tensor, "head q k"]:
    """ALiBi's bias ``slope[h] * (j - i)`` of queries ``q_offset ..`` against keys ``0 .. n_k - 1`` (float32).

    Bloom adds ``slope * j`` and MPT ``slope * (j - n + 1)``: per query row they differ from this by
    a constant, which the softmax removes."""
    if layer.alibi is None:
        raise ValueError(f"layer {layer.layer} has no ALiBi slopes")
    i = torch.arange(q_offset, q_offset + n_q, device=device, dtype=torch.float32)[:, None]
    j = torch.arange(n_k, device=device, dtype=torch.float32)[None, :]
    slopes = torch.tensor(layer.alibi, device=device, dtype=torch.float32)[:, None, None]
    return slopes * (j - i)[None]


def scores_from_qk(
    layer: LayerAttention,
    q: Float[Tensor, "q head d_head"],
    k: Float[Tensor, "k kv_head d_head"],
    *,
    q_offset: int = 0,
    key_mask: Bool[Tensor, " k"] | None = None,
) -> Float[Tensor, "head q k"]:
    """Masked pre-softmax scores of one prompt in float32 (``-inf`` where a key is not allowed).

    ``q`` and ``k`` are what enters the dot product (rotated where the family rotates);
    ``k`` has the layer's KV heads and is repeated per query head here.  ``key_mask``
    (``[k]``, True on real keys) masks padding out, as the attention mask of a batched
    forward does: needed wherever keys past a query's prompt could be seen (bidirectional
    layers, or queries of a padded prompt against the whole padded width).
    """
    k_full = repeat_kv(k.float(), q.shape[1] // k.shape[1])
    scores = torch.einsum("qhd,khd->hqk", q.float(), k_full) * layer.scale
    if layer.softcap is not None:
        scores = layer.softcap * torch.tanh(scores / layer.softcap)
    if layer.alibi is not None:
        scores = scores + position_bias(layer, q.shape[0], k.shape[0], q_offset=q_offset, device=q.device)
    ok = allowed_keys(layer, q.shape[0], k.shape[0], q_offset=q_offset, device=q.device, key_mask=key_mask)
    return scores.masked_fill(~ok[None], float("-inf"))


def pattern_from_qk(
    layer: LayerAttention,
    q: Float[Tensor, "q head d_head"],
    k: Float[Tensor, "k kv_head d_head"],
    **kwargs: Any,
) -> Float[Tensor, "head q k"]:
    """``softmax`` of :func:`scores_from_qk` over keys (float32)."""
    return scores_from_qk(layer, q, k, **kwargs).softmax(dim=-1)
