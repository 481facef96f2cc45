"""``result.save(d); headlens.load(d)`` gives back the same tables, value for value and dtype for
dtype, for every study's Result on the demo model (issue 28 item 8: CSVs were written with
``%.6g``, 4.7e-6 off; ``dla`` had float layer/head columns; a head name "1.0" came back a float)."""

from __future__ import annotations

import pandas as pd
import pytest

import headlens
from headlens.analyses.demo import MODEL_DIR
from headlens.reports.api.result import read_csv_table
from headlens.reports.render.tables import write_table
from tests.helpers import figure_formats
from tests.reports.api.conftest import BUILTIN, SMALL, tables_saved

pytestmark = pytest.mark.skipif(not (MODEL_DIR / "model.safetensors").is_file(), reason="the demo checkpoint is not shipped in this tree")


@pytest.fixture(scope="module")
def demo(demo_model):
    return demo_model  # loaded once per session (tests/conftest.py)


#: Small runs: the round trip is under test, not the statistics.  These are the runs test_schema.py
#: checks too (census; sinks with every part on; ablate; prune; patch with path patching, attribution,
#: DLA and both directions; kv; verify): each is run, saved and read back once for both
#: (``demo_saved``, tests/reports/api/conftest.py).
SHARED = ("census", "sinks", "ablate", "prune", "patch", "kv", "verify")


def _studies(demo):
    yield "capture", lambda: headlens.capture(demo, prompts="The cat sat on the mat. The cat sat on the mat.", what=("q", "pattern"))
    yield "gqa", lambda: headlens.gqa(demo, **SMALL, **BUILTIN)


STUDIES = ["census", "sinks", "ablate", "prune", "patch", "capture", "kv", "gqa", "verify"]


@pytest.mark.parametrize("name", STUDIES)
def test_every_result_round_trips_exactly(demo, demo_saved, tmp_path, name):
    if name in SHARED:
        result, back = demo_saved(name)
    else:
        result = dict(_studies(demo))[name]()
        back = headlens.load(tables_saved(result, tmp_path / name))  # the figures made, none rendered or written
    assert set(back.tables) == set(result.tables)
    for table, df in result.tables.items():
        got = back.tables[table]
        assert dict(got.dtypes) == dict(df.dtypes), (table, got.dtypes, df.dtypes)
        assert got.equals(df), (table, got.compare(df) if got.shape == df.shape else got.shape)


def test_dla_layer_and_head_are_integers_at_the_source(demo_study):
    result = demo_study("patch")  # the shared patch run (dla=True), before any save
    dla = result.dla
    assert dla is not None
    for column in ("layer", "head"):
        assert pd.api.types.is_integer_dtype(dla[column]), dla.dtypes


def test_a_float_survives_the_csv_exactly_and_text_stays_text(tmp_path):
    df = pd.DataFrame({"name": ["1.0", "1.10", ""], "value": [4.7e-6 + 1 / 3, 0.1 + 0.2, float("nan")], "n": [1, 2, 3]})
    write_table(df, tmp_path / "t.csv")
    back = read_csv_table(tmp_path / "t.csv")
    assert back["value"].equals(df["value"]) and back["n"].equals(df["n"])
    assert back["name"].tolist() == ["1.0", "1.10", ""]


def test_a_report_read_back_keeps_the_ablation_table_exactly(demo, tmp_path):
    """The quick report's zero ablation, read back from its folder, is the study's table value for value."""
    skip = ("census", "evidence", "sinks", "ablation_mean", "pruning", "examples", "design")
    with figure_formats(()):  # its figures made, none rendered or written: the table is read back
        headlens.report(demo, out_dir=tmp_path / "r", quick=True, skip=skip)
    read = headlens.load_report(tmp_path / "r").ablation_zero
    fresh = headlens.ablate(demo, n_windows=2, window=32, n_bootstrap=200, attribution=False).table
    assert read is not None and fresh is not None
    assert read.equals(fresh), (read, fresh.dtypes)


#: Studies whose Result carries its analysis' typed run (issue 47 item 3), each with the run's config and
#: tables by name: read back, the run is rebuilt from the tables and the manifest.
RUN_PARTS = {
    "patch": lambda run: (run.config, run.tables),
    "ablate": lambda run: (run.config, {"ablation": run.table}),
    "prune": lambda run: (run.config, {"curve": run.curve, "random_orders": run.random, "importance": run.importance}),
    "census": lambda run: (run.census.config, run.tables),
    "kv": lambda run: (run.config, {"kv": run.table}),
}


@pytest.mark.parametrize("name", list(RUN_PARTS))
def test_a_loaded_result_rebuilds_its_run(demo_saved, name):
    """Saved and loaded, the result's run has the config it ran with, its tables are the result's (the saved
    dtypes restored in both) and it words the same findings."""
    result, back = demo_saved(name)
    config, tables = RUN_PARTS[name](back.run)
    assert config == RUN_PARTS[name](result.run)[0]
    assert set(tables) == set(back.tables) == set(result.tables)
    assert all(tables[t] is back.tables[t] for t in back.tables)
    assert back.findings() == result.findings() and back.findings().lines
