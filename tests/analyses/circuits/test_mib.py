"""Issue 46, item 4: MIB's circuit-localisation metrics, CPR and CMD, on MIB's grid and rankings.

The areas against a hand-computed case, the grid's sizes (rounded down, as MIB), the two rankings (signed for
CPR, absolute for CMD), the normalisation against the empty circuit, and a circuit run on the demo model that
records and prints both."""

from __future__ import annotations

import numpy as np
import pytest

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.mib import MIB_FRACTIONS, mib_areas, mib_from_values, mib_masks, mib_sizes
from headlens.analyses.circuits.run import run_circuit
from headlens.analyses.patching.builtin import builtin_task


def test_areas_by_hand():
    # faithfulness 0 up to 10% of the edges, 0.5 at 20%, 1 at 50% and 100%.
    f = [0, 0, 0, 0, 0, 0, 0, 0.5, 1, 1]
    # CPR: (0.2 - 0.1) * (0 + 0.5) / 2 + (0.5 - 0.2) * (0.5 + 1) / 2 + (1 - 0.5) * (1 + 1) / 2 = 0.025 + 0.225 + 0.5
    # CMD: |1 - f| is 1 from 0.001 to 0.1 (0.099), then 0.1 * (1 + 0.5) / 2 + 0.3 * (0.5 + 0) / 2 + 0 = 0.075 + 0.075
    cpr, cmd = mib_areas(f)
    assert cpr == pytest.approx(0.75, abs=1e-12)
    assert cmd == pytest.approx(0.249, abs=1e-12)
    # a perfect curve: CPR is the grid's width (no point at 0), CMD 0; faithfulness above 1 counts in CMD too
    assert mib_areas([1.0] * 10) == pytest.approx((0.999, 0.0))
    assert mib_areas([2.0] * 10) == pytest.approx((1.998, 0.999))
    assert all(np.isnan(mib_areas([np.nan] + [1.0] * 9)))


def test_grid_sizes_round_down_as_mib():
    assert MIB_FRACTIONS == (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
    assert mib_sizes(110) == [0, 0, 0, 1, 2, 5, 11, 22, 55, 110]
    assert mib_sizes(32491) == [32, 64, 162, 324, 649, 1624, 3249, 6498, 16245, 32491]


def test_cpr_ranks_by_signed_score_cmd_by_absolute():
    scores = np.array([0.5, -2.0, 1.0] + [0.0] * 997)  # 1000 edges: the grid keeps 1, 2, 5 ... edges
    masks = mib_masks(scores)
    assert masks[0].sum() == 0 and masks[1].all()
    signed, absolute = masks[2:12], masks[12:]
    assert np.flatnonzero(signed[0]).tolist() == [2]  # 0.1%: one edge, the largest positive
    assert sorted(np.flatnonzero(signed[1]).tolist()) == [0, 2]  # the negative edge comes last of the nonzero ones
    assert np.flatnonzero(absolute[0]).tolist() == [1]  # |-2| first
    assert sorted(np.flatnonzero(absolute[1]).tolist()) == [1, 2]
    assert [int(m.sum()) for m in signed] == mib_sizes(1000)


def test_normalised_against_the_empty_circuit():
    # metric [circuit, pair]: empty 1 and 3 (mean 2), full 10 and 12 (mean 11); every signed circuit at mean 6.5: f = 0.5
    vals = np.zeros((22, 2))
    vals[0], vals[1] = [1, 3], [10, 12]
    vals[2:12] = [6, 7]
    vals[12:] = [11, 11]  # every absolute circuit as the full model: f = 1
    out = mib_from_values(vals, n_edges=1000)
    assert out["faithfulness_signed"] == pytest.approx([0.5] * 10)
    assert out["cpr"] == pytest.approx(0.5 * 0.999) and out["cmd"] == pytest.approx(0.0)
    assert out["n_edges"] == mib_sizes(1000) and "m(empty)" in out["normalisation"]


@pytest.fixture(scope="module")
def demo_run(demo_model):
    task = builtin_task(demo_model, "induction", n=16, seed=0)
    return task, run_circuit(demo_model, task, CircuitConfig(method="exact", n_bootstrap=50, curve_points=4, confirm=0))


def test_circuit_run_records_cpr_and_cmd(demo_model, demo_run):
    task, run = demo_run
    m = run.summary["mib"]
    assert m["measured_on"] == "held-out pairs" and m["n_pairs"] == 8 and m["ablation"] == "corrupted"
    assert np.isfinite(m["cpr"]) and np.isfinite(m["cmd"]) and m["cmd"] >= 0
    assert m["faithfulness_signed"][-1] == pytest.approx(1.0) and m["faithfulness_signed"][0] == pytest.approx(0.0)
    # recomputed from the run's own scores: the 50% circuit by |score| on the held-out pairs
    from headlens.analyses.circuits.heldout import subset

    held = subset(task, np.asarray(run.summary["split"]["held_out"]))
    e = run.edges.sort_values("edge_id")
    top = np.argsort(-np.abs(e["score"].to_numpy()), kind="stable")[:55]
    mask = np.zeros((3, 110), dtype=bool)
    mask[1] = True
    mask[2, top] = True
    v = circuit_values(demo_model, held, run.graph, mask).mean(1)
    assert m["faithfulness_absolute"][8] == pytest.approx((v[2] - v[0]) / (v[1] - v[0]), abs=1e-6)


def test_findings_print_cpr_and_cmd(demo_model, demo_run):
    from headlens.reports.api.circuit_text import circuit_lines

    class Result:
        summary, notes, edges, faithfulness = demo_run[1].summary, [], demo_run[1].edges, demo_run[1].faithfulness
        circuit_edges = demo_run[1].edges[demo_run[1].edges["in_circuit"]]

    line = next(x for x in circuit_lines(Result()) if x.startswith("MIB metrics"))
    assert f"CPR {demo_run[1].summary['mib']['cpr']:.3f}" in line and f"CMD {demo_run[1].summary['mib']['cmd']:.3f}" in line
    assert "held-out pairs" in line and "corrupted" in line


def test_cpr_and_cmd_carry_a_seeded_interval_over_pairs(demo_model, demo_run):
    """Review: CPR and CMD with percentile intervals over the held-out pairs, seeded by the run's seed, printed."""
    m = demo_run[1].summary["mib"]
    for key in ("cpr", "cmd"):
        low, high = m[f"{key}_ci"]
        assert np.isfinite(low) and low <= m[key] + 1e-9 and m[key] - 1e-9 <= high
    from headlens.analyses.circuits.mib import mib_intervals
    from headlens.reports.api.circuit_scores_text import mib_lines

    values = np.random.default_rng(1).normal(size=(22, 12)) + np.r_[0.0, 1.0, np.linspace(0, 1, 20)][:, None]
    assert mib_intervals(values, seed=3) == mib_intervals(values, seed=3) != mib_intervals(values, seed=4)
    assert np.isnan(mib_intervals(values[:, :1])["cpr_ci"]).all()
    (line,) = mib_lines(demo_run[1].summary)
    assert f"CPR {m['cpr']:.3f} [{m['cpr_ci'][0]:.3f}, {m['cpr_ci'][1]:.3f}]" in line and "95% intervals over pairs" in line
    (bare,) = mib_lines({"mib": {k: v for k, v in m.items() if not k.endswith("_ci")}})
    assert "no interval" in bare
