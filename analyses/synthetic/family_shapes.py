"""Shapes of the tiny checkpoints of the families added by issue 48 (see :mod:`.families`).

Each family's config names what shows in the tiny checkpoint, in the config class's own
keyword names: grouped-query or multi-query attention, QK-norm (Gemma 3, Qwen 3, OLMo 2,
StableLM, Cohere, OLMoE), partial rotary (Phi 50%, StableLM 25%), interleaved rotary (Cohere),
sliding and global layers (Gemma 3, Phi-3's window, Mixtral's window), a non-default
attention scale (Granite's ``attention_multiplier``, Gemma 3's ``query_pre_attn_scalar``),
ALiBi instead of rotary (Bloom, MPT), SmolLM3's layers without rotary, and mixtures of
experts (Qwen2-MoE, OLMoE, Mixtral) whose attention is dense.  :data:`CHECKED_CLASSES` are the rest of
the bridge's dense decoders, each a few keywords on a shared Llama-style shape.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NEW_CLASSES", "CHECKED_CLASSES", "FEATURES", "new_family_shape", "checked_family_shape"]

#: Family (Hugging Face ``model_type``) -> (transformers config class, model class) names.
NEW_CLASSES: dict[str, tuple[str, str]] = {
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "phi": ("PhiConfig", "PhiForCausalLM"),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM"),
    "granite": ("GraniteConfig", "GraniteForCausalLM"),
    "cohere": ("CohereConfig", "CohereForCausalLM"),
    "gpt_bigcode": ("GPTBigCodeConfig", "GPTBigCodeForCausalLM"),
    "falcon": ("FalconConfig", "FalconForCausalLM"),
    "bloom": ("BloomConfig", "BloomForCausalLM"),
    "mpt": ("MptConfig", "MptForCausalLM"),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
}

#: The rest of the bridge's dense decoders (issue 48), in the family matrix but not in the other family tests:
#: family -> (config class, model class) names.  Adding one is
#: a line here, its shape in :func:`checked_family_shape`, a line of FEATURES, of FAMILY_RULES and of MATRIX.
CHECKED_CLASSES: dict[str, tuple[str, str]] = {
    "apertus": ("ApertusConfig", "ApertusForCausalLM"),
    "arcee": ("ArceeConfig", "ArceeForCausalLM"),
    "cohere2": ("Cohere2Config", "Cohere2ForCausalLM"),
    "ernie4_5": ("Ernie4_5Config", "Ernie4_5ForCausalLM"),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM"),
    "exaone4": ("Exaone4Config", "Exaone4ForCausalLM"),
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM"),
    "glm": ("GlmConfig", "GlmForCausalLM"),
    "glm4": ("Glm4Config", "Glm4ForCausalLM"),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM"),
    "jais2": ("Jais2Config", "Jais2ForCausalLM"),
    "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM"),
    "ministral3": ("Ministral3Config", "Ministral3ForCausalLM"),
    "nemotron": ("NemotronConfig", "NemotronForCausalLM"),
    "olmo": ("OlmoConfig", "OlmoForCausalLM"),
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM"),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM"),
    "vaultgemma": ("VaultGemmaConfig", "VaultGemmaForCausalLM"),
    "xglm": ("XGLMConfig", "XGLMForCausalLM"),
}

#: Family -> what its attention does in the tiny checkpoint (one line, for docs/families.md's table), the
#: families of ``families._CLASSES`` first.
FEATURES: dict[str, str] = {
    "gpt2": "4 heads, learned positions, 1/sqrt(d_head)",
    "llama": "GQA 2 for 4, rotary",
    "qwen2": "GQA 2 for 4, rotary, qkv bias",
    "mistral": "GQA 2 for 4, rotary, sliding window 16 on every layer",
    "gemma": "multi-query (1 KV head for 4), rotary",
    "gemma2": "GQA 2 for 4, rotary, window 16 on even layers, query_pre_attn_scalar, logit softcap 5",
    "gpt_neox": "partial rotary (25%, from hook_cos/sin), parallel attention and MLP",
    "gpt_neo": "local (window 16) and global layers, no score scaling, learned positions; attention computed by Hugging Face",
    "opt": "learned positions, 1/sqrt(d_head), attention computed by Hugging Face",
    "gptj": "partial interleaved rotary (rotate every two), parallel attention and MLP; attention computed by Hugging Face",
    "gemma3_text": "GQA 2 for 4, QK-norm (RMS per head), query_pre_attn_scalar, sliding (16) and global layers",
    "qwen3": "GQA 2 for 4, QK-norm (RMS per head), rotary",
    "olmo2": "GQA 2 for 4, QK-norm (RMS over all heads), rotary",
    "phi3": "GQA 2 for 4, fused qkv, rotary, sliding window 16",
    "phi": "partial rotary (50%), parallel attention and MLP, biases",
    "stablelm": "GQA 2 for 4, partial rotary (25%), QK-norm (LayerNorm per head), qkv bias",
    "granite": "GQA 2 for 4, rotary, attention_multiplier as the scale (not 1/sqrt(d_head))",
    "cohere": "GQA 2 for 4, interleaved rotary, QK-norm (LayerNorm per head), parallel attention and MLP",
    "gpt_bigcode": "multi-query (1 KV head for 4), learned positions",
    "falcon": "multi-query (1 KV head for 4), rotary, parallel attention and MLP",
    "bloom": "ALiBi, no rotary, fused qkv",
    "mpt": "ALiBi, no rotary, fused qkv, no biases",
    "smollm3": "GQA 2 for 4, rotary on layer 0, no rotary on layer 1 (NoPE)",
    "qwen2_moe": "GQA 2 for 4, qkv bias, rotary; MoE MLP (4 experts, top 2, shared expert)",
    "olmoe": "GQA 2 for 4, QK-norm (RMS over all heads), rotary; MoE MLP (4 experts, top 2)",
    "mixtral": "GQA 2 for 4, rotary, sliding window 16; MoE MLP (4 experts, top 2)",
    "apertus": "GQA 2 for 4, QK-norm (RMS per head), llama3-scaled rotary",
    "arcee": "GQA 2 for 4, rotary",
    "cohere2": "GQA 2 for 4, interleaved rotary, sliding (16) and global layers",
    "ernie4_5": "GQA 2 for 4, interleaved rotary",
    "ernie4_5_moe": "GQA 2 for 4, interleaved rotary; MoE MLP (4 experts, top 2, shared expert) on layer 1",
    "exaone4": "GQA 2 for 4, QK-norm (RMS per head), rotary, sliding (16) and global layers",
    "flex_olmo": "GQA 2 for 4, QK-norm (RMS over all heads), rotary; MoE MLP (4 experts, top 2)",
    "glm": "GQA 2 for 4, partial interleaved rotary (50%), qkv bias",
    "glm4": "GQA 2 for 4, partial interleaved rotary (50%), qkv bias, norms after attention and MLP",
    "glm4_moe": "GQA 2 for 4, QK-norm (RMS per head), partial rotary (50%); MoE MLP (4 experts, top 2) on layer 1",
    "granitemoe": "GQA 2 for 4, rotary, attention_multiplier as the scale; MoE MLP (4 experts, top 2)",
    "jais2": "GQA 2 for 4, rotary, biases",
    "minimax_m2": "GQA 2 for 4, QK-norm (RMS over all heads), rotary; MoE MLP (4 experts, top 2)",
    "ministral3": "GQA 2 for 4, yarn rotary, position-scaled queries (llama_4_scaling_beta)",
    "nemotron": "GQA 2 for 4, partial rotary (50%)",
    "olmo": "GQA 2 for 4, rotary, non-parametric layer norms",
    "olmo3": "GQA 2 for 4, QK-norm (RMS over all heads), rotary, sliding (16) and global layers",
    "qwen3_moe": "GQA 2 for 4, QK-norm (RMS per head), rotary; MoE MLP (4 experts, top 2)",
    "seed_oss": "GQA 2 for 4, rotary, qkv bias",
    "starcoder2": "GQA 2 for 4, rotary, sliding window 16 on every layer, biases",
    "vaultgemma": "GQA 2 for 4, rotary, query_pre_attn_scalar, sliding (16) and global layers, logit softcap 5",
    "xglm": "4 heads, sinusoidal positions, 1/sqrt(d_head)",
}

#: Families whose tiny checkpoint has one KV head (multi-query); the others have half the query heads.
MULTI_QUERY = frozenset({"gpt_bigcode", "falcon"})


def new_family_shape(
    family: str, *, n_layers: int, n_heads: int, kv_heads: int, d_model: int, d_mlp: int, n_ctx: int, window: int
) -> dict[str, Any]:
    """The config keywords of a new ``family``'s tiny checkpoint (shape and the features above)."""
    d_head = d_model // n_heads
    decoder = {
        "hidden_size": d_model,
        "intermediate_size": d_mlp,
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": n_ctx,
    }
    moe = {"num_experts": 4, "num_experts_per_tok": 2}
    alternating = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)]
    shapes: dict[str, dict[str, Any]] = {
        "gemma3_text": {
            **decoder,
            "head_dim": d_head,
            "sliding_window": window,
            "query_pre_attn_scalar": 2 * d_head,
            "layer_types": alternating,
        },
        "qwen3": {**decoder, "head_dim": d_head},
        "olmo2": decoder,
        "phi3": {**decoder, "sliding_window": window},
        "phi": {**decoder, "num_key_value_heads": n_heads, "partial_rotary_factor": 0.5},
        "stablelm": {**decoder, "partial_rotary_factor": 0.25, "qk_layernorm": True, "use_qkv_bias": True},
        "granite": {
            **decoder,
            "attention_multiplier": 0.5 / d_head,
            "embedding_multiplier": 2.0,
            "residual_multiplier": 0.5,
            "logits_scaling": 2.0,
        },
        "cohere": {**decoder, "use_qk_norm": True, "logit_scale": 0.5},
        "gpt_bigcode": {
            "n_embd": d_model,
            "n_layer": n_layers,
            "n_head": n_heads,
            "n_inner": d_mlp,
            "n_positions": n_ctx,
            "multi_query": True,
        },
        "falcon": {
            "hidden_size": d_model,
            "num_hidden_layers": n_layers,
            "num_attention_heads": n_heads,
            "ffn_hidden_size": d_mlp,
            "max_position_embeddings": n_ctx,
            "multi_query": True,
            "parallel_attn": True,
            "alibi": False,
        },
        "bloom": {"hidden_size": d_model, "n_layer": n_layers, "n_head": n_heads},
        "mpt": {
            "d_model": d_model,
            "n_layers": n_layers,
            "n_heads": n_heads,
            "expansion_ratio": d_mlp // d_model,
            "max_seq_len": n_ctx,
            "attn_config": {"alibi": True},
        },
        "smollm3": {**decoder, "no_rope_layers": [int(i % 2 == 0) for i in range(n_layers)], "pad_token_id": None},
        "qwen2_moe": {**decoder, **moe, "moe_intermediate_size": d_mlp // 2, "shared_expert_intermediate_size": d_mlp // 2},
        "olmoe": {**decoder, **moe},
        "mixtral": {**decoder, "sliding_window": window, "num_local_experts": 4, "num_experts_per_tok": 2},
    }
    return shapes[family] if family in shapes else checked_family_shape(family, decoder, d_head=d_head, window=window)


def checked_family_shape(family: str, decoder: dict[str, Any], *, d_head: int, window: int) -> dict[str, Any]:
    """The config keywords of a family of :data:`CHECKED_CLASSES` (``decoder``: the shared Llama-style names)."""
    n_layers, d_model = decoder["num_hidden_layers"], decoder["hidden_size"]
    d_mlp, n_ctx = decoder["intermediate_size"], decoder["max_position_embeddings"]
    alternating = {
        "sliding_window": window,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)],
    }
    own: dict[str, dict[str, Any]] = {
        "cohere2": alternating,
        "ernie4_5_moe": {"moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": d_mlp // 2, "moe_num_shared_experts": 1},
        "exaone4": alternating,
        "flex_olmo": {"num_experts": 4, "num_experts_per_tok": 2, "pad_token_id": None},
        "glm": {"pad_token_id": None},
        "glm4": {"pad_token_id": None},
        "glm4_moe": {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": d_mlp // 2, "use_qk_norm": True},
        "granitemoe": {"num_local_experts": 4, "num_experts_per_tok": 2, "attention_multiplier": 0.5 / d_head},
        "minimax_m2": {"num_local_experts": 4, "num_experts_per_tok": 2},
        "olmo3": alternating,
        "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": d_mlp // 2},
        "starcoder2": {"sliding_window": window},
        "vaultgemma": {**alternating, "query_pre_attn_scalar": 2 * d_head, "attn_logit_softcapping": 5.0},
    }
    if family == "xglm":
        n_heads = decoder["num_attention_heads"]
        return {"d_model": d_model, "num_layers": n_layers, "attention_heads": n_heads, "ffn_dim": d_mlp, "max_position_embeddings": n_ctx}
    return {**decoder, "head_dim": d_head, **own.get(family, {})}
