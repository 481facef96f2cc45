"""The column schema (headlens.reports.api.schema) says what every Result's tables hold: every kind has
one, it names the columns the analyses build (their *_COLUMNS lists), and every table that every study
builds on the demo model has exactly its columns, in its order, with its dtypes.  The comparison itself
is proven to find each kind of difference."""

from __future__ import annotations

from typing import Any

import pytest

import headlens
from headlens.analyses.ablation.pruning import CURVE_COLUMNS
from headlens.analyses.circuits.composition import COMPOSITION_COLUMNS, COPYING_COLUMNS
from headlens.analyses.circuits.faithfulness import FAITHFULNESS_COLUMNS
from headlens.analyses.circuits.graph import EDGE_COLUMNS
from headlens.analyses.circuits.heldout import HELD_OUT_COLUMNS
from headlens.analyses.demo import MODEL_DIR
from headlens.analyses.design.gqa import COMPARISON_COLUMNS, SUMMARY_COLUMNS
from headlens.analyses.design.kv import KV_COLUMNS
from headlens.analyses.design.projections import LOSS_COLUMNS, ROLE_CHANGE_COLUMNS
from headlens.analyses.heads.census import SCORE_COLUMNS
from headlens.analyses.heads.classify import ROLE_COLUMNS
from headlens.analyses.heads.detectors.referent import REFERENT_COLUMNS
from headlens.analyses.measure.evalset import TaskItem
from headlens.analyses.patching.activation import PATCH_COLUMNS
from headlens.analyses.patching.attribution import ATTRIBUTION_COLUMNS
from headlens.analyses.patching.dla import DLA_COLUMNS
from headlens.analyses.patching.evidence import EVIDENCE_COLUMNS
from headlens.analyses.patching.path import PATH_COLUMNS
from headlens.analyses.sinks.lengths import LENGTH_COLUMNS
from headlens.analyses.sinks.seed import run_seed_text
from headlens.reports.api.ablate import ABLATION_COLUMNS
from headlens.reports.api.census import DetectResult
from headlens.reports.api.result import RESULT_KINDS
from headlens.reports.api.schema import DTYPES, SCHEMAS, Column, mismatches, schema_of
from headlens.reports.api.sinks import SeedTextResult
from tests.reports.api.conftest import BUILTIN, SMALL, tables_saved

demo_only = pytest.mark.skipif(not (MODEL_DIR / "model.safetensors").is_file(), reason="the demo checkpoint is not shipped in this tree")


def test_every_result_kind_has_a_schema_and_every_column_a_meaning():
    import headlens.reports.api.registry  # registers every study's Result kinds

    ours = {kind for kind, cls in RESULT_KINDS.items() if cls.__module__.startswith("headlens.")}  # not a test's own kinds
    assert ours == set(SCHEMAS)
    for kind, tables in SCHEMAS.items():
        assert tables, kind
        for name, spec in tables.items():
            assert spec.name == name and spec.file and spec.row, (kind, name)
            for c in spec.columns:
                assert c.dtype in DTYPES and len(c.meaning) > 14, (kind, name, c)
    assert headlens.CensusResult.schema() is SCHEMAS["census"]


@pytest.mark.parametrize(
    ("kind", "table", "columns"),
    [
        ("census", "scores", SCORE_COLUMNS + REFERENT_COLUMNS),
        ("census", "roles", ROLE_COLUMNS),
        ("census", "evidence", EVIDENCE_COLUMNS),
        ("ablation", "ablation", ABLATION_COLUMNS),  # the study adds name to the analysis's TABLE_COLUMNS
        ("pruning", "curve", CURVE_COLUMNS),
        ("patching", "patching", PATCH_COLUMNS + ATTRIBUTION_COLUMNS[3:]),
        ("patching", "path_patching", PATH_COLUMNS),
        ("patching", "dla", DLA_COLUMNS),
        ("circuit", "faithfulness", FAITHFULNESS_COLUMNS + HELD_OUT_COLUMNS),
        ("composition", "composition", COMPOSITION_COLUMNS),
        ("composition", "copying", COPYING_COLUMNS),
        ("kv", "kv", KV_COLUMNS),
        ("gqa", "summary", SUMMARY_COLUMNS),
        ("gqa", "comparison", COMPARISON_COLUMNS),
        ("projections", "losses", LOSS_COLUMNS),
        ("projections", "role_changes", ROLE_CHANGE_COLUMNS),
        ("sink_lengths", "sink_lengths", [*LENGTH_COLUMNS, "bos"]),
    ],
)
def test_the_schema_names_the_columns_the_analyses_build(kind, table, columns):
    assert [c for c in schema_of(kind)[table].names if c in set(columns)] == list(columns)
    assert set(columns) == set(schema_of(kind)[table].names)


