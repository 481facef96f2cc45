"""Forwards continued from a later block on models whose layers alternate sliding and full
attention: Hugging Face picks each layer's mask by its place in the loop (``config.layer_types[i]``),
so a cut list must carry the cut types, and the check must try every block a caller starts from.

On a 3-layer Gemma-2 (sliding, full, sliding; windows longer than the 16-key slide) the old check,
of the last block only, passed while a cut at block 1 ran it with a sliding mask: ablation deltas
0.017 nats off, printed calmly."""

from __future__ import annotations

import contextlib

import pytest

from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.stimuli.natural import eval_text
from headlens.analyses.synthetic.families import WINDOW, build_family_checkpoint
from headlens.probes import patch as patch_mod
from headlens.probes.loading import load_model
from headlens.probes.patch import check_start

#: The same blocks continued from a stored residual: float rounding only.
TOL = 1e-6


@pytest.fixture(scope="module")
def gemma2_odd(tmp_path_factory):
    path = build_family_checkpoint(tmp_path_factory.mktemp("gemma2-3"), "gemma2", n_layers=3)
    return load_model(model=str(path), device="cpu")


def _data(model):
    data = text_eval_set(
        model.tokenizer, eval_text(), n_windows=2, window=2 * WINDOW + 8, prepend_bos=True, n_ctx=model.n_ctx, bos_id=model.bos_id
    )
    assert int(data.lengths.max()) > WINDOW  # the sliding window matters on these windows
    return data


def test_cuts_carry_the_layer_types_and_the_table_equals_full_forwards(gemma2_odd):
    data = _data(gemma2_odd)
    assert gemma2_odd.bridge.original_model.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    assert check_start(gemma2_odd, data.longest()[0], [1, 2])
    fast = run_ablation(gemma2_odd, data, AblationConfig(attribution=False, n_bootstrap=0))
    slow = run_ablation(gemma2_odd, data, AblationConfig(attribution=False, n_bootstrap=0, prefix_reuse=False))
    assert fast.info["prefix_reuse"] is True
    assert (fast.table["value"] - slow.table["value"]).abs().max() <= TOL
    assert gemma2_odd.bridge.original_model.config.layer_types[1] == "full_attention"  # restored after every cut


def test_a_cut_wrong_at_one_block_is_refused_everywhere(gemma2_odd, monkeypatch):
    """With the types left uncut (as before the fix), block 2 still matches (sliding like block 0)
    but block 1 does not: checking the last block alone would pass."""
    monkeypatch.setattr(patch_mod, "_layer_types_from", lambda model, layer, n: contextlib.nullcontext())
    data = _data(gemma2_odd)
    tokens = data.longest()[0]
    assert check_start(gemma2_odd, tokens, 2)
    assert not check_start(gemma2_odd, tokens, 1)
    assert not check_start(gemma2_odd, tokens, [1, 2])
    fast = run_ablation(gemma2_odd, data, AblationConfig(attribution=False, n_bootstrap=0))
    slow = run_ablation(gemma2_odd, data, AblationConfig(attribution=False, n_bootstrap=0, prefix_reuse=False))
    assert fast.info["prefix_reuse"] is False
    assert (fast.table["value"] - slow.table["value"]).abs().max() <= TOL
