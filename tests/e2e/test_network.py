"""Checks against real GPT-2 small weights; skipped where they cannot be had."""

from __future__ import annotations

import pytest


def _gpt2_available() -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache("gpt2", "model.safetensors"), str)
    except Exception:  # noqa: BLE001 - any failure means "not available here"
        return False


@pytest.mark.network
@pytest.mark.skipif(not _gpt2_available(), reason="GPT-2 small weights are not in the local Hugging Face cache (offline machine)")
def test_gpt2_small_4_11_is_a_top_previous_token_head():
    import torch

    from headlens.probes.capture import capture
    from headlens.probes.config import CaptureConfig
    from headlens.probes.loading import load_model

    model = load_model(model="gpt2", device="auto")
    text = [
        "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
        "In 1905, Albert Einstein published four papers that changed physics for ever.",
    ]
    cap = capture(model, text, CaptureConfig(what=("pattern",), prepend_bos=False))
    scores = torch.zeros(model.n_layers, model.n_heads)
    for layer in range(model.n_layers):
        pat = cap.get(layer, "pattern").float()
        for i, n in enumerate(cap.lengths.tolist()):
            idx = torch.arange(1, n)
            scores[layer] += pat[i][:, idx, idx - 1].mean(-1)
    top = torch.topk(scores.flatten(), 5).indices.tolist()
    assert 4 * model.n_heads + 11 in top, f"top previous-token heads: {[divmod(t, model.n_heads) for t in top]}"
