"""Per-family facts of the attention equation that the config and the modules cannot tell, and the readers of the rest.

:data:`FAMILY_RULES` is the one table of per-family data (Hugging Face ``model_type`` ->
:class:`FamilyRules`): a family whose attention headlens redoes is one entry there, empty
when everything is read from the model.  The readers below fill one layer's facts from the
Hugging Face config and attention module and from the bridge's component:

* KV heads (grouped- and multi-query attention) from the bridge's config;
* the score scale from the module's ``scaling`` (Granite's ``attention_multiplier``, Gemma's
  ``query_pre_attn_scalar``), Bloom's ``inv_norm_factor``, MPT's ``softmax_scale``;
* the window from the module's ``sliding_window`` or the config's ``layer_types``;
* the rotary embedding: read from the bridge's ``hook_rot_q``/``hook_rot_k`` where its
  component fires them (:class:`PositionEmbeddingsAttentionBridge`: q and k after QK-norm and
  rotary, so neither is redone), else rotated by headlens from ``hook_q``/``hook_k`` with the
  bridge's ``hook_cos``/``hook_sin`` (rotate-half on the first ``rotary_dim`` dims: GPT-NeoX,
  Phi-3, Falcon, whose joint-qkv component declares ``hook_rot_*`` but never fires them);
  the rotary base per layer (Gemma 3's local and global layers) and layers without rotary
  (SmolLM3's ``no_rope_layers``) are recorded, as is where a QK-norm sits (per head: Qwen 3,
  Gemma 3, StableLM, Cohere; over the whole projection: OLMo 2, OLMoE);
* ALiBi slopes (Bloom, MPT) from the family's own Hugging Face builder.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "FamilyRules",
    "FAMILY_RULES",
    "family_rules",
    "read_scale",
    "read_window",
    "read_rotary",
    "rope",
    "LENGTH_DEPENDENT_ROPE",
    "qk_norm",
    "alibi_slopes",
]


def _bloom_slopes(hf_model: Any, n_heads: int) -> tuple[float, ...]:
    """Bloom's slopes: its ``build_alibi_tensor`` at key position 1 (position 0 is 0)."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), n_heads, torch.float32)  # [head, 1, key]
    return tuple(float(s) for s in alibi[:, 0, 1])


def _mpt_slopes(hf_model: Any, n_heads: int) -> tuple[float, ...]:
    """MPT's slopes: its ``build_mpt_alibi_tensor`` (``attn_config.alibi_bias_max``) between keys 0 and 1."""
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    attn_config = hf_model.config.attn_config
    bias_max = attn_config.get("alibi_bias_max", 8) if isinstance(attn_config, dict) else attn_config.alibi_bias_max
    alibi = build_mpt_alibi_tensor(n_heads, 2, alibi_bias_max=bias_max)  # [head, 1, key]
    return tuple(float(s) for s in alibi[:, 0, 1] - alibi[:, 0, 0])


def _mpt_refusal(hf_config: Any) -> str | None:
    attn = hf_config.attn_config
    get = attn.get if isinstance(attn, dict) else lambda name, default=None: getattr(attn, name, default)
    if not get("alibi", True):
        return "MPT without ALiBi (attn_config.alibi=False) has not been checked"
    if get("clip_qkv") or get("qk_ln") or get("prefix_lm") or get("attn_uses_sequence_id"):
        return "MPT with clip_qkv, qk_ln, prefix_lm or sequence ids has not been checked"
    return None


@dataclass(frozen=True, kw_only=True)
class FamilyRules:
    """What one family does that is not read from its config and modules.

    ``rotary``: ``none``, ``neox`` or ``gptj`` where the bridge's hooks do not say (None: read
    :func:`read_rotary`); ``scale``: a fixed score scale (GPT-Neo: 1.0, no scaling);
    ``alibi``: ``(hf_model, n_heads) -> slopes`` of a family with ALiBi position bias;
    ``refuse``: ``hf_config -> reason`` for variants of the family not checked (None: fine);
    ``half``: why the family cannot run in half precision (float16, bfloat16), refused at load.
    """

    rotary: str | None = None
    scale: float | None = None
    alibi: Callable[[Any, int], tuple[float, ...]] | None = None
    refuse: Callable[[Any], str | None] | None = None
    half: str | None = None


