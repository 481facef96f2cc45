"""The attention rules of the families added by issue 48, each checked against Hugging Face eager attention.

The tiny checkpoints of :data:`~headlens.analyses.synthetic.families.NEW_FAMILIES` (QK-norm,
per-layer rotary base, layers without rotary, partial rotary, an attention multiplier as the
scale, multi-query attention, ALiBi, mixtures of experts) and variants built here (Phi-3's
partial long-rope; QK-norm weights away from 1).  The independent reference is a plain
``AutoModelForCausalLM`` forward with ``attn_implementation="eager"`` and ``output_attentions``
on the same token ids: the bridge's pattern and headlens' reconstruction from the captured
q and k must both equal it on every layer; ``verify`` must pass; streaming statistics must
equal the eager ones; score edits must take effect.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from headlens.analyses.heads.census import CensusConfig, run_census
from headlens.analyses.heads.verify import VERIFY_WHAT, verify_attention, verify_capture
from headlens.analyses.synthetic.families import NEW_FAMILIES, WINDOW, family_config
from headlens.probes.attention import attention_spec, pattern_from_qk
from headlens.probes.capture import capture
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.interventions import check_score_edits
from headlens.probes.scoped import torch_seed
from tests.helpers import assert_close

TEXT = (
    "Apple raised its price target. Down by the river bank, the water was calm, and by the time "
    "you reach the bank the river has settled what you meant."
)
TEXTS = [TEXT, "A short one."]


def _phi3_longrope(config: Any) -> None:
    """Phi-3 with partial rotary (8 of 16 dims) and long-rope scaling, past its original context (32)."""
    config.partial_rotary_factor = 0.5
    config.original_max_position_embeddings = 32
    config.rope_parameters = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0, 1.5, 2.0, 3.0],
        "long_factor": [2.0, 3.0, 5.0, 8.0],
        "original_max_position_embeddings": 32,
    }


#: Variants of the shared tiny checkpoints, built here: ``name -> (family, config edit, norm weights moved off 1)``.
VARIANTS: dict[str, tuple[str, Any, bool]] = {
    "phi3-longrope": ("phi3", _phi3_longrope, False),
    "olmo2-norms": ("olmo2", None, True),  # QK-norm over the whole projection, weights not 1
    "cohere-norms": ("cohere", None, True),  # QK-norm per head, weights not 1
}
FAMILIES = NEW_FAMILIES + tuple(VARIANTS)
ALIBI = ("bloom", "mpt")


def _build_variant(folder: Path, name: str) -> Path:
    import transformers

    from headlens.analyses.synthetic.family_shapes import NEW_CLASSES
    from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

    family, edit, norms = VARIANTS[name]
    config = family_config(family)
    if edit is not None:
        edit(config)
    with torch_seed(0):
        model = getattr(transformers, NEW_CLASSES[family][1])(config)
        with torch.no_grad():
            for key, p in model.named_parameters():
                if norms and "norm" in key:
                    p.add_(0.3 * torch.randn_like(p))
    with contextlib.redirect_stderr(io.StringIO()):
        model.save_pretrained(folder)
    with tempfile.TemporaryDirectory() as tmp:
        load_offline_gpt2_tokenizer(tmp).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def family_pair(family_checkpoint, tmp_path_factory):
    """``family_pair(name)``: (headlens model, Hugging Face eager model) of one tiny checkpoint, loaded once."""
    from transformers import AutoModelForCausalLM

    from headlens.probes.loading import load_model

    loaded: dict[str, tuple[Any, Any]] = {}

    def get(name: str) -> tuple[Any, Any]:
        if name not in loaded:
            folder = _build_variant(tmp_path_factory.mktemp(name), name) if name in VARIANTS else family_checkpoint(name)
            hf = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
            loaded[name] = (load_model(model=str(folder), device="cpu"), hf)
        return loaded[name]

    return get


@pytest.mark.parametrize("family", FAMILIES)
def test_patterns_and_their_reconstruction_equal_hugging_face_eager(family, family_pair):
    model, hf = family_pair(family)
    spec = attention_spec(model)
    assert spec.reconstructable and spec.family == VARIANTS.get(family, (family,))[0]
    cap = capture(model, TEXTS, CaptureConfig(what=("rot_q", "rot_k", "pattern")))
    assert cap.batch.lengths[0] > 2 * WINDOW  # long enough for the windows to matter
    # the same padded batch: Phi-3's long-rope picks its factors by the batch's width, not each prompt's length
    with torch.no_grad():
        ref = hf(cap.batch.tokens, attention_mask=cap.batch.attention_mask, output_attentions=True).attentions
    for i, n in enumerate(cap.batch.lengths.tolist()):
        for layer, la in enumerate(spec.layers):
            want = ref[layer][i, :, :n, :n].float()
            if i == 0:  # the patterns are not one-hot (the comparison could fail)
                assert float(want.max(dim=-1).values[:, 4:].mean()) < 0.95, f"{family} layer {layer}"
            assert_close(cap.get(layer, "pattern")[i, :, :n, :n], want, "float32", f"{family} bridge layer {layer}")
            redone = pattern_from_qk(la, cap.get(layer, "rot_q")[i, :n], cap.get(layer, "rot_k")[i, :n])
            assert_close(redone, want, "float32", f"{family} reconstruction layer {layer}")


@pytest.mark.parametrize("family", FAMILIES)
def test_verify_passes_on_every_layer(family, family_pair):
    table = verify_attention(family_pair(family)[0], TEXTS)
    assert len(table) == family_pair(family)[0].n_layers
    assert table["ok"].all(), table.to_string()
    assert (table[["max_err_pattern", "max_err_z", "max_outside_mask", "max_row_sum_err"]].to_numpy() < 1e-5).all()
    for applied, la in zip(table["applied"].astype(str), attention_spec(family_pair(family)[0]).layers, strict=True):
        assert ("ALiBi" in applied) == (la.alibi is not None) and ("QK-norm" in applied) == (la.qk_norm is not None), applied
        assert ("no rotary" in applied) == (la.rope_theta is None), applied


def _without(family: str, la: Any) -> dict[str, Any]:
    """Each rule the family's layer uses, left out."""
    default = la.d_head**-0.5  # Granite's multiplier and Gemma's query_pre_attn_scalar replace it
    broken: dict[str, Any] = {"scale": dataclasses.replace(la, scale=default if la.scale != default else la.scale * 1.5)}
    if la.alibi is not None:
        broken["alibi"] = dataclasses.replace(la, alibi=None)
    if la.window is not None:
        broken["window"] = dataclasses.replace(la, window=None)
    if la.rotary == "neox":
        broken["rotary"] = dataclasses.replace(la, rotary="none")
    return broken


