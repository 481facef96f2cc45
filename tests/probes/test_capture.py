"""Capture matches an independent Hugging Face eager forward, prompt by prompt."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from headlens.probes.capture import capture
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import InputError
from headlens.probes.hooks import attached
from tests.helpers import assert_close

PROMPTS = [
    "Apple raised its price target.",
    "Down by the river bank, the water was calm and the boats were still.",
    "Hi",
]


def hf_reference(checkpoint, tokens: list[int]):
    """q, k, v, z [pos, head, d] and pattern [head, q, k] per layer, from a plain HF eager forward."""
    from transformers import GPT2LMHeadModel

    model: Any = GPT2LMHeadModel.from_pretrained(str(checkpoint), attn_implementation="eager").eval()  # submodules by name
    cfg = model.config
    n_head, d_head = cfg.n_head, cfg.n_embd // cfg.n_head
    store: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for layer, block in enumerate(model.transformer.h):

        def qkv_hook(mod, inp, out, layer=layer):
            q, k, v = out[0].split(cfg.n_embd, dim=-1)
            for name, t in zip("qkv", (q, k, v), strict=True):
                store[(layer, name)] = t.reshape(t.shape[0], n_head, d_head)

        def z_hook(mod, inp, layer=layer):
            store[(layer, "z")] = inp[0][0].reshape(-1, n_head, d_head)

        handles.append(block.attn.c_attn.register_forward_hook(qkv_hook))
        handles.append(block.attn.c_proj.register_forward_pre_hook(z_hook))
    with torch.no_grad():
        out = model(torch.tensor([tokens]), output_attentions=True)
    for h in handles:
        h.remove()
    for layer, att in enumerate(out.attentions):
        store[(layer, "pattern")] = att[0]
    return store


@pytest.mark.parametrize("prepend_bos", [True, False])
def test_capture_matches_hf_eager_prompt_by_prompt(tiny_model, tiny_checkpoint, prepend_bos):
    cap = capture(tiny_model, PROMPTS, CaptureConfig(what=("q", "k", "v", "pattern", "z"), prepend_bos=prepend_bos, batch_size=2))
    assert len(cap.batch) == 3
    for i in range(3):
        n = int(cap.lengths[i])
        ids = cap.batch.tokens[i, :n].tolist()
        assert (ids[0] == 50256) == prepend_bos
        ref = hf_reference(tiny_checkpoint, ids)
        for layer in range(tiny_model.n_layers):
            for what in ("q", "k", "v", "z"):
                got = cap.get(layer, what)[i]
                assert_close(got[:n], ref[(layer, what)], "reference", f"prompt {i} layer {layer} {what}")
                assert torch.count_nonzero(got[n:]) == 0, "padding leaked"
            pat = cap.get(layer, "pattern")[i]
            assert_close(pat[:, :n, :n], ref[(layer, "pattern")], "reference", f"prompt {i} layer {layer} pattern")
            assert torch.count_nonzero(pat[:, n:, :]) == 0 and torch.count_nonzero(pat[:, :, n:]) == 0


def test_heads_and_layers_selection(tiny_model):
    full = capture(tiny_model, PROMPTS[:2], CaptureConfig(what=("q", "pattern")))
    part = capture(tiny_model, PROMPTS[:2], CaptureConfig(what=("q", "pattern"), heads=((1, 3), (1, 1))))
    assert list(part.heads) == [1] and part.heads[1] == [1, 3]
    assert set(part.tensors) == {"blocks.1.attn.hook_q", "blocks.1.attn.hook_pattern"}
    assert part.get(1, "q").shape == (2, full.get(1, "q").shape[1], 2, tiny_model.d_head)
    assert_close(part.get(1, "q"), full.get(1, "q")[:, :, [1, 3]], "exact")
    assert_close(part.get(1, "pattern"), full.get(1, "pattern")[:, [1, 3]], "exact")
    only0 = capture(tiny_model, PROMPTS[:1], CaptureConfig(what=("k",), layers=(0,)))
    assert list(only0.tensors) == ["blocks.0.attn.hook_k"]


def test_batch_size_does_not_change_results(tiny_model):
    a = capture(tiny_model, PROMPTS, CaptureConfig(what=("pattern", "v"), batch_size=1))
    b = capture(tiny_model, PROMPTS, CaptureConfig(what=("pattern", "v"), batch_size=3))
    for name in a.tensors:
        assert_close(a.tensors[name], b.tensors[name], "float32", name)


@pytest.mark.parametrize(
    "config, message",
    [
        (CaptureConfig(layers=(2,)), "layers 0..1"),
        (CaptureConfig(heads=((0, 4),)), "heads 0..3"),
        (CaptureConfig(what=("q", "attention")), "cannot capture attention"),
    ],
)
def test_out_of_range_selection_names_valid_range(tiny_model, config, message):
    with pytest.raises(InputError, match=message):
        capture(tiny_model, PROMPTS[:1], config)


def test_long_prompt_needs_truncate(tiny_model):
    long = "word " * 200
    with pytest.raises(InputError, match="longer than the model's context of 128"):
        capture(tiny_model, [long], CaptureConfig(what=("pattern",)))
    cap = capture(tiny_model, [long], CaptureConfig(what=("pattern",), truncate=True))
    assert int(cap.lengths[0]) == 128


def test_hooks_removed_even_on_error_and_others_kept(tiny_model):
    bridge = tiny_model.bridge
    point = bridge.hook_dict["blocks.0.attn.hook_pattern"]
    theirs = point.add_hook(lambda t, hook: None)
    before = len(point.fwd_hooks)

    def boom(t, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        with attached(bridge, [("blocks.0.attn.hook_pattern", boom), ("blocks.1.attn.hook_q", lambda t, hook: None)]):
            assert len(point.fwd_hooks) == before + 1
            bridge(torch.tensor([[1, 2, 3]]))
    assert len(point.fwd_hooks) == before
    assert len(bridge.hook_dict["blocks.1.attn.hook_q"].fwd_hooks) == 0
    assert any(h is theirs for h in point.fwd_hooks)
    theirs.hook.remove()
    point.fwd_hooks.remove(theirs)
    assert len(point._forward_hooks) == 0


def test_unknown_hook_name_is_input_error(tiny_model):
    with pytest.raises(InputError, match="no hook point"):
        with attached(tiny_model.bridge, [("blocks.0.attn.hook_patern", lambda t, hook: None)]):
            pass