_NONE = FamilyRules(rotary="none")

#: OLMo's attention in TransformerLens 4.x: every half-precision forward raises "expected scalar type Float" in its
#: pattern @ v (tests/families/matrix.py REFUSALS; a tiny checkpoint of each, float16 and bfloat16).
_OLMO = FamilyRules(half="TransformerLens' attention for this family multiplies a float32 pattern by half-precision values and fails")

#: Families (Hugging Face ``model_type``) whose attention headlens redoes, each checked against
#: Hugging Face eager attention on every layer of a tiny checkpoint (tests/probes/test_attention_families.py,
#: tests/e2e/test_families.py).
FAMILY_RULES: dict[str, FamilyRules] = {
    "gpt2": _NONE,
    "gpt_neo": FamilyRules(rotary="none", scale=1.0),
    "opt": _NONE,
    "bert": _NONE,
    "roberta": _NONE,
    "gpt_bigcode": _NONE,
    "gpt_neox": FamilyRules(rotary="neox"),
    "gptj": FamilyRules(rotary="gptj"),
    "bloom": FamilyRules(rotary="none", alibi=_bloom_slopes),
    "mpt": FamilyRules(rotary="none", alibi=_mpt_slopes, refuse=_mpt_refusal),
    "falcon": FamilyRules(refuse=lambda c: "Falcon with ALiBi (alibi=True) has not been checked" if getattr(c, "alibi", False) else None),
    "xglm": _NONE,
    **{family: _OLMO for family in ("olmo", "olmo2", "olmo3", "flex_olmo")},
    **{
        family: FamilyRules()
        for family in (
            "llama",
            "qwen2",
            "mistral",
            "mixtral",
            "gemma",
            "gemma2",
            "gemma3_text",
            "qwen3",
            "granite",
            "phi",
            "phi3",
            "stablelm",
            "cohere",
            "smollm3",
            "qwen2_moe",
            "olmoe",
            *("apertus", "arcee", "cohere2", "ernie4_5", "ernie4_5_moe", "exaone4", "glm", "glm4"),
            *("glm4_moe", "granitemoe", "jais2", "minimax_m2", "ministral3", "nemotron", "qwen3_moe"),
            *("seed_oss", "starcoder2", "vaultgemma"),
        )
    },
}


def family_rules(family: str) -> FamilyRules | None:
    """The family's entry of :data:`FAMILY_RULES` (None: headlens does not redo its attention)."""
    return FAMILY_RULES.get(family)


def read_scale(rules: FamilyRules, module: Any, d_head: int) -> float:
    """The factor on ``q . k``: the family's fixed one, else the module's ``scaling`` / ``inv_norm_factor`` /
    ``softmax_scale``, else ``1/sqrt(d_head)``."""
    if rules.scale is not None:
        return rules.scale
    for name in ("scaling", "inv_norm_factor", "softmax_scale"):
        value = getattr(module, name, None)
        if value is not None:
            return float(value)
    return 1.0 / math.sqrt(d_head)


def read_window(family: str, hf_config: Any, module: Any, layer: int) -> int | None:
    """Keys a query sees in a sliding-window layer (None: every earlier key)."""
    if family == "gpt_neo":
        return int(hf_config.window_size) if getattr(module, "attention_type", "global") == "local" else None
    if hasattr(module, "sliding_window"):
        value = module.sliding_window if getattr(module, "is_sliding", True) else None  # EXAONE 4: set on global layers too
        return int(value) if value else None
    layer_types = getattr(hf_config, "layer_types", None)
    sliding = getattr(hf_config, "sliding_window", None)
    if layer_types is not None:
        return int(sliding) if layer_types[layer] == "sliding_attention" and sliding else None
    if sliding and getattr(hf_config, "use_sliding_window", True):  # Mistral, Mixtral, Phi-3: every layer
        return int(sliding)
    return None