def test_the_edge_table_starts_with_the_graphs_columns():
    names = schema_of("circuit")["edges"].names
    assert names[1 : 1 + len(EDGE_COLUMNS)] == EDGE_COLUMNS


def test_the_comparison_finds_every_kind_of_difference():
    good = {c.name: c.dtype for c in schema_of("ablation")["ablation"].columns}
    assert mismatches("ablation", {"ablation": good}) == []
    bad: dict[str, Any] = {
        "ablation": {**{k: v for k, v in good.items() if k != "delta"}, "value": "int64", "extra": "float64"},
        "nope": {"layer": "int64"},
    }
    found = mismatches("ablation", bad)
    assert "ablation.ablation: column 'extra' is not in the schema" in found
    assert "ablation.ablation: required column 'delta' is missing" in found
    assert "ablation.ablation.value: dtype int64 but the schema says float64" in found
    assert any("table 'nope' is not in the schema" in m for m in found)
    swapped = dict(reversed(list(good.items())))
    assert any("not in the schema's order" in m for m in mismatches("ablation", {"ablation": swapped}))
    optional = {k: v for k, v in {c.name: c.dtype for c in schema_of("pruning")["curve"].columns}.items() if not k.startswith("random_")}
    assert mismatches("pruning", {"curve": optional}) == []  # the random_* columns come only with random_seeds > 0
    with pytest.raises(ValueError, match="dtype"):
        Column("x", "float32", "a dtype the schema does not name")


# --------------------------------------------------------------------------- every table on the demo

TASK = [TaskItem(prompt="When Mary and John went to the store, John gave a drink to", correct=" Mary", incorrect=" John")]


#: Kinds whose run (same study, same settings) test_result_roundtrip.py checks too: the result and its
#: saved-and-read copy are shared with it (``demo_saved``, tests/reports/api/conftest.py).
SHARED = {"sinks": "sinks", "ablation": "ablate", "pruning": "prune", "patching": "patch", "verify": "verify", "kv": "kv"}


def _studies(demo, shared) -> dict[str, Any]:
    """The other studies, each with small settings and every optional table and column on (census
    and detect read the shared plain census, ``demo_study("census")``)."""

    def census():
        return headlens.evidence(demo, shared("census"), n=4, T=8, smoke=True)  # a new result: the shared census is left as it was

    return {
        "census": census,
        "detect": lambda: DetectResult.of_census(shared("census")),
        "sink_lengths": lambda: headlens.sinks(demo, lengths=(32,), n_long=1),
        "sink_seed_text": lambda: SeedTextResult(run=run_seed_text(demo, "The cat sat on the mat.", (True, False))),
        "circuit": lambda: headlens.circuit(demo, builtin="induction", n_pairs=4, n_bootstrap=10, confirm=2, curve_points=2, steps=2),
        "composition": lambda: headlens.composition(demo, n_baseline=20, n_tokens=50),
        "ioi": lambda: headlens.ioi(demo, n_pairs=4, n_resamples=20),
        "capture": lambda: headlens.capture(demo, prompts="The cat sat on the mat. The cat sat on the mat.", what=("q",), verify=True),
        "gqa": lambda: headlens.gqa(demo, task=TASK, **SMALL),
        "projections": lambda: headlens.projections(demo, n_windows=1, window=16, n_prompts=4, **BUILTIN),
    }


@demo_only
@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_every_table_of_every_study_has_the_schemas_columns_and_dtypes(demo_model, demo_study, demo_saved, kind, tmp_path):
    if kind in SHARED:
        result, back = demo_saved(SHARED[kind])
    else:
        result, back = _studies(demo_model, demo_study)[kind](), None
    assert result.kind == kind and result.tables
    assert result.schema_mismatches() == []
    if kind in ("detect", "sink_seed_text"):
        return  # written by their commands, not by a study's save
    if back is None:
        out = tmp_path / (f"{kind}.csv" if kind in ("ablation", "kv") else kind)
        back = headlens.load(tables_saved(result, out))  # the figures made, none rendered or written
    assert back.schema_mismatches() == [] and {n: dict(t.dtypes) for n, t in back.tables.items()} == {
        n: dict(t.dtypes) for n, t in result.tables.items()
    }
