"""What headlens does with each architecture TransformerLens's bridge has an adapter for.

:data:`ARCHITECTURES` maps every adapter's architecture (the Hugging Face model class name a
checkpoint's ``config.json`` names) whose class transformers has to its ``model_type``;
:data:`CATEGORIES` maps each ``model_type`` to what its attention is.  A ``model_type`` is
either in :data:`MATRIX` (the families headlens's test matrix checks against Hugging Face
eager attention, ``tests/families``) or refused: :data:`REFUSED` gives the one-line reason (its
category's, or the family's own in :data:`WHY`: what its attention does that headlens does not
redo), :func:`refusal_reason` reads it.  The adapters of architectures transformers has no class for
(remote code, TransformerLens's own models, aliases) are :data:`NOT_IN_TRANSFORMERS`.

``tests/families/test_architectures.py`` checks these tables against the installed
TransformerLens and transformers, so a new adapter fails the test until it is placed here.
"""

from __future__ import annotations

__all__ = [
    "ARCHITECTURES",
    "CATEGORIES",
    "MATRIX",
    "NOT_IN_TRANSFORMERS",
    "REASONS",
    "REFUSED",
    "WHY",
    "refusal_reason",
]

DENSE = "dense-attention decoder"
ENCODER = "encoder"
ENCODER_DECODER = "encoder-decoder"
HYBRID = "state-space or hybrid"
LATENT = "latent attention"
MULTIMODAL = "multimodal"
AUDIO = "audio"
VISION = "vision"
RECURRENT = "recurrent depth"
HEAD_EXPERTS = "mixture of attention heads"
SINKS = "attention sinks"
CHUNKED = "chunked attention"

#: Category -> why a model of it is refused (the dense decoders: when not in :data:`MATRIX`).
REASONS: dict[str, str] = {
    DENSE: "a dense-attention decoder not in headlens's test matrix yet: its attention is not checked against Hugging Face",
    ENCODER: "an encoder not in headlens's test matrix yet: its attention is not checked against Hugging Face",
    ENCODER_DECODER: "an encoder-decoder: cross-attention between two stacks, which headlens's one-stack studies do not model",
    HYBRID: "state-space or hybrid layers (Mamba, linear attention, convolutions, recurrences) have no attention pattern to capture",
    LATENT: "latent attention (DeepSeek MLA): heads share one low-rank key-value latent, so no head has its own k and v",
    MULTIMODAL: "a multimodal model: image or audio tokens enter the text stack, which headlens's text prompts do not build",
    AUDIO: "an audio model: its inputs are waveforms or spectrograms, not text prompts",
    VISION: "a vision model: its inputs are image patches, not text prompts",
    RECURRENT: "recurrent depth: the same blocks run several times in one forward, so a layer is not one set of heads",
    HEAD_EXPERTS: "a mixture of attention heads: a router picks each token's heads, so a head is not one fixed computation",
    SINKS: "learned attention sinks: each head's softmax has an extra learned logit that q and k do not give",
    CHUNKED: "chunked attention with layers without rotary (Llama 4): its chunk masks are not reconstructed",
}

