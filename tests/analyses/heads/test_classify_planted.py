"""Ground truth: the census finds every planted role on its head, and nothing else."""

from __future__ import annotations

import pandas as pd
import pytest

from headlens.analyses.heads.census import CensusConfig, run_census
from headlens.analyses.heads.classify import classify_heads
from headlens.analyses.synthetic.selftest import check_planted_roles
from headlens.reports.cli.main import cli


@pytest.mark.parametrize("prepend_bos", [True, False])
def test_planted_roles_recovered_and_nothing_else(planted_model, prepend_bos):
    from headlens.analyses.synthetic.planted import PLANTED_ROLES

    result = run_census(planted_model, CensusConfig(n_prompts=30, prepend_bos=prepend_bos, n_bootstrap=200))
    roles = classify_heads(result.scores).roles  # the long table: one row per (head, role)
    got = dict(zip(roles["name"], roles["role"], strict=True))
    assert got == PLANTED_ROLES and len(roles) == len(PLANTED_ROLES)
    scores = result.scores.set_index(["detector", "layer", "head"])
    for head, role in PLANTED_ROLES.items():
        layer, h = map(int, head.split("."))
        row = scores.loc[(role, layer, h)]
        assert row["ci_low"] > 2 * row["baseline"]
    # no-role heads stay near their uniform baseline on every detector
    for head in ("0.3", "1.2", "1.3"):
        layer, h = map(int, head.split("."))
        for det in ("previous_token", "duplicate_token", "induction", "sink"):
            row = scores.loc[(det, layer, h)]
            assert row["score"] < 1.5 * row["baseline"] + 0.02, (head, det, row["score"], row["baseline"])
    referent = scores.loc[("referent", 1, 1)]
    assert referent["accuracy"] >= 0.9
    # a head's strongest detector is its role, or an interval above its uniform baseline, or none
    heads = classify_heads(result.scores).heads.set_index("name")
    for head, role in PLANTED_ROLES.items():
        assert heads.loc[head, "strongest_detector"] == role
    for head in heads.index.difference(list(PLANTED_ROLES)):
        det = heads.loc[head, "strongest_detector"]
        if det:
            layer, h = map(int, head.split("."))
            assert scores.loc[(det, layer, h), "ci_low"] > scores.loc[(det, layer, h), "baseline"], head
        else:
            assert pd.isna(heads.loc[head, "strongest_score"]), head


def test_check_planted_roles_fails_on_wrong_or_extra_roles():
    scores = pd.DataFrame(
        [
            {
                "layer": 0,
                "head": 0,
                "detector": "sink",
                "score": 0.9,
                "baseline": 0.1,
                "ci_low": 0.8,
                "ci_high": 1.0,
                "n": 5,
                "accuracy": float("nan"),
            }
        ]
    )
    roles = pd.DataFrame({"layer": [0], "head": [1], "name": ["0.1"], "role": ["sink"]})  # 0.0 has no row: no role
    checks = check_planted_roles(scores, roles, {"0.0": "sink"})
    assert [ok for _, ok, _ in checks] == [False, False]


def test_selftest_command_passes_on_cpu(tmp_path, runner):
    res = runner.invoke(cli, ["selftest", "--device", "cpu", "--n-prompts", "12", "-q", "--keep", str(tmp_path / "st")])
    assert res.exit_code == 0, res.output
    assert res.output.count("PASS") == 12 and "FAIL" not in res.output
    assert (tmp_path / "st" / "planted" / "config.json").exists()


def test_a_roleless_heads_strongest_detector_beats_its_uniform_baseline():
    """A head without a role is named after the detector with the largest score/threshold among those whose interval lies
    above a uniform head's score; where none does it is named after none ("" and NaN), whatever the ratios say; a role
    wins."""
    nan = float("nan")

    def row(head, det, score, baseline):
        return {"layer": 0, "head": head, "detector": det, "score": score, "baseline": baseline,
                "ci_low": score - 0.01, "ci_high": score + 0.01, "n": 10, "accuracy": nan}  # fmt: skip

    scores = pd.DataFrame(
        [
            # 0.0: previous_token has the larger ratio (0.3 / 0.5) but sits below its baseline; sink is above its own
            row(0, "previous_token", 0.30, 0.35),
            row(0, "sink", 0.20, 0.10),
            # 0.1: scores below their baseline, one equal to it but for rounding, one whose interval reaches it: no detector
            row(1, "previous_token", 0.10, 0.20),
            row(1, "sink", 0.05, 0.25),
            row(1, "duplicate_token", 0.2 + 0.01 + 1e-9, 0.2),
            row(1, "referent", 0.205, 0.2),
            row(1, "induction", nan, nan),
            # 0.2: a role (sink 0.9) beats a larger ratio elsewhere
            row(2, "sink", 0.90, 0.10),
            row(2, "previous_token", 0.45, 0.05),
        ]
    )
    heads = classify_heads(scores, {"previous_token": 0.5, "sink": 0.5}).heads.set_index("name")
    assert heads.loc["0.0", "strongest_detector"] == "sink" and heads.loc["0.0", "strongest_score"] == 0.20
    assert heads.loc["0.1", "strongest_detector"] == "" and pd.isna(heads.loc["0.1", "strongest_score"])
    assert heads.loc["0.2", "strongest_detector"] == "sink" and heads.loc["0.2", "strongest_score"] == 0.90


def test_no_role_for_an_interval_at_the_uniform_baseline():
    """baseline_factor=1: an interval whose low end is the baseline but for rounding gives no role; one above it does."""
    nan = float("nan")
    rows = [
        {"layer": 0, "head": h, "detector": "sink", "score": 0.6, "baseline": 0.5, "ci_low": low, "ci_high": 0.7,
         "n": 10, "accuracy": nan}
        for h, low in enumerate([0.5, 0.5 * (1 + 1e-9), 0.51])
    ]  # fmt: skip
    got = classify_heads(pd.DataFrame(rows), {"sink": 0.3}, baseline_factor=1.0)
    assert list(got.roles["name"]) == ["0.2"]
    assert list(got.heads["strongest_detector"]) == ["", "", "sink"]
