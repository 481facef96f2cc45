"""The census's second, data-free line of evidence: a previous-token head's K-composition into an
induction head against its random baseline (manifest, findings, summary.md), on the demo model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headlens
from headlens.analyses.circuits.composition import CompositionConfig, run_composition
from headlens.analyses.circuits.composition_evidence import composition_evidence
from headlens.analyses.patching.evidence import EvidenceConfig


@pytest.fixture(scope="module")
def demo(demo_model):
    return demo_model  # loaded once per session (tests/conftest.py)


def test_composition_evidence_lines_match_the_full_scores(demo):
    roles = pd.DataFrame({"name": ["0.0", "1.0", "1.2", "0.3"], "layer": [0, 1, 1, 0], "head": [0, 0, 2, 3],
                          "role": ["previous_token", "induction", "induction", "sink"]})  # fmt: skip
    (line,) = composition_evidence(demo, roles)  # one line per previous-token head; the sink is not part of it
    full = run_composition(demo).scores.set_index(["sender", "receiver", "input"])
    got = [full.loc[("0.0", receiver, "k"), "score"] for receiver in ("1.0", "1.2")]
    assert line.startswith("composition (weights, no data): previous-token head 0.0 K-composes into 2 induction heads (1.0, 1.2)")
    assert f"at {min(got):.3f} to {max(got):.3f}," in line and "above its random baseline" in line and "for 2 of 2" in line
    assert f"strongest {('1.0', '1.2')[int(np.argmax(got))]} at {max(got):.3f}" in line
    assert composition_evidence(demo, roles[roles["role"] != "induction"]) == []


def test_census_evidence_shows_the_composition_note(demo, tmp_path):
    census = headlens.census(demo, n_prompts=8, evidence=EvidenceConfig(n=4, smoke=True))
    lines = census.manifest["composition_evidence"]
    roles = census.roles
    prev = set(roles.loc[roles["role"] == "previous_token", "name"])
    ind = set(roles.loc[roles["role"] == "induction", "name"])
    assert "0.0" in prev and ind  # the demo's planted-by-training circuit
    assert lines and all("above its random baseline" in line for line in lines)
    assert set(lines) <= set(census.findings().lines)
    assert "## Composition (weights, no data)" in census.summary
    back = headlens.load(census.save(tmp_path / "c"))
    assert set(lines) <= set(back.findings().lines)


@pytest.mark.slow  # a census with its evidence through the CLI
def test_classify_evidence_prints_the_composition_note(runner, tmp_path):
    from headlens.reports.cli.main import cli

    out = tmp_path / "cls"
    args = ["classify", "-m", "demo", "--device", "cpu", "--n-prompts", "8", "--evidence", "--evidence-n", "10", "--out", str(out), "-q"]
    result = runner.invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "composition (weights, no data): previous-token head 0.0 K-composes into " in result.stdout
    assert "## Composition (weights, no data)" in (out / "summary.md").read_text()


def test_composition_evidence_baseline_is_the_full_runs_baseline(demo):
    """One baseline rule and one seed rule: the census's K baseline is ``headlens composition``'s K baseline."""
    roles = pd.DataFrame({"name": ["0.0", "1.0"], "layer": [0, 1], "head": [0, 0], "role": ["previous_token", "induction"]})
    (line,) = composition_evidence(demo, roles)
    k = run_composition(demo, CompositionConfig(copying=False)).baseline.set_index("input").loc["k"]
    assert f"baseline {float(k['mean']):.3f} (sd {float(k['sd']):.3f} over {int(k['n_samples'])} random samples)" in line