@pytest.mark.parametrize("family", ["bloom", "mpt", "granite", "gemma3_text", "phi3-longrope", "falcon"])
def test_verify_fails_when_a_rule_is_left_out(family, family_pair):
    model = family_pair(family)[0]
    spec = attention_spec(model)
    assert verify_capture(model, capture(model, TEXTS, CaptureConfig(what=VERIFY_WHAT)))["ok"].all()
    try:
        for rule, layer in _without(family, spec.layers[0]).items():
            model.extra["attention_spec"] = dataclasses.replace(spec, layers=(layer, *spec.layers[1:]))
            table = verify_capture(model, capture(model, TEXTS, CaptureConfig(what=VERIFY_WHAT)))
            assert not bool(table.loc[0, "ok"]), f"{family}: verify passed without the {rule}"
    finally:
        model.extra["attention_spec"] = spec


def test_layer_facts_are_read_from_the_model(family_pair):
    gemma = attention_spec(family_pair("gemma3_text")[0]).layers
    assert [la.window for la in gemma] == [WINDOW, None]
    assert [la.rope_theta for la in gemma] == [10_000.0, 1_000_000.0]  # local and global rotary bases
    assert gemma[0].qk_norm == "head" and gemma[0].scale == pytest.approx(32**-0.5)  # query_pre_attn_scalar
    assert [la.rope_theta is None for la in attention_spec(family_pair("smollm3")[0]).layers] == [False, True]
    assert attention_spec(family_pair("olmo2")[0]).layers[0].qk_norm == "projection"  # the whole projection, before the head split
    assert attention_spec(family_pair("granite")[0]).layers[0].scale == pytest.approx(0.5 / 16)  # attention_multiplier
    phi3 = attention_spec(family_pair("phi3-longrope")[0]).layers[0]
    assert (phi3.rotary, phi3.rotary_dim, phi3.window) == ("neox", 8, WINDOW)  # the bridge never fires its hook_rot_*
    assert attention_spec(family_pair("stablelm")[0]).layers[0].rotary_dim == 4
    assert attention_spec(family_pair("gpt_bigcode")[0]).n_kv_heads == 1
    assert attention_spec(family_pair("falcon")[0]).n_kv_heads == 1
    assert attention_spec(family_pair("bloom")[0]).layers[0].alibi == (0.25, 0.0625, 0.015625, 0.00390625)
    assert all(la.alibi is None for f in NEW_FAMILIES if f not in ALIBI for la in attention_spec(family_pair(f)[0]).layers)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in ALIBI])
