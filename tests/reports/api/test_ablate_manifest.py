"""The values an ablation's manifest names: ``unablated_value`` (the model as loaded) and
``masked_value`` (the mask's heads removed; every delta is measured from it), with the older key
``baseline_value`` kept equal to ``masked_value`` so that files written before it read the same."""

from __future__ import annotations

import json

import pytest

from headlens import ablate, load
from headlens.analyses.measure.masks import HeadMask
from headlens.reports.api.ablate import AblationResult

SMALL = {"n_windows": 2, "window": 16, "n_bootstrap": 0, "attribution": False}


def test_the_manifest_names_the_masked_value_beside_the_unablated_one(tiny_model, tmp_path):
    mask = HeadMask.from_heads([(0, 1)], n_layers=2, n_heads=4)
    res = ablate(tiny_model, heads=((1, 2),), mask=mask, **SMALL)
    info = res.manifest["ablation"]
    assert info["masked_value"] == info["baseline_value"] == res.masked_value
    assert info["unablated_value"] == res.unablated_value != res.masked_value
    assert res.masked_value == pytest.approx(float(res.table["value"].iloc[0] - res.table["delta"].iloc[0]), abs=1e-9)
    plain = ablate(tiny_model, heads=((1, 2),), **SMALL).manifest["ablation"]
    assert plain["masked_value"] == plain["unablated_value"]  # no mask: the two are one
    out = res.save(tmp_path / "abl.csv")
    written = json.loads((tmp_path / "abl.manifest.json").read_text())["ablation"]
    assert written["masked_value"] == written["baseline_value"] == res.masked_value
    back = load(out)
    assert isinstance(back, AblationResult) and back.masked_value == res.masked_value


def test_a_manifest_written_before_masked_value_still_reads(tiny_model, tmp_path):
    res = ablate(tiny_model, heads=((0, 0),), mask=HeadMask.from_heads([(1, 3)], n_layers=2, n_heads=4), **SMALL)
    res.save(tmp_path / "old.csv")
    path = tmp_path / "old.manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["ablation"]["masked_value"]
    path.write_text(json.dumps(manifest))
    back = load(tmp_path / "old.csv")
    assert isinstance(back, AblationResult) and back.masked_value == res.masked_value != back.unablated_value
