"""Every TransformerLens bridge adapter whose architecture transformers can build is in the family matrix or refused.

The reference is the installed libraries themselves: TransformerLens's ``SUPPORTED_ARCHITECTURES``
(the bridge's adapters) and transformers' auto-class tables (which ``model_type`` each model class
belongs to), read here without importing any model code.
"""

from __future__ import annotations

import pytest

from headlens.analyses.synthetic.families import ALL_FAMILIES, CHECKED_FAMILIES, family_config
from headlens.probes.architectures import (
    ARCHITECTURES,
    CATEGORIES,
    MATRIX,
    NOT_IN_TRANSFORMERS,
    REASONS,
    REFUSED,
    WHY,
    refusal_reason,
)
from tests.families.matrix import ENCODERS


def _model_types_of_classes() -> dict[str, set[str]]:
    """Hugging Face model class name -> the ``model_type`` values transformers' auto classes file it under."""
    import transformers.models.auto.modeling_auto as auto

    found: dict[str, set[str]] = {}
    for name in dir(auto):
        if name.endswith("_MAPPING_NAMES") and name != "CONFIG_MAPPING_NAMES":
            for model_type, classes in getattr(auto, name).items():
                for cls in classes if isinstance(classes, (list, tuple)) else [classes]:
                    found.setdefault(cls, set()).add(model_type)
    return found


def test_every_adapter_is_placed():
    """The adapters split into those transformers has a class for (ARCHITECTURES, with the right model_type) and the rest."""
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES

    adapters = set(SUPPORTED_ARCHITECTURES)
    assert not set(ARCHITECTURES) & NOT_IN_TRANSFORMERS
    assert adapters == set(ARCHITECTURES) | NOT_IN_TRANSFORMERS, (
        f"new adapters: {sorted(adapters - set(ARCHITECTURES) - NOT_IN_TRANSFORMERS)}; "
        f"gone: {sorted(set(ARCHITECTURES) | NOT_IN_TRANSFORMERS - adapters)}"
    )
    in_transformers = _model_types_of_classes()
    for arch, model_type in ARCHITECTURES.items():
        assert model_type in in_transformers.get(arch, set()), f"{arch}: {model_type} not in {in_transformers.get(arch)}"
    assert not NOT_IN_TRANSFORMERS & set(in_transformers)


def test_each_model_type_is_in_the_matrix_or_refused_with_a_reason():
    from transformers import AutoConfig

    model_types = set(ARCHITECTURES.values())
    assert set(CATEGORIES) == model_types
    for model_type in sorted(model_types):
        AutoConfig.for_model(model_type)  # transformers can build its config
        in_matrix, reason = model_type in MATRIX, refusal_reason(model_type)
        assert in_matrix != (reason is not None), model_type
        if reason is not None:
            assert reason == WHY.get(model_type, REASONS[CATEGORIES[model_type]]) and "\n" not in reason and len(reason) < 160
    assert set(REFUSED) == model_types - MATRIX
    assert set(WHY) <= set(REFUSED)
    assert refusal_reason("no_such_model_type") is None


def test_the_matrix_is_the_tested_families():
    """probes.architectures.MATRIX names exactly the families tests/families and the encoder tests run on,
    each a dense-attention decoder or an encoder, and each tiny checkpoint is of its own model_type."""
    assert MATRIX == set(ALL_FAMILIES) | set(CHECKED_FAMILIES) | set(ENCODERS)
    assert {CATEGORIES[f] for f in MATRIX} == {"dense-attention decoder", "encoder"}
    assert all(CATEGORIES[f] == "encoder" for f in ENCODERS)


def test_every_dense_decoder_is_checked_or_refused_with_its_own_reason():
    """Issue 48: no dense-attention decoder the bridge wraps is refused as merely 'not checked'."""
    dense = {t for t, c in CATEGORIES.items() if c == "dense-attention decoder"}
    assert dense - MATRIX == set(WHY), sorted(dense - MATRIX ^ set(WHY))


@pytest.mark.parametrize("family", ALL_FAMILIES + CHECKED_FAMILIES)
def test_each_tiny_checkpoint_is_its_family(family):
    assert family_config(family).model_type == family


def test_verify_names_why_it_refuses_a_dense_decoder(tmp_path):
    """A dense decoder the bridge wraps but headlens does not redo (BitNet: a norm over all heads' outputs) boots,
    and ``verify`` refuses it in one line with its own reason from ``architectures.WHY``."""
    import torch
    import transformers

    from headlens.analyses.heads.verify import verify_attention
    from headlens.probes.errors import UnsupportedModelError
    from headlens.probes.loading import load_model
    from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

    config = transformers.BitNetConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=50257,
        bos_token_id=50256,
        eos_token_id=50256,
        pad_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        transformers.BitNetForCausalLM(config).save_pretrained(tmp_path)
    load_offline_gpt2_tokenizer(str(tmp_path / "tokenizer")).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError) as err:
        verify_attention(load_model(model=str(tmp_path), device="cpu"), ["A short one."])
    assert WHY["bitnet"] in str(err.value) and "\n" not in str(err.value)
