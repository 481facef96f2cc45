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
