"""``headlens.evidence(model, census)``: the census's roles tested by their interventions, as a new
result (the census is left as it was), the same as ``census(evidence=...)``; wrong inputs refused
in one line before any intervention runs."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

import headlens
from headlens.analyses.patching.evidence import EVIDENCE_COLUMNS, SINK_SAMPLE, EvidenceConfig
from headlens.probes.errors import InputError
from headlens.reports.api.census import CensusResult

SMOKE = {"n": 4, "T": 8, "seed": 0, "smoke": True}


@pytest.fixture(scope="module")
def planted_census(planted_model) -> CensusResult:
    return headlens.census(planted_model, n_prompts=8, seed=0)


@pytest.fixture(scope="module")
def verb_run(planted_model, planted_census) -> tuple[dict[str, pd.DataFrame], CensusResult]:
    """``headlens.evidence(planted_model, planted_census, **SMOKE)`` run once for the two tests that read
    it, with the census's tables as they were just before it: ``(before, tested)``."""
    before = {name: table.copy() for name, table in planted_census.tables.items()}
    return before, headlens.evidence(planted_model, planted_census, **SMOKE)


def test_evidence_returns_a_new_result_and_leaves_the_census_alone(planted_census, verb_run):
    before, tested = verb_run
    assert isinstance(tested, CensusResult) and tested is not planted_census
    assert planted_census.evidence is None and "evidence" not in planted_census.heads.columns
    for name, table in before.items():
        pd.testing.assert_frame_equal(planted_census.tables[name], table)
    assert len(planted_census.roles) > 0, "the planted model has roles to test"
    assert tested.evidence is not None and list(tested.evidence.columns) == list(EVIDENCE_COLUMNS)
    tested_pairs = set(zip(tested.evidence["layer"], tested.evidence["head"], tested.evidence["role"], strict=True))
    assert tested_pairs == set(zip(planted_census.roles["layer"], planted_census.roles["head"], planted_census.roles["role"], strict=True))
    assert "evidence" in tested.heads.columns
    assert tested.manifest["config"]["evidence"] == {**SMOKE, "roles": None, "sink_sample": SINK_SAMPLE}  # every setting, defaults too
    assert "evidence" not in planted_census.manifest and "## Evidence" in tested.summary


def test_census_with_evidence_is_the_verb(planted_model, verb_run):
    via_census = headlens.census(planted_model, n_prompts=8, seed=0, evidence=EvidenceConfig(**SMOKE))
    _, via_verb = verb_run  # the verb on the same census with the same settings (SMOKE as keywords: EvidenceConfig(**SMOKE))
    assert via_census.evidence is not None and via_verb.evidence is not None
    pd.testing.assert_frame_equal(via_census.evidence, via_verb.evidence)
    pd.testing.assert_frame_equal(via_census.heads, via_verb.heads)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": {"model": "other", "n_layers": 99, "n_heads": 4}}, "n_layers=2, but the census was run on a model with n_layers=99"),
        ({"model": {"model": "other", "weights_sha256": "0" * 64}}, "its weights differ from those the census was run on"),
        ({"mask": "pruned.json"}, "evidence with mask"),
    ],
)
def test_a_census_of_another_model_is_refused(planted_model, planted_census, change, message):
    run = replace(planted_census.run, mask=change.get("mask"))  # a census of a pruned model: its run's mask
    other = replace(planted_census, run=run, manifest={**planted_census.manifest, **change})
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        headlens.evidence(planted_model, other, **SMOKE)


def test_wrong_arguments_are_refused_in_one_line(planted_model, planted_census):
    with pytest.raises(InputError, match="census must be a CensusResult"):
        headlens.evidence(planted_model, planted_census.scores)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="config must be an EvidenceConfig"):
        headlens.evidence(planted_model, planted_census, {"n": 4})  # type: ignore[arg-type]
    with pytest.raises(InputError, match="at least 10 items"):
        headlens.evidence(planted_model, planted_census, n=4)
