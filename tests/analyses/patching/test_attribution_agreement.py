"""Attribution-vs-exact agreement with its chance level (issue 28 item 3): the top-k overlap is
printed beside what random top-k sets would give, with the largest disagreement and the heads the
estimate misses, so an overlap at chance does not read as strong."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from headlens.analyses.patching.attribution import CHANCE_P, agreement
from headlens.reports.cli.main import cli
from headlens.reports.render.patching_tables import agreement_lines

#: Exact figures: the hypergeometric tail is a ratio of small binomials.
P_TOL = 1e-12


def _heads(values):
    names = [f"{i // 4}.{i % 4}" for i in range(len(values))]
    return pd.DataFrame({"layer": [i // 4 for i in range(len(values))], "head": [i % 4 for i in range(len(values))], "name": names}).assign(
        v=values
    )


#: The issue's demo figures, in shape: 8 heads, the estimate ranks them like the exact effect
#: (same top 5) but puts 0.214 where the exact effect is 1.000.
EXACT = [1.0, 0.05, 0.6, 0.5, 0.4, 0.3, 0.02, 0.01]
ESTIMATE = [0.214, 0.04, 0.55, 0.45, 0.35, 0.25, 0.03, 0.0]


def test_full_overlap_among_8_heads_is_reported_against_its_chance_level():
    exact = _heads(EXACT).rename(columns={"v": "denoising"})
    est = _heads(ESTIMATE).rename(columns={"v": "attribution"})
    got = agreement(est, exact, k=5)
    assert got["top_k_overlap"] == 1.0 and got["top_k_chance"] == pytest.approx(5 / 8)
    assert got["top_k_p_chance"] == pytest.approx(1 / math.comb(8, 5), abs=P_TOL)  # only one 5-set of 8 is the exact top 5
    assert got["above_chance"] == (1 / 56 < CHANCE_P) and got["missed"] == []
    worst = got["largest_disagreement"]
    assert worst["head"] == "0.0" and worst["estimate"] == pytest.approx(0.214) and worst["exact"] == pytest.approx(1.0)
    assert worst["abs_difference"] == pytest.approx(0.786)
    lines = agreement_lines(got)
    assert "top-5 overlap 100% (62% by chance" in lines[0] and "P = 0.0179" in lines[0]
    assert "largest disagreement 0.0: estimate +0.214, exact +1.000" in lines[1] and "misses none" in lines[1]
    json.dumps(got)  # the manifest holds it


def test_an_overlap_at_chance_says_so_and_names_the_missed_heads():
    exact = _heads(EXACT).rename(columns={"v": "denoising"})
    # the estimate's top 5: 0.0, 0.1, 1.2, 1.3, 1.1 -> shares 0.0 and 1.1: 2 of 5, the least two
    # 5-sets of 8 heads can share, so random sets do at least as well with probability 1
    est = _heads([0.9, 0.8, 0.0, 0.01, 0.02, 0.5, 0.7, 0.6]).rename(columns={"v": "attribution"})
    got = agreement(est, exact, k=5)
    assert got["top_k_overlap"] == pytest.approx(2 / 5) and not got["above_chance"]
    assert got["top_k_p_chance"] == pytest.approx(1.0, abs=P_TOL)
    assert got["missed"] == ["0.2", "0.3", "1.0"]  # by exact rank
    lines = agreement_lines(got)
    assert "no better than chance" in lines[0] and "misses 0.2, 0.3, 1.0" in lines[1]


def test_old_manifests_without_the_chance_level_still_print():
    old = {"spearman": 0.9, "top_k": 5, "top_k_overlap": 1.0, "n_heads": 8}
    assert agreement_lines(old) == [
        "attribution patching (first-order estimate, not exact) vs exact denoising over 8 heads: Spearman 0.900, top-5 overlap 100%"
    ]


def test_undefined_effects_report_no_agreement():
    lines = agreement_lines(
        agreement(_heads([0.1] * 8).rename(columns={"v": "attribution"}), _heads([math.nan] * 8).rename(columns={"v": "denoising"}))
    )
    assert lines == [
        "attribution patching (first-order estimate, not exact): no head has both an estimate and an exact effect"
        " (the normalised effects are undefined), so no agreement is reported"
    ]


def test_patch_cli_prints_the_chance_level_and_records_it(planted_checkpoint, tmp_path, runner):
    out = tmp_path / "out"
    args = ["patch", "--model", str(planted_checkpoint), "--n-pairs", "10", "--n-resamples", "50", "--attribution", "--out", str(out)]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    agree = json.loads((out / "manifest.json").read_text())["attribution"]["agreement_with_exact"]
    assert agree["top_k_chance"] == pytest.approx(5 / 8) and {"missed", "largest_disagreement", "top_k_p_chance"} <= set(agree)
    assert "by chance" in res.output and "largest disagreement" in res.output
