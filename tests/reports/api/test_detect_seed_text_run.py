"""``DetectResult`` and ``SeedTextResult`` carry their typed runs (issue 47 item 3): saved and read back, the run
has the settings it ran with, its table is the result's (dtypes restored in both) and it words the same findings."""

from __future__ import annotations

import pandas as pd
import pytest

import headlens
from headlens.analyses.demo import MODEL_DIR
from headlens.reports.api.census import DetectResult
from headlens.reports.api.sinks import SeedTextResult, seed_text
from tests.reports.api.conftest import tables_saved

pytestmark = pytest.mark.skipif(not (MODEL_DIR / "model.safetensors").is_file(), reason="the demo checkpoint is not shipped in this tree")


def test_a_loaded_detect_result_rebuilds_its_run(demo_study, tmp_path):
    """The shared census's scores (n_prompts=8, n_bootstrap=20: not the defaults) as ``headlens detect`` writes them."""
    result = DetectResult.of_census(demo_study("census"))
    back = headlens.load(tables_saved(result, tmp_path / "scores.csv"))
    assert isinstance(back, DetectResult)
    assert back.run.config == result.run.config and back.run.config.n_prompts == 8
    assert back.run.scores is back.table and set(back.tables) == {"scores"}
    pd.testing.assert_frame_equal(back.table, result.table)
    assert back.findings() == result.findings() and back.findings().lines


def test_a_loaded_seed_text_result_rebuilds_its_run(demo_model, tmp_path):
    """One BOS setting and seed 3 (not the defaults): the text, settings and seed come back from the manifest."""
    result = seed_text(demo_model, "The cat sat on the mat.", bos=(True,), seed=3)
    back = headlens.load(tables_saved(result, tmp_path / "st"))
    assert isinstance(back, SeedTextResult)
    assert (back.run.text, back.run.bos, back.run.seed) == ("The cat sat on the mat.", (True,), 3)
    assert back.run.table is back.table and set(back.tables) == {"seed_text"}
    pd.testing.assert_frame_equal(back.table, result.table)
    assert back.findings() == result.findings() and back.findings().lines
