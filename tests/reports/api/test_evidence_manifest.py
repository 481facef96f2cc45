"""The census manifest of an evidence run names the text the sink test read (issue 28 review item
7): which text, why, its SHA-256 and length, as the ablation manifests record them, and the
``test`` column of evidence.csv names the same text."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pandas as pd
import pytest

import headlens
from headlens.analyses.measure.texts import demo_text, eval_text
from headlens.analyses.patching.evidence import EvidenceConfig
from headlens.reports.api.census import CensusResult


@pytest.fixture(scope="module")
def demo(demo_model):
    return demo_model  # loaded once per session (tests/conftest.py)


def _sink_only(census: CensusResult) -> CensusResult:
    """The census with one role, 1.3 sink (the CLI's default census gives it): the sink test alone
    runs, the other tests are not what this checks."""
    roles = pd.DataFrame([(1, 3, "1.3", "sink")], columns=["layer", "head", "name", "role"])
    return replace(census, run=replace(census.run, roles=roles))


def test_evidence_manifest_records_the_sink_text(demo):
    census = _sink_only(headlens.census(demo, n_prompts=8, seed=0))
    tested = headlens.evidence(demo, census, EvidenceConfig(n=10, T=16))
    got = tested.manifest["evidence"]["sink_text"]
    held = demo_text("heldout")
    assert got["name"] == "heldout" and "held-out text" in got["why"], got
    assert got["sha256"] == hashlib.sha256(held.encode("utf-8")).hexdigest()[:16] and got["n_chars"] == len(held), got
    assert got["sha256"] != hashlib.sha256(eval_text().encode("utf-8")).hexdigest()[:16]
    test = tested.tables["evidence"]["test"]
    assert test.str.contains(got["label"], regex=False).all() and test.str.contains(got["why"], regex=False).all(), test.tolist()
