"""Projection knockouts continued from the intact pass's residuals (issue 23 item 4) give the
losses of one full forward per knockout."""

from __future__ import annotations

import pytest

from headlens.analyses.ablation.evalset import text_eval_set
from headlens.analyses.ablation.records import MemoryJournal
from headlens.analyses.design import projections as projections_mod
from headlens.analyses.design.projections import ProjectionConfig, knockout_losses
from headlens.analyses.stimuli import eval_text

#: The same blocks continued from a stored residual: float rounding only.
LOSS_TOL = 1e-6


@pytest.fixture(scope="module")
def deep_model(tmp_path_factory):
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint
    from headlens.probes.loading import load_model

    path = build_tiny_checkpoint(tmp_path_factory.mktemp("deep"), TinySpec(n_layer=4, n_head=3, d_model=48, n_ctx=64, seed=1))
    return load_model(model=str(path), device="cpu")


def test_knockout_losses_from_the_knocked_layer_equal_full_forwards(deep_model, monkeypatch):
    data = text_eval_set(deep_model.tokenizer, eval_text(), n_windows=3, window=16, prepend_bos=True, n_ctx=deep_model.n_ctx)
    starts = []
    real = projections_mod.run_from_layer
    monkeypatch.setattr(
        projections_mod, "run_from_layer", lambda m, t, r, layer, hooks: starts.append(layer) or real(m, t, r, layer, hooks)
    )
    fast = knockout_losses(deep_model, data, ProjectionConfig(batch_size=2))
    assert sorted(set(starts)) == [1, 2, 3]  # every knockout of layers 1.. continued from its layer
    starts.clear()
    naive = knockout_losses(deep_model, data, ProjectionConfig(batch_size=2, prefix_reuse=False))
    assert starts == []
    assert fast[["layer", "head", "kind"]].equals(naive[["layer", "head", "kind"]])
    assert (fast["loss"] - naive["loss"]).abs().max() <= LOSS_TOL
    assert (fast["loss_change"] - naive["loss_change"]).abs().max() <= LOSS_TOL
    assert (fast["loss_change"].iloc[1:] != 0).all() and fast["loss_change"].abs().max() > 1e-3  # every knockout did something

    # resumed after the intact pass and two knockouts: the intact pass runs again for its residuals
    cfg = ProjectionConfig(batch_size=2)
    whole = knockout_losses(deep_model, data, cfg, journal=MemoryJournal())
    journal = MemoryJournal()
    knockout_losses(deep_model, data, cfg, journal=journal)
    partial = MemoryJournal(journal.records[:3])
    resumed = knockout_losses(deep_model, data, cfg, journal=partial)
    assert resumed.equals(whole)


def test_knockouts_run_whole_forwards_when_the_residuals_would_not_fit(deep_model, monkeypatch):
    """The intact pass's residuals are kept only under the cache budget (a large model on a GPU would run out)."""
    data = text_eval_set(deep_model.tokenizer, eval_text(), n_windows=2, window=16, prepend_bos=True, n_ctx=deep_model.n_ctx)
    starts = []
    real = projections_mod.run_from_layer
    monkeypatch.setattr(
        projections_mod, "run_from_layer", lambda m, t, r, layer, hooks: starts.append(layer) or real(m, t, r, layer, hooks)
    )
    monkeypatch.setattr(projections_mod, "MAX_CACHE_BYTES", 1)
    over = knockout_losses(deep_model, data, ProjectionConfig(batch_size=2))
    assert starts == []
    monkeypatch.undo()
    naive = knockout_losses(deep_model, data, ProjectionConfig(batch_size=2, prefix_reuse=False))
    assert (over["loss"] - naive["loss"]).abs().max() <= LOSS_TOL
