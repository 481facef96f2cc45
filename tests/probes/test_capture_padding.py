"""Padding never changes a result: every batched forward passes the attention mask.

A prompt captured in a right-padded batch of mixed lengths must give what it gives alone,
on causal decoders (where the causal mask already hides padded keys from real queries) and
on bidirectional encoders (where only the attention mask does).  Padded keys get exactly
zero attention and real pattern rows sum to 1.
"""

from __future__ import annotations

import math

import pytest
import torch

from headlens.analyses.sinks.intervene import mean_loss
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.capture import capture, run_forward, tokenize_for
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.hooks import attached
from headlens.probes.interventions import mask_keys, score_edits

#: Mixed lengths (a few tokens to ~25), so every batch is padded.
PROMPTS = [
    "The cat sat on the mat.",
    "A much longer sentence about river banks, the price targets of Apple and what the analyst said next.",
    "Hi there",
    "Down by the river bank the water was calm.",
]
WHAT = ("q", "k", "v", "pattern", "z")
#: Batched and one-by-one forwards run matrix products of other shapes (a prompt alone is a
#: 3-row GEMM, in a batch part of an 88-row one), whose float32 rounding differs: even layer
#: 0's q, before any attention, differs by ~1e-6 of its scale.  Measured, relative to the
#: tensor's largest entry (at least 1): patterns <= 2.1e-6, q/k/v <= 1e-6, z <= 3e-6 (tiny
#: checkpoints, whose wide weights make z ~5; MiniLM: patterns 1.1e-6, z 1.8e-6).  Attention
#: leaking onto padding moves MiniLM's patterns by ~0.8.
TOL = 1e-5


def _model(request, name):
    if name == "minilm":
        return request.getfixturevalue("minilm_model")
    return request.getfixturevalue("family_model")(name)


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    scale = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
    err = float((got - ref).abs().max()) if ref.numel() else 0.0
    assert err <= TOL * scale, f"{what}: batched differs from one-by-one by {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert", "minilm"])
def test_batched_equals_one_by_one(request, name):
    model = _model(request, name)
    batch = tokenize_for(model, PROMPTS, prepend_bos=True)
    assert len(set(batch.lengths.tolist())) == len(PROMPTS)  # mixed lengths: padding in every batch
    together = capture(model, batch, CaptureConfig(what=WHAT, batch_size=len(PROMPTS)))
    width = batch.tokens.shape[1]
    for i, text in enumerate(PROMPTS):
        alone = capture(model, [text], CaptureConfig(what=WHAT))
        n = int(batch.lengths[i])
        assert alone.batch.tokens[0].tolist() == batch.tokens[i, :n].tolist()
        for layer in range(model.n_layers):
            for what in WHAT:
                got, ref = together.get(layer, what)[i], alone.get(layer, what)[0]
                if what == "pattern":
                    _close(got[:, :n, :n], ref, what)
                    padded = got[:, :n, n:]
                    assert torch.equal(padded, torch.zeros_like(padded)), f"{name} layer {layer}: attention on padded keys"
                    assert float((got[:, :n].sum(-1) - 1).abs().max()) < 1e-5
                    assert n == width or float(got[:, n:].abs().max()) == 0.0  # padded queries zeroed
                else:
                    _close(got[:n], ref, what)


