"""Projection knockouts continued from the intact pass's residuals (issue 23 item 4) give the
losses of one full forward per knockout."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from headlens.analyses.design import projections as projections_mod
from headlens.analyses.design.projections import ProjectionConfig, run_knockouts
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.measure.records import MemoryJournal
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
    starts = _starts(monkeypatch)
    fast = run_knockouts(deep_model, data, ProjectionConfig(batch_size=2))
    assert sorted(set(starts) - {0}) == [1, 2, 3]  # every knockout of layers 1.. continued from its layer
    starts.clear()
    naive = run_knockouts(deep_model, data, ProjectionConfig(batch_size=2, prefix_reuse=False))
    assert set(starts) == {0}  # every forward whole
    assert fast[["layer", "head", "kind"]].equals(naive[["layer", "head", "kind"]])
    assert (fast["loss"] - naive["loss"]).abs().max() <= LOSS_TOL
    assert (fast["loss_change"] - naive["loss_change"]).abs().max() <= LOSS_TOL
    assert (fast["loss_change"].iloc[1:] != 0).all() and fast["loss_change"].abs().max() > 1e-3  # every knockout did something

    # resumed after the intact pass and two knockouts: the intact pass runs again for its residuals
    cfg = ProjectionConfig(batch_size=2)
    whole = run_knockouts(deep_model, data, cfg, journal=MemoryJournal())
    journal = MemoryJournal()
    run_knockouts(deep_model, data, cfg, journal=journal)
    partial = MemoryJournal(journal.records[:3])
    resumed = run_knockouts(deep_model, data, cfg, journal=partial)
    assert resumed.equals(whole)


def test_knockouts_run_whole_forwards_when_the_residuals_would_not_fit(deep_model, monkeypatch):
    """The intact pass's residuals are kept only under the cache budget (a large model on a GPU would run out)."""
    data = text_eval_set(deep_model.tokenizer, eval_text(), n_windows=2, window=16, prepend_bos=True, n_ctx=deep_model.n_ctx)
    starts = _starts(monkeypatch)
    monkeypatch.setattr(projections_mod, "MAX_CACHE_BYTES", 1)
    over = run_knockouts(deep_model, data, ProjectionConfig(batch_size=2))
    assert set(starts) == {0}
    monkeypatch.undo()
    naive = run_knockouts(deep_model, data, ProjectionConfig(batch_size=2, prefix_reuse=False))
    assert (over["loss"] - naive["loss"]).abs().max() <= LOSS_TOL


# --------------------------------------------------------------------------- knockout censuses from the knocked layer

from headlens.analyses.design.projections import knockout_roles  # noqa: E402
from headlens.analyses.heads import census as census_mod  # noqa: E402
from headlens.analyses.heads.census import CensusConfig, run_census  # noqa: E402
from headlens.analyses.heads.prefix import CensusPrefix  # noqa: E402
from headlens.probes import patch as patch_mod  # noqa: E402

CENSUS = CensusConfig(n_prompts=6, n_bootstrap=50, batch_size=4, seq_len=10, window=16)


def _starts(monkeypatch) -> list[int]:
    """The first block each forward ran (0: the whole model): every forward goes through the patch primitive's cut."""
    seen: list[int] = []
    real = patch_mod._from_layer

    def spy(model, layer):
        seen.append(layer)
        return real(model, layer)

    monkeypatch.setattr(patch_mod, "_from_layer", spy)
    return seen


def test_knockout_censuses_from_the_knocked_layer_equal_full_censuses(deep_model, monkeypatch):
    """Every census under a knockout of layer L runs blocks L.. only, and its scores (intervals,
    baselines, n) equal a full census under the same knockout exactly."""
    starts = _starts(monkeypatch)
    cfg = ProjectionConfig(kinds=("q=k", "v=k"))
    fast_changes, fast = knockout_roles(deep_model, CENSUS, cfg)
    assert set(starts) == {0, 1, 2, 3} and starts.count(3) > 0  # the intact census and layer 0 whole; layers 1.. continued
    starts.clear()
    slow_changes, slow = knockout_roles(deep_model, CENSUS, replace(cfg, prefix_reuse=False))
    assert set(starts) == {0}
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    pd.testing.assert_frame_equal(fast_changes, slow_changes, check_exact=True)
    # the knockouts changed scores of their own layer and later, and nothing before it
    base = fast[fast["kind"] == "none"].set_index(["detector", "layer", "head"])["score"]
    for layer in (1, 2):
        knocked = fast[(fast["knocked_layer"] == layer) & (fast["kind"] == "q=k")].set_index(["detector", "layer", "head"])["score"]
        diff = (knocked - base).abs()
        assert diff[diff.index.get_level_values("layer") < layer].max() == 0
        assert diff[diff.index.get_level_values("layer") >= layer].max() > 1e-4


def test_census_prefix_falls_back_to_whole_censuses(deep_model, monkeypatch):
    """No kept streams when they would not fit or the census streams: every census runs whole, same table."""
    monkeypatch.setattr(census_mod, "MAX_CACHE_BYTES", 1)
    prefix = CensusPrefix(layers=(2,))
    intact = run_census(deep_model, CENSUS, prefix=prefix)
    assert prefix.why_not is not None and "GiB" in prefix.why_not and not prefix.resid
    starts = _starts(monkeypatch)
    again = run_census(deep_model, CENSUS, prefix=prefix.starting_at(2))
    assert starts and set(starts) == {0}
    pd.testing.assert_frame_equal(intact.scores, again.scores, check_exact=True)
    streaming = CensusPrefix(layers=(2,))
    run_census(deep_model, replace(CENSUS, attention="streaming"), prefix=streaming)
    assert streaming.why_not is not None and "streams" in streaming.why_not
    with pytest.raises(ValueError, match="settings"):
        run_census(deep_model, replace(CENSUS, n_prompts=5), prefix=prefix.starting_at(2))
