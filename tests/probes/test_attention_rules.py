"""The per-family attention rules without a model: ALiBi's bias, the refusals and their wording."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from headlens.probes.attention import RECONSTRUCTED_FAMILIES, AttentionSpec, LayerAttention, position_bias, scores_from_qk
from headlens.probes.attention_rules import FAMILY_RULES, family_rules, read_scale, read_window
from headlens.probes.errors import UnsupportedModelError


def _layer(**kw) -> LayerAttention:
    base = dict(
        layer=0, n_heads=4, n_kv_heads=4, d_head=8, scale=1.0, window=None, softcap=None, rotary="none", rotary_dim=None, native=True
    )
    return LayerAttention(**{**base, **kw})


def test_alibi_bias_matches_bloom_and_mpt_up_to_a_constant_per_row():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    n = 7
    for family, theirs in (
        ("bloom", build_alibi_tensor(torch.ones(1, n, dtype=torch.long), 4, torch.float32)[:, 0, :]),  # slope * j
        ("mpt", build_mpt_alibi_tensor(4, n)[:, 0, :]),  # slope * (j - n + 1)
    ):
        builder = FAMILY_RULES[family].alibi
        assert builder is not None
        slopes = builder(SimpleNamespace(config=SimpleNamespace(attn_config={"alibi_bias_max": 8})), 4)
        ours = position_bias(_layer(alibi=slopes), n, n)  # [head, q, k]
        shift = theirs[:, None, :] - ours  # the same in every key of a row: the softmax removes it
        assert torch.allclose(shift, shift[..., :1].expand_as(shift), atol=1e-6), family
        assert not torch.allclose(ours[0], ours[3])  # the heads' slopes differ


def test_alibi_enters_the_scores_after_the_scale():
    q, k = torch.randn(5, 4, 8), torch.randn(5, 4, 8)
    plain = scores_from_qk(_layer(scale=0.5), q, k)
    la = _layer(scale=0.5, alibi=(1.0, 0.5, 0.25, 0.125))
    biased = scores_from_qk(la, q, k, q_offset=0)
    ok = torch.isfinite(plain)
    assert torch.allclose((biased - plain)[ok], position_bias(la, 5, 5)[ok])


def test_refusals_are_one_line_with_their_reason():
    spec = AttentionSpec(family="retnet", architecture="RetNetForCausalLM", layers=(_layer(),), reconstructable=False, refusal="no softmax")
    with pytest.raises(UnsupportedModelError, match=r"verify: headlens cannot redo the attention of retnet .*\(no softmax\)") as info:
        spec.require_reconstruction("verify")
    assert "\n" not in str(info.value) and "qwen3" in str(info.value)  # the supported families are named
    assert family_rules("retnet") is None and "retnet" not in RECONSTRUCTED_FAMILIES


def test_the_families_redone_are_the_test_matrix_and_the_others_say_why():
    from headlens.probes.architectures import MATRIX, REFUSED
    from headlens.probes.attention import _refusal

    assert set(FAMILY_RULES) == set(MATRIX)
    assert _refusal("deepseek_v3", SimpleNamespace(), []) == REFUSED["deepseek_v3"]  # latent attention: said in one line
    assert _refusal("some_remote_code_model", SimpleNamespace(), []) == "its attention has not been checked against Hugging Face"
    assert _refusal("qwen3", SimpleNamespace(), []) is None


def test_unchecked_variants_of_a_family_are_refused():
    falcon = FAMILY_RULES["falcon"].refuse
    mpt = FAMILY_RULES["mpt"].refuse
    assert falcon is not None and mpt is not None
    assert falcon(SimpleNamespace(alibi=False)) is None
    assert "alibi" in (falcon(SimpleNamespace(alibi=True)) or "").lower()
    assert mpt(SimpleNamespace(attn_config={"alibi": True})) is None
    assert mpt(SimpleNamespace(attn_config={"alibi": False})) is not None
    assert mpt(SimpleNamespace(attn_config={"alibi": True, "clip_qkv": 6.0})) is not None


def test_scale_and_window_readers():
    rules = FAMILY_RULES["llama"]
    assert read_scale(rules, SimpleNamespace(scaling=0.05), 16) == 0.05  # Granite's attention_multiplier
    assert read_scale(rules, SimpleNamespace(inv_norm_factor=0.25), 16) == 0.25  # Bloom
    assert read_scale(rules, SimpleNamespace(softmax_scale=0.125), 16) == 0.125  # MPT
    assert read_scale(rules, SimpleNamespace(), 16) == 0.25
    assert read_scale(FAMILY_RULES["gpt_neo"], SimpleNamespace(scaling=0.25), 16) == 1.0
    cfg = SimpleNamespace(sliding_window=16)
    assert read_window("phi3", cfg, SimpleNamespace(), 0) == 16  # every layer
    assert read_window("qwen2", SimpleNamespace(sliding_window=16, use_sliding_window=False), SimpleNamespace(), 0) is None
    assert read_window("gemma3_text", cfg, SimpleNamespace(sliding_window=None), 1) is None  # the module's own says