def test_without_the_mask_an_encoder_attends_to_padding(minilm_model):
    """What the mask prevents: without it, MiniLM's real tokens attend to padding."""
    model = minilm_model
    batch = tokenize_for(model, PROMPTS, prepend_bos=True)
    seen: dict[str, torch.Tensor] = {}

    def keep(act, hook=None):
        seen["p"] = act.detach().clone()

    i = int(batch.lengths.argmin())
    n = int(batch.lengths[i])
    with torch.inference_mode(), attached(model.bridge, [("blocks.0.attn.hook_pattern", keep)]):
        model.bridge(batch.tokens, return_type=None)
        leaky = seen["p"][i]
        run_forward(model, batch, return_type="logits")
        masked = seen["p"][i]
    assert float(leaky[:, :n, n:].sum(-1).max()) > 0.1
    assert float(masked[:, :n, n:].abs().max()) == 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_mask_reaches_the_attention_and_leaves_right_padded_causal_models_alone(family, family_model):
    """On every decoder family: with the mask, real positions are bit for bit what they are
    without it (right padding), and a masked key really gets no attention."""
    model = family_model(family)
    batch = tokenize_for(model, PROMPTS[:3], prepend_bos=True)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.n_layers)]
    runs: list[dict[str, torch.Tensor]] = []

    def forward(mask):
        store: dict[str, torch.Tensor] = {}

        def hook(name):
            return lambda act, hook=None: store.__setitem__(name, act.detach().clone())

        with torch.inference_mode(), attached(model.bridge, [(n, hook(n)) for n in names]):
            store["logits"] = run_forward(model, batch.tokens, attention_mask=mask, return_type="logits")
        runs.append(store)
        return store

    plain, masked = forward(None), forward(batch.attention_mask)
    for i, n in enumerate(batch.lengths.tolist()):
        assert torch.equal(plain["logits"][i, :n], masked["logits"][i, :n]), family
        for name in names:
            assert torch.equal(plain[name][i, :, :n, :n], masked[name][i, :, :n, :n]), f"{family} {name}"
    gap = batch.attention_mask.clone()
    gap[1, 1] = 0  # an interior key of the longest prompt, masked
    holed = forward(gap)
    n = int(batch.lengths[1])
    for name in names:
        assert float(holed[name][1, :, 2:n, 1].abs().max()) == 0.0, f"{family}: the attention mask did not reach {name}"


def test_token_batch_mask_helpers(family_model):
    model = family_model("gpt2")
    batch = tokenize_for(model, PROMPTS, prepend_bos=True)
    am = batch.attention_mask
    assert am.dtype == torch.long and am.shape == batch.tokens.shape
    assert am.sum(1).tolist() == batch.lengths.tolist()
    assert batch.framing == {"n_prefix": 1, "n_suffix": 0}
    assert batch.text_mask.sum(1).tolist() == (batch.lengths - 1).tolist()
    sub = batch.select([2, 0])
    assert (sub.n_prefix, sub.n_suffix) == (1, 0) and sub.attention_mask.shape == sub.tokens.shape


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_mean_loss_batched_equals_one_by_one(family, family_model):
    model = family_model(family)
    batch = tokenize_for(model, PROMPTS, prepend_bos=True)
    together, count = mean_loss(model, batch, batch_size=len(PROMPTS))
    total, n_total = 0.0, 0
    for i in range(len(PROMPTS)):
        loss, n = mean_loss(model, batch.select([i]))
        total, n_total = total + loss * n, n_total + n
    assert count == n_total == int((batch.lengths - 1).sum())
    assert math.isclose(together, total / n_total, rel_tol=0, abs_tol=1e-6)


def test_mean_loss_refuses_an_encoder(family_model):
    model = family_model("bert")
    with pytest.raises(UnsupportedModelError, match="bidirectional"):
        mean_loss(model, tokenize_for(model, PROMPTS[:2], prepend_bos=True))


@pytest.mark.parametrize("name", ["llama", "opt", "gpt_neo", "bert"])
def test_score_edits_compose_with_the_padding_mask(request, name):
    """An edit (key 1 masked for every query of every head) under a padded batch: the edited
    batch equals each prompt edited alone, padded keys still get 0, the masked key gets 0."""
    model = _model(request, name)
    batch = tokenize_for(model, PROMPTS, prepend_bos=True)

    def no_key_1(n_q, n_k, device):
        ok = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
        ok[1:, 1] = False  # query 0 keeps key 1 (a causal query 0 sees only key 0 and must keep one key)
        return ok

    config = CaptureConfig(what=("pattern", "z"), batch_size=len(PROMPTS))
    with score_edits(model, {layer: mask_keys(no_key_1) for layer in range(model.n_layers)}):
        together = capture(model, batch, config)
        alone = [capture(model, batch.select([i]), config) for i in range(len(PROMPTS))]
    for i, single in enumerate(alone):
        n = int(batch.lengths[i])
        for layer in range(model.n_layers):
            got = together.get(layer, "pattern")[i]
            _close(got[:, :n, :n], single.get(layer, "pattern")[0], "pattern")
            _close(together.get(layer, "z")[i, :n], single.get(layer, "z")[0], "z")
            assert float(got[:, 1:n, 1].abs().max()) == 0.0
            assert float(got[:, :n, n:].abs().max()) == 0.0 if n < got.shape[-1] else True
            assert float((got[:, :n].sum(-1) - 1).abs().max()) < 1e-5
