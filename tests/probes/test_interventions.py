"""Score edits (probes.interventions) take effect on every family, match plain Hugging Face, or are refused.

The reference is computed without headlens: ``AutoModelForCausalLM`` in eager mode on the same
checkpoint and tokens, with the same edit expressed as a 4D additive attention mask built here
(causal, the family's own sliding window where Hugging Face builds it from the mask: Mistral,
Gemma2's sliding layer through Gemma2's per-layer-type mask dict; GPT-Neo applies its local
window inside its attention itself).
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import headlens.probes.edit_functions as edit_functions
import headlens.probes.interventions as interventions
from headlens.analyses.sinks.intervene import mean_loss, removal_edits, removal_hooks, window_edits, window_hooks
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.errors import InterventionError
from headlens.probes.interventions import score_edits
from headlens.probes.prompts import TokenBatch

PASS_THROUGH = ("gpt_neo", "opt", "gptj")
N_SEQ, WIDTH = 2, 40
WINDOW, KEEP_FIRST = 8, 1


@pytest.fixture(scope="module")
def tokens():
    gen = torch.Generator().manual_seed(1234)
    t = torch.randint(300, 20000, (N_SEQ, WIDTH), generator=gen)
    t[:, 0] = 50256
    return t


def _batch(tokens):
    return TokenBatch(
        tokens=tokens, lengths=torch.full((len(tokens),), tokens.shape[1]), strings=[[] for _ in tokens], prepend_bos=True, pad_id=0
    )


def _hf_mean_loss(hf, family, tokens, allowed):
    """Mean next-token loss of plain Hugging Face with keys outside ``allowed[q, k]`` masked in every head and layer."""
    b, n = tokens.shape
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    allowed = allowed & (j <= i)

    def additive(ok):
        return torch.zeros(n, n).masked_fill(~ok, torch.finfo(torch.float32).min).expand(b, 1, n, n)

    window = getattr(hf.config, "sliding_window", None)
    if family == "gemma2":
        assert window is not None, "gemma2 has a sliding window"
        mask = {"full_attention": additive(allowed), "sliding_attention": additive(allowed & (j > i - window))}
    elif family == "mistral":
        assert window is not None, "mistral has a sliding window"
        mask = additive(allowed & (j > i - window))
    else:
        mask = additive(allowed)
    with torch.inference_mode():
        logits = hf(tokens, attention_mask=mask, position_ids=torch.arange(n).expand(b, n)).logits
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="none")
    return float(loss.double().mean())


def _full(n):
    return torch.ones(n, n, dtype=torch.bool)


def _no_sink(n):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return ~((j == 0) & (i >= 1))


def _windowed(n, window, keep_first):
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j > i - window) | (j < keep_first)


def _state(model):
    """Everything a score edit may touch: hooks on every attention hook point, attention implementations, ``_attn``."""
    bridge = model.bridge
    hooks = {name: len(point.fwd_hooks) for name, point in bridge.hook_dict.items() if ".attn." in name}
    configs = [bridge.original_model.config] + [bridge.blocks[layer].attn.original_component.config for layer in range(model.n_layers)]
    impl = [c.__dict__.get("_attn_implementation_internal") for c in configs]
    own_attn = ["_attn" in bridge.blocks[layer].attn.original_component.__dict__ for layer in range(model.n_layers)]
    return hooks, impl, own_attn, dict(edit_functions.ACTIVE)


@pytest.mark.parametrize("family", FAMILIES)
def test_sink_removal_and_windowed_attention_match_plain_hugging_face(family, family_model, family_checkpoint, hf_eager, tokens):
    model, folder = family_model(family), family_checkpoint(family)
    batch = _batch(tokens)
    before = _state(model)
    base, n_tok = mean_loss(model, batch)
    removed, _ = mean_loss(model, batch, removal_edits({layer: range(model.n_heads) for layer in range(model.n_layers)}))
    windowed, _ = mean_loss(model, batch, window_edits(model.n_layers, WINDOW, KEEP_FIRST))
    assert n_tok == N_SEQ * (WIDTH - 1)
    assert _state(model) == before

    hf_base = _hf_mean_loss(hf_eager(folder), family, tokens, _full(WIDTH))
    hf_removed = _hf_mean_loss(hf_eager(folder), family, tokens, _no_sink(WIDTH))
    hf_windowed = _hf_mean_loss(hf_eager(folder), family, tokens, _windowed(WIDTH, WINDOW, KEEP_FIRST))
    tol = 1e-5 * max(1.0, abs(hf_base))
    for name, ours, theirs in (("base", base, hf_base), ("sink removal", removed, hf_removed), ("windowed", windowed, hf_windowed)):
        assert abs(ours - theirs) <= tol, f"{family} {name}: headlens {ours:.7f} vs Hugging Face {theirs:.7f}"
    for name, ours, theirs in (
        ("sink removal", removed - base, hf_removed - hf_base),
        ("windowed", windowed - base, hf_windowed - hf_base),
    ):
        assert abs(theirs) > 5 * tol, f"{family} {name}: the reference delta {theirs:.2e} is too small to tell"
        assert abs(ours - theirs) <= 2 * tol and abs(ours) > 5 * tol, f"{family} {name}: delta {ours:.3e} vs Hugging Face {theirs:.3e}"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_pattern_hook_shows_the_edited_pattern(family, family_model, tokens):
    model = family_model(family)
    seen = {}

    def grab(pattern, hook: Any = None):
        seen[hook.name] = pattern.detach().clone()

    from headlens.probes.hooks import attached

    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.n_layers)]
    with torch.inference_mode(), score_edits(model, removal_edits({0: [1, 2]})), attached(model.bridge, [(n, grab) for n in names]):
        model.bridge(tokens[:1, :12])
    edited = seen[names[0]]
    assert torch.all(edited[:, [1, 2], 1:, 0] == 0)
    assert torch.all(edited[:, [0, 3], 1:, 0] > 0)
    torch.testing.assert_close(edited.sum(-1), torch.ones_like(edited.sum(-1)))
    assert torch.all(seen[names[1]][:, :, 1:, 0] > 0)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_guard_refuses_an_edit_that_is_discarded(family, family_model, monkeypatch):
    """Every backend made to drop the edit (the tensor comes back unedited): refused, nothing left behind."""
    shared = family_model(family)
    model = dataclasses.replace(shared, extra={})  # same bridge, fresh probe verdicts
    before = _state(model)

    def drop(edit, scores, family, layer):
        return scores

    monkeypatch.setattr(interventions, "edited", drop)  # the hook backend
    monkeypatch.setattr(edit_functions, "edited", drop)  # headlens' attention functions
    with pytest.raises(InterventionError, match=rf"on {family}: refused for layer 0: .*unchanged"):
        with score_edits(model, removal_edits({0: [0]})):
            pytest.fail("the block must not run")
    assert _state(model) == before
    # the verdict is cached: refused again without a new probe
    monkeypatch.setattr(interventions, "_probe", lambda *a: pytest.fail("probed twice"))
    with pytest.raises(InterventionError):
        mean_loss(model, _batch(torch.full((1, 6), 300)), removal_edits({0: [0]}))


@pytest.mark.parametrize("family", PASS_THROUGH)
def test_hooks_on_post_hoc_scores_are_refused(family, family_model):
    """The old way (a hook on hook_attn_scores) on a family where the bridge fires it after the fact: refused, not 0."""
    shared = family_model(family)
    spec = interventions.attention_spec(shared)
    fake = dataclasses.replace(spec, layers=tuple(dataclasses.replace(layer, native=True) for layer in spec.layers))
    model = dataclasses.replace(shared, extra={"attention_spec": fake})
    with pytest.raises(InterventionError, match=rf"on {family}: .*unchanged"):
        with score_edits(model, removal_edits({1: [0, 1, 2, 3]})):
            pass
    assert not shared.bridge.hook_dict["blocks.1.attn.hook_attn_scores"].fwd_hooks

    def hook(scores, hook=None):
        return scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).tril(-1), float("-inf"))

    with pytest.raises(InterventionError, match=f"hook_attn_scores cannot change the output on {family}"):
        mean_loss(shared, _batch(torch.full((1, 6), 300)), [("blocks.0.attn.hook_attn_scores", hook)])


@pytest.mark.parametrize("family", ("opt", "gptj"))
def test_the_guard_refuses_when_hugging_face_never_calls_headlens(family, family_model, monkeypatch):
    model = dataclasses.replace(family_model(family), extra={})
    monkeypatch.setattr(interventions.hf_attention, "switched", lambda configs, name: nullcontext())
    with pytest.raises(InterventionError, match=rf"on {family}: .*never called"):
        with score_edits(model, window_edits(model.n_layers, 2, 0)):
            pass


@pytest.mark.parametrize("family", FAMILIES)
def test_everything_is_restored_after_an_exception(family, family_model, tokens):
    model = family_model(family)
    before = _state(model)
    with torch.inference_mode():
        base = model.bridge(tokens, return_type="loss")
    every = {layer: range(model.n_heads) for layer in range(model.n_layers)}
    with pytest.raises(RuntimeError, match="inside"):
        with score_edits(model, removal_edits(every)):
            with torch.inference_mode():
                edited = model.bridge(tokens, return_type="loss")
            assert not torch.equal(edited, base)
            raise RuntimeError("inside the block")
    assert _state(model) == before

    def broken(scores):
        raise ValueError("edit failed mid-forward")

    with pytest.raises(ValueError, match="mid-forward"):
        with torch.inference_mode(), score_edits(model, {1: broken}):
            model.bridge(tokens, return_type="loss")
    assert _state(model) == before
    with torch.inference_mode():
        assert torch.equal(model.bridge(tokens, return_type="loss"), base)


@pytest.mark.parametrize("family", ("llama", "gpt_neo", "opt"))
def test_nested_edits_compose(family, family_model, tokens):
    model = family_model(family)
    sink = removal_edits({layer: range(model.n_heads) for layer in range(model.n_layers)})
    window = window_edits(model.n_layers, WINDOW, 0)
    both = {layer: (lambda s, a=sink[layer], b=window[layer]: b(a(s))) for layer in range(model.n_layers)}
    with torch.inference_mode():
        with score_edits(model, both):
            expected = model.bridge(tokens, return_type="loss")
        with score_edits(model, sink), score_edits(model, window):
            nested = model.bridge(tokens, return_type="loss")
        with score_edits(model, sink):
            outer_only = model.bridge(tokens, return_type="loss")
    torch.testing.assert_close(nested, expected)
    assert not torch.equal(outer_only, expected)


def test_old_names_and_bad_input(family_model):
    from headlens.probes.errors import InputError

    model = family_model("opt")
    assert removal_hooks is removal_edits and window_hooks is window_edits
    with pytest.raises(InputError, match=r"layers 0\.\.1"):
        with score_edits(model, {2: lambda s: s}):
            pass
    with pytest.raises(InterventionError, match="returned"), torch.inference_mode(), score_edits(model, {0: lambda s: s[..., :1]}):
        model.bridge(torch.full((1, 4), 300))


@pytest.mark.parametrize("family", PASS_THROUGH)
def test_a_layer_no_backend_can_carry_is_refused_by_name(family, family_model, monkeypatch):
    """Attention code headlens can neither hook nor replace: refused, naming the family and the layer."""
    model = dataclasses.replace(family_model(family), extra={})
    monkeypatch.setattr(interventions, "_uses_interface", lambda module: False)
    monkeypatch.setattr(interventions, "_uses_attn_method", lambda module: False)
    with pytest.raises(InterventionError, match=rf"score edits on {family}: layer 1 \(\w+\) computes attention inside Hugging Face code"):
        with score_edits(model, {1: lambda s: s}):
            pass