#: Adapter architecture (Hugging Face class name) -> ``model_type`` of its config class.
ARCHITECTURES: dict[str, str] = {
    "AfmoeForCausalLM": "afmoe",
    "ApertusForCausalLM": "apertus",
    "ArceeForCausalLM": "arcee",
    "ASTForAudioClassification": "audio-spectrogram-transformer",
    "AudioFlamingo3ForConditionalGeneration": "audioflamingo3",
    "BambaForCausalLM": "bamba",
    "BartForConditionalGeneration": "bart",
    "BertForMaskedLM": "bert",
    "BertLMHeadModel": "bert",
    "BitNetForCausalLM": "bitnet",
    "BlenderbotForConditionalGeneration": "blenderbot",
    "BloomForCausalLM": "bloom",
    "BloomModel": "bloom",
    "CodeGenForCausalLM": "codegen",
    "Cohere2ForCausalLM": "cohere2",
    "CohereForCausalLM": "cohere",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV4ForCausalLM": "deepseek_v4",
    "DeiTForImageClassification": "deit",
    "DeiTModel": "deit",
    "Emu3ForConditionalGeneration": "emu3",
    "Ernie4_5ForCausalLM": "ernie4_5",
    "Ernie4_5_MoeForCausalLM": "ernie4_5_moe",
    "Exaone4ForCausalLM": "exaone4",
    "FalconForCausalLM": "falcon",
    "FalconH1ForCausalLM": "falcon_h1",
    "FalconMambaForCausalLM": "falcon_mamba",
    "FlexOlmoForCausalLM": "flex_olmo",
    "Florence2ForConditionalGeneration": "florence2",
    "GPT2LMHeadModel": "gpt2",
    "GPTBigCodeForCausalLM": "gpt_bigcode",
    "GPTJForCausalLM": "gptj",
    "GPTNeoForCausalLM": "gpt_neo",
    "GPTNeoXForCausalLM": "gpt_neox",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Gemma3nForConditionalGeneration": "gemma3n",
    "Gemma4ForCausalLM": "gemma4_text",
    "Gemma4ForConditionalGeneration": "gemma4",
    "Gemma4UnifiedForConditionalGeneration": "gemma4_unified",
    "GemmaForCausalLM": "gemma",
    "Glm4ForCausalLM": "glm4",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "Glm4vForConditionalGeneration": "glm4v",
    "GlmAsrForConditionalGeneration": "glmasr",
    "GlmForCausalLM": "glm",
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    "GptOssForCausalLM": "gpt_oss",
    "GraniteForCausalLM": "granite",
    "GraniteMoeForCausalLM": "granitemoe",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "HrmTextForCausalLM": "hrm_text",
    "HubertForCTC": "hubert",
    "HubertModel": "hubert",
    "HunYuanDenseV1ForCausalLM": "hunyuan_v1_dense",
    "Idefics3ForConditionalGeneration": "idefics3",
    "Jais2ForCausalLM": "jais2",
    "JambaForCausalLM": "jamba",
    "JetMoeForCausalLM": "jetmoe",
    "LEDForConditionalGeneration": "led",
    "LagunaForCausalLM": "laguna",
    "Lfm2ForCausalLM": "lfm2",
    "Lfm2MoeForCausalLM": "lfm2_moe",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
    "LlamaForCausalLM": "llama",
    "LlavaForConditionalGeneration": "llava",
    "LlavaNextForConditionalGeneration": "llava_next",
    "LlavaOnevisionForConditionalGeneration": "llava_onevision",
    "LongT5ForConditionalGeneration": "longt5",
    "M2M100ForConditionalGeneration": "m2m_100",
    "MBartForConditionalGeneration": "mbart",
    "MT5ForConditionalGeneration": "mt5",
    "Mamba2ForCausalLM": "mamba2",
    "MambaForCausalLM": "mamba",
    "MarianMTModel": "marian",
    "MiniMaxM2ForCausalLM": "minimax_m2",
    "Ministral3ForCausalLM": "ministral3",
    "Mistral3ForConditionalGeneration": "mistral3",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "ModernBertDecoderForCausalLM": "modernbert-decoder",
    "MptForCausalLM": "mpt",
    "MuseGlimmerForConditionalGeneration": "muse_glimmer",
    "MusicFlamingoForConditionalGeneration": "musicflamingo",
    "NanoChatForCausalLM": "nanochat",
    "NemotronForCausalLM": "nemotron",
    "NemotronHForCausalLM": "nemotron_h",
    "OPTForCausalLM": "opt",
    "Olmo2ForCausalLM": "olmo2",
    "Olmo3ForCausalLM": "olmo3",
    "OlmoForCausalLM": "olmo",
    "OlmoHybridForCausalLM": "olmo_hybrid",
    "OlmoeForCausalLM": "olmoe",
    "OpenAIGPTLMHeadModel": "openai-gpt",
    "PegasusForConditionalGeneration": "pegasus",
    "Phi3ForCausalLM": "phi3",
    "PhiForCausalLM": "phi",
    "Qwen2AudioForConditionalGeneration": "qwen2_audio",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3VLForConditionalGeneration": "qwen3_vl",
    "Qwen3VLMoeForConditionalGeneration": "qwen3_vl_moe",
    "Qwen3_5ForCausalLM": "qwen3_5_text",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
    "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
    "RecurrentGemmaForCausalLM": "recurrent_gemma",
    "RobertaForMaskedLM": "roberta",
    "RwkvForCausalLM": "rwkv",
    "SeedOssForCausalLM": "seed_oss",
    "SmolLM3ForCausalLM": "smollm3",
    "StableLmForCausalLM": "stablelm",
    "Starcoder2ForCausalLM": "starcoder2",
    "SwitchTransformersForConditionalGeneration": "switch_transformers",
    "T5ForConditionalGeneration": "t5",
    "T5Gemma2ForConditionalGeneration": "t5gemma2",
    "T5GemmaForConditionalGeneration": "t5gemma",
    "ViTForImageClassification": "vit",
    "ViTModel": "vit",
    "VaultGemmaForCausalLM": "vaultgemma",
    "Wav2Vec2ForCTC": "wav2vec2",
    "Wav2Vec2ForPreTraining": "wav2vec2",
    "Wav2Vec2Model": "wav2vec2",
    "XGLMForCausalLM": "xglm",
    "YoutuForCausalLM": "youtu",
    "Zamba2ForCausalLM": "zamba2",
}