def read_rotary(rules: FamilyRules, bridge: Any, layer: int, module: Any, d_head: int) -> tuple[str, int | None]:
    """``(kind, rotary_dim)``: ``hooks`` where the bridge fires ``hook_rot_q``/``hook_rot_k``, ``neox`` where it
    has ``hook_cos``/``hook_sin`` only, else the family's rule (``unknown`` when none applies)."""
    from transformer_lens.model_bridge.generalized_components.position_embeddings_attention import PositionEmbeddingsAttentionBridge

    hf_config = bridge.original_model.config
    fraction = float(getattr(hf_config, "partial_rotary_factor", None) or 1.0)
    if rules.rotary == "none":
        return "none", None
    if rules.rotary == "gptj":
        return "gptj", int(module.rotary_dim or module.head_dim)
    if rules.rotary == "neox":
        return "neox", int(getattr(module, "rotary_ndims", None) or round(d_head * fraction))
    if isinstance(bridge.blocks[layer].attn, PositionEmbeddingsAttentionBridge) and f"blocks.{layer}.attn.hook_rot_q" in bridge.hook_dict:
        return "hooks", int(getattr(module, "rotary_ndims", None) or round(d_head * fraction))
    if f"blocks.{layer}.attn.hook_cos" in bridge.hook_dict:
        return "neox", int(getattr(module, "rotary_ndims", None) or round(d_head * fraction))
    return "unknown", None


#: Rotary types whose angles depend on the length of the forward (Hugging Face's ``dynamic_rope_update``): past
#: ``original_max_position_embeddings``, the padded width of a batch changes the rotation of every prompt in it.
LENGTH_DEPENDENT_ROPE = frozenset({"dynamic", "longrope"})


def rope(hf_config: Any, module: Any, layer: int, rotary: str) -> tuple[float | None, str | None]:
    """``(base, type)`` of ``layer``'s rotary embedding (Gemma 3: per layer type; ``type`` as
    ``rope_parameters`` names it: ``default``, ``longrope``, ``yarn``...); ``(None, None)`` where the
    layer does not rotate (no rotary embedding, or SmolLM3's ``no_rope_layers``)."""
    if rotary in ("none", "unknown") or not getattr(module, "use_rope", True):
        return None, None
    params = getattr(hf_config, "rope_parameters", None) or {}
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is not None and isinstance(params.get(layer_types[layer]), dict):
        params = params[layer_types[layer]]
    theta = params.get("rope_theta") or getattr(hf_config, "rope_theta", None) or getattr(hf_config, "rotary_emb_base", None)
    return (float(theta) if theta else 10000.0), str(params.get("rope_type") or "default")  # 10000: GPT-J's fixed base


def qk_norm(module: Any, d_head: int) -> str | None:
    """Where a QK-norm sits before the rotary embedding: ``head`` (per head), ``projection`` (the
    whole q or k projection before the head split) or None."""
    for name in ("q_norm", "q_layernorm"):
        norm = getattr(module, "_modules", {}).get(name)
        if norm is None:
            continue
        weight = next(getattr(norm, "original_component", norm).parameters(), None)
        return "head" if weight is None or weight.shape[-1] == d_head else "projection"
    return None


def alibi_slopes(rules: FamilyRules, hf_model: Any, n_heads: int) -> tuple[float, ...] | None:
    """Per-head ALiBi slopes (the score of key ``j`` for query ``i`` gains ``slope * (j - i)``), or None."""
    return None if rules.alibi is None else rules.alibi(hf_model, n_heads)