def test_streaming_statistics_equal_eager(family, family_pair):
    model = family_pair(family)[0]
    small: dict[str, Any] = dict(n_prompts=3, seq_len=9, window=21, batch_size=2, n_bootstrap=20)
    eager = run_census(model, CensusConfig(**small, attention="eager"))
    stream = run_census(model, CensusConfig(**small, attention="streaming", query_block=7))
    for name, arr in eager.per_prompt.items():
        assert np.array_equal(np.isnan(arr), np.isnan(stream.per_prompt[name])), name
        assert_close(np.nan_to_num(stream.per_prompt[name]), np.nan_to_num(arr), "float32", msg=f"{family} {name}")


@pytest.mark.parametrize("family", ALIBI)
def test_streaming_is_refused_in_one_line_where_it_cannot_reach_the_attention(family, family_pair):
    model = family_pair(family)[0]
    with pytest.raises(UnsupportedModelError, match=f"streaming attention on {family}: layer 0") as info:
        run_census(model, CensusConfig(n_prompts=2, seq_len=9, window=21, batch_size=2, n_bootstrap=5, attention="streaming"))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_score_edits_take_effect(family, family_pair):
    backends = check_score_edits(family_pair(family)[0])
    assert set(backends) == set(range(family_pair(family)[0].n_layers))


def test_a_hook_the_bridge_never_fires_is_refused_not_captured_as_zeros(family_pair):
    model = family_pair("phi3")[0]  # its component declares hook_rot_q/hook_rot_k but never fires them
    spec = attention_spec(model)
    wrong = tuple(dataclasses.replace(la, rotary="hooks") for la in spec.layers)
    model.extra["attention_spec"] = dataclasses.replace(spec, layers=wrong)
    try:
        with pytest.raises(UnsupportedModelError, match=r"never fired blocks\.0\.attn\.hook_rot_q"):
            capture(model, TEXTS, CaptureConfig(what=("rot_q",)))
    finally:
        model.extra["attention_spec"] = spec


def test_a_length_dependent_rotary_is_warned_about(family_pair, caplog):
    model = family_pair("phi3-longrope")[0]
    spec = model.extra.pop("attention_spec", None)
    try:
        with caplog.at_level("WARNING", logger="headlens.probes.attention"):
            fresh = attention_spec(model)
        assert {la.rope_type for la in fresh.layers} == {"longrope"}
        assert "padded width changes every prompt's rotation" in caplog.text and "(32)" in caplog.text
    finally:
        if spec is not None:
            model.extra["attention_spec"] = spec
    # what the warning is about: the short prompt's pattern alone differs from the same prompt beside a long one
    alone = capture(model, [TEXTS[1]], CaptureConfig(what=("pattern",)))
    batched = capture(model, TEXTS, CaptureConfig(what=("pattern",)))
    n = int(alone.batch.lengths[0])
    assert float((alone.get(0, "pattern")[0, :, :n, :n] - batched.get(0, "pattern")[1, :, :n, :n]).abs().max()) > 1e-3
    assert {la.rope_type for la in attention_spec(family_pair("qwen3")[0]).layers} == {"default"}
