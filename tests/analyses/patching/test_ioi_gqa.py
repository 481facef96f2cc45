"""Review: under grouped-query attention the induction/duplicate-token paths into the S-inhibition heads' values patch
each receiver's whole key-value head; the run says which key-value heads and which query heads they include."""

from __future__ import annotations

import pandas as pd

import headlens
import headlens.analyses.patching.ioi as ioi


def test_feed_paths_under_gqa_name_the_shared_value_heads(family_model, monkeypatch):
    model = family_model("llama")
    g = model.kv_group
    assert g > 1 and model.n_layers >= 2  # the fixture is GQA
    note = ioi._feed_gqa(model, [(1, 0)], pd.DataFrame())["feed_path_gqa"]
    assert f"a value is shared by {g} query heads: 1 key-value heads patched (1:kv0, query heads 1.0-1.{g - 1})" in note
    assert f"so the values of {', '.join(f'1.{h}' for h in range(1, g))} too" in note
    assert ioi._feed_gqa(model, [(1, 0)], None) == {} and ioi._feed_gqa(family_model("gpt2"), [(1, 0)], pd.DataFrame()) == {}
    monkeypatch.setattr(ioi, "_heads_of", lambda mask, table: [(1, 0)])  # a name mover and an S-inhibition head at 1.0
    result = headlens.ioi(model, n_pairs=4, n_resamples=10)
    assert result.manifest["ioi"]["feed_path_gqa"] == note
    assert note in result.findings().warnings