#: Adapters whose architecture transformers has no class for: remote code (``trust_remote_code``),
#: TransformerLens's own models, diffusion language models, and aliases of a class above.
NOT_IN_TRANSFORMERS: frozenset[str] = frozenset(
    {
        "BD3LM",
        "BaiChuanForCausalLM",
        "BaichuanForCausalLM",
        "DreamModel",
        "ExaoneForCausalLM",
        "GPT2LMHeadCustomModel",
        "Gemma1ForCausalLM",
        "GiddForDiffusionLM",
        "HyenaDNAForCausalLM",
        "InternLM2ForCausalLM",
        "JetMoEForCausalLM",
        "LLaDA2MoeModelLM",
        "LLaDAModelLM",
        "MPTForCausalLM",
        "MinGPTForCausalLM",
        "NanoGPTForCausalLM",
        "NeelSoluOldForCausalLM",
        "NeoForCausalLM",
        "NeoXForCausalLM",
        "OpenELMForCausalLM",
        "OuroForCausalLM",
        "PhiMoEForCausalLM",
        "QwenForCausalLM",
        "RWKV7ForCausalLM",
        "RavenForCausalLM",
        "T5WithLMHeadModel",
        "TransformerLensNative",
        "TransformerLensPretrain",
    }
)

_BY_CATEGORY: dict[str, tuple[str, ...]] = {
    DENSE: (
        *("gpt2", "llama", "qwen2", "mistral", "mixtral", "gemma", "gemma2", "gpt_neox", "gpt_neo", "opt", "gptj"),
        *("gemma3_text", "qwen3", "olmo2", "phi3", "phi", "stablelm", "granite", "cohere", "gpt_bigcode", "falcon"),
        *("bloom", "mpt", "smollm3", "qwen2_moe", "olmoe"),
        *("afmoe", "apertus", "arcee", "bitnet", "codegen", "cohere2", "ernie4_5", "ernie4_5_moe", "exaone4", "flex_olmo"),
        *("gemma4_text", "glm", "glm4", "glm4_moe", "granitemoe", "hunyuan_v1_dense", "jais2", "laguna", "minimax_m2"),
        *("ministral3", "modernbert-decoder", "nanochat", "nemotron", "olmo", "olmo3", "openai-gpt", "qwen3_moe"),
        *("seed_oss", "starcoder2", "vaultgemma", "xglm"),
    ),
    ENCODER: ("bert", "roberta"),
    ENCODER_DECODER: (
        *("bart", "blenderbot", "led", "longt5", "m2m_100", "marian", "mbart", "mt5", "pegasus"),
        *("switch_transformers", "t5", "t5gemma", "t5gemma2"),
    ),
    HYBRID: (
        *("bamba", "falcon_h1", "falcon_mamba", "granitemoehybrid", "jamba", "lfm2", "lfm2_moe", "mamba", "mamba2"),
        *("nemotron_h", "olmo_hybrid", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next", "recurrent_gemma", "rwkv", "zamba2"),
    ),
    LATENT: ("deepseek_v2", "deepseek_v3", "deepseek_v4", "glm4_moe_lite", "glm_moe_dsa", "youtu"),
    MULTIMODAL: (
        *("emu3", "florence2", "gemma3", "gemma3n", "gemma4", "gemma4_unified", "glm4v", "idefics3", "llama4", "llava"),
        *("llava_next", "llava_onevision", "mistral3", "muse_glimmer", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe"),
        *("qwen3_vl", "qwen3_vl_moe"),
    ),
    AUDIO: ("audio-spectrogram-transformer", "audioflamingo3", "glmasr", "hubert", "musicflamingo", "qwen2_audio", "wav2vec2"),
    VISION: ("deit", "vit"),
    RECURRENT: ("hrm_text",),
    HEAD_EXPERTS: ("jetmoe",),
    SINKS: ("gpt_oss",),
    CHUNKED: ("llama4_text",),
}

#: ``model_type`` -> category (one of the keys of :data:`REASONS`).
CATEGORIES: dict[str, str] = {model_type: category for category, types in _BY_CATEGORY.items() for model_type in types}

#: The ``model_type`` families of headlens's test matrix (``tests/families``): captured patterns,
#: ``verify``, patching, circuits, sink removal, KV bytes and half precision checked on each.
MATRIX: frozenset[str] = frozenset(
    {
        *("gpt2", "llama", "qwen2", "mistral", "mixtral", "gemma", "gemma2", "gpt_neox", "gpt_neo", "opt", "gptj"),
        *("gemma3_text", "qwen3", "olmo2", "phi3", "phi", "stablelm", "granite", "cohere", "gpt_bigcode", "falcon"),
        *("bloom", "mpt", "smollm3", "qwen2_moe", "olmoe", "bert", "roberta"),
        *("apertus", "arcee", "cohere2", "ernie4_5", "ernie4_5_moe", "exaone4", "flex_olmo", "glm", "glm4", "glm4_moe"),
        *("granitemoe", "jais2", "minimax_m2", "ministral3", "nemotron", "olmo", "olmo3", "qwen3_moe", "seed_oss"),
        *("starcoder2", "vaultgemma", "xglm"),
    }
)

_NO_ROTARY_HOOKS = "the bridge fires no rotated q and k (hook_rot_q/k) and no rotary cos/sin"

#: Dense decoders not in :data:`MATRIX` -> what their attention does that headlens does not redo (one line each).
WHY: dict[str, str] = {
    "afmoe": f"a sigmoid gate (gate_proj) scales each head's output after attention, and {_NO_ROTARY_HOOKS}",
    "bitnet": "attn_sub_norm normalises all heads' outputs together before o_proj (hook_z is after it): z is not pattern times v",
    "codegen": "TransformerLens's CodeGen attention reads CodeGenAttention.embed_positions, which this transformers has no more",
    "gemma4_text": f"later layers reuse an earlier layer's keys and values, v is RMS-normalised, and {_NO_ROTARY_HOOKS}",
    "hunyuan_v1_dense": "its QK-norm (query_layernorm, key_layernorm) follows the rotary; the bridge's hook_rot_q/k are before it",
    "laguna": f"a softplus gate (g_proj) scales each head's output after attention, and {_NO_ROTARY_HOOKS}",
    "modernbert-decoder": f"{_NO_ROTARY_HOOKS}, so its rotated q and k are not seen",
    "nanochat": f"its QK-norm comes after the rotary embedding, and {_NO_ROTARY_HOOKS}",
    "openai-gpt": "TransformerLens's OpenAI GPT attention does not mask later keys: its pattern gives them weight (0.09, tiny checkpoint)",
}

#: ``model_type`` -> the one-line reason headlens refuses it (every known type not in :data:`MATRIX`).
REFUSED: dict[str, str] = {
    model_type: WHY.get(model_type, REASONS[category]) for model_type, category in CATEGORIES.items() if model_type not in MATRIX
}


def refusal_reason(model_type: str) -> str | None:
    """Why headlens refuses a model of ``model_type`` (one line), or None when it is in the test matrix
    or unknown to this table (a remote-code model: what it does is not known here)."""
    return REFUSED.get(model_type)
