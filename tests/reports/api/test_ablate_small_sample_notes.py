"""Intervals over fewer than MIN_ITEMS items are flagged in what ablate and patch print and in their
manifests (:func:`headlens.analyses.measure.stats.small_sample_note`); the tables are unchanged by it."""

from __future__ import annotations

import pandas as pd

from headlens.reports.api.ablate import ablate
from headlens.reports.api.patch import patch

FEW, MANY = 4, 16


def _ablate(model, n_windows: int):
    return ablate(model, heads=((0, 0), (1, 2)), n_bootstrap=20, attribution=False, n_windows=n_windows, window=16)


def test_ablate_from_four_windows_says_its_intervals_are_rough(tiny_model):
    few, many = _ablate(tiny_model, FEW), _ablate(tiny_model, MANY)
    note = few.manifest["ablation"]["small_sample_note"]
    assert note.startswith(f"intervals from n={FEW} windows: a percentile bootstrap covers about ")
    assert note.endswith("not 95%: read them as rough")
    assert note in few.findings().warnings
    assert "small_sample_note" not in many.manifest["ablation"]
    assert not any("percentile bootstrap covers" in w for w in many.findings().warnings)
    assert list(few.table.columns) == list(many.table.columns) and (few.table["n"] == FEW).all()


def test_ablate_read_back_still_says_it(tiny_model, tmp_path):
    from headlens.reports.api.ablate import AblationResult

    few = _ablate(tiny_model, FEW)
    few.save(tmp_path / "a")
    back = AblationResult.from_folder(tmp_path / "a")
    assert back.findings().warnings == few.findings().warnings
    pd.testing.assert_frame_equal(back.table.reset_index(drop=True), few.table.reset_index(drop=True), check_dtype=False)


def test_patch_from_few_pairs_says_its_intervals_are_rough(planted_model):
    few = patch(planted_model, builtin="induction", n_pairs=FEW, n_resamples=20)
    many = patch(planted_model, builtin="induction", n_pairs=MANY, n_resamples=20)
    note = few.manifest["patching"]["small_sample_note"]
    assert note.startswith(f"intervals from n={FEW} pairs: ")
    assert note in few.findings().warnings
    assert "small_sample_note" not in many.manifest["patching"]
    assert not any("percentile bootstrap covers" in w for w in many.findings().warnings)
