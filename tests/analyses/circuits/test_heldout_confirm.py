"""Issue 46, items 1, 2, 7 and 15: a circuit measured on pairs that did not choose it; exact confirmation beyond the
estimate's top; estimate against exact with a resolution and a magnitude floor; NaN scores and an empty circuit.

On the demo model (2 x 4, tests/conftest.py); the planted circuit's EAP cases are in test_planted_circuit.py."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.confirm import AGREE_FLOOR, compare, sample_outside
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.heldout import MIN_SPLIT_PAIRS, split_pairs, subset
from headlens.analyses.circuits.run import run_circuit
from headlens.analyses.patching.builtin import builtin_task
from headlens.analyses.patching.effects import normalised_effects, task_gap
from headlens.probes.errors import InputError

#: Held-out faithfulness recomputed from the circuit's mask against the run's figure (same pairs, same forwards).
RECOMPUTE_ATOL = 1e-9


def test_split_is_seeded_disjoint_and_covers_the_pairs():
    a, b = split_pairs(32, 0.5, seed=3), split_pairs(32, 0.5, seed=3)
    assert a.held and len(a.held_out) == len(a.choose) == 16
    assert np.array_equal(a.held_out, b.held_out) and not np.array_equal(a.held_out, split_pairs(32, 0.5, seed=4).held_out)
    assert sorted([*a.choose, *a.held_out]) == list(range(32)) and not set(a.choose) & set(a.held_out)
    d = a.describe()
    assert (d["n_choose"], d["n_held_out"], d["seed"], d["in_sample"]) == (16, 16, 3, False) and d["held_out"] == list(a.held_out)


@pytest.mark.parametrize(("n", "share", "word"), [(12, 0.5, "too few to hold out"), (40, 0.0, "held_out=0")])
def test_no_split_says_why_and_logs_it(n, share, word, caplog):
    with caplog.at_level(logging.WARNING, logger="headlens.analyses.circuits.heldout"):
        s = split_pairs(n, share, seed=0)
    assert not s.held and len(s.choose) == n and word in (s.reason or "") and "in-sample" in (s.reason or "")
    assert any(word in r.getMessage() for r in caplog.records)
    assert s.describe()["in_sample"] is True and s.describe()["reason"] == s.reason


def test_held_out_share_out_of_range_is_one_line():
    with pytest.raises(InputError) as err:
        CircuitConfig(held_out=0.95)
    assert "held_out=0.95" in str(err.value) and "\n" not in str(err.value)


@pytest.fixture(scope="module")
def demo_task(demo_model):
    return builtin_task(demo_model, "induction", n=2 * MIN_SPLIT_PAIRS, seed=0)


@pytest.fixture(scope="module")
def held_run(demo_model, demo_task):
    return run_circuit(demo_model, demo_task, CircuitConfig(method="exact", n_bootstrap=100, curve_points=4))


def test_circuit_is_measured_on_pairs_that_did_not_choose_it(demo_model, demo_task, held_run):
    """Item 1: the headline faithfulness is the held-out pairs'; recomputed here from the circuit's own mask."""
    s = held_run.summary
    split = s["split"]
    assert split["n_choose"] == split["n_held_out"] == MIN_SPLIT_PAIRS and not set(split["choose"]) & set(split["held_out"])
    assert s["task"]["n_pairs"] == 2 * MIN_SPLIT_PAIRS and s["faithfulness_measured_on"] == "held-out pairs"
    assert s["held_out"]["n_pairs"] == s["in_sample"]["n_pairs"] == MIN_SPLIT_PAIRS
    assert s["circuit_faithfulness"] == s["held_out"]["faithfulness"]
    held = subset(demo_task, np.asarray(split["held_out"]))
    mask = np.stack([np.zeros(len(held_run.edges), bool), np.ones(len(held_run.edges), bool), held_run.edges["in_circuit"].to_numpy()])
    vals = circuit_values(demo_model, held, held_run.graph, mask)
    gap = task_gap("logit-diff", vals[1], vals[0], n_resamples=100, seed=0)
    eff, _, _ = normalised_effects(vals[2:], vals[1], vals[0], gap, n_resamples=100, seed=0)
    assert abs(float(eff[0]) - s["held_out"]["faithfulness"]) < RECOMPUTE_ATOL
    row = held_run.faithfulness[held_run.faithfulness["n_edges"] == s["n_circuit"]].iloc[0]
    assert row["held_out"] == s["held_out"]["faithfulness"] and row["faithfulness"] == s["in_sample"]["faithfulness"]
    assert held_run.faithfulness["held_out"].notna().all()


def test_edges_are_scored_on_the_choosing_pairs_only(demo_model, demo_task, held_run):
    chooser = subset(demo_task, np.asarray(held_run.summary["split"]["choose"]))
    alone = run_circuit(demo_model, chooser, CircuitConfig(method="exact", n_bootstrap=100, curve_points=4, held_out=0))
    assert np.array_equal(alone.edges["score"].to_numpy(), held_run.edges["score"].to_numpy())
    assert alone.summary["held_out"] is None and alone.summary["split"]["in_sample"] is True
    assert any("held_out=0" in n for n in alone.notes)


def test_compare_floors_and_resolution():
    """Item 7: below AGREE_FLOOR both agree; exact within the resolution is 'exact ~ 0' (no ratio, off when the estimate is
    not negligible); item 15: NaN compares as nothing."""
    z = np.zeros(5)
    est = np.array([0.0002, 0.3, 2e-7, np.nan, 0.3])
    ex = np.array([0.0, 2e-7, 0.0, np.nan, 0.1])
    dis, ratio, near, off = compare(est, (est - 1e-4, est + 1e-4), ex, (ex + z, ex + z), floor=1e-6)
    assert dis.tolist() == [False, True, False, False, True]
    assert near.tolist() == [True, True, True, False, False]
    assert np.isnan(ratio[:4]).all() and ratio[4] == pytest.approx(3.0)
    assert off.tolist() == [False, True, False, False, True]
    assert AGREE_FLOOR == 0.01


def test_random_sample_outside_the_top_is_seeded():
    order = np.arange(100)[::-1]
    a = sample_outside(order, 10, 20, seed=0)
    assert len(a) == 20 and not set(a) & set(order[:10]) and np.array_equal(a, sample_outside(order, 10, 20, seed=0))
    assert len(sample_outside(order, 10, 500, seed=0)) == 90 and len(sample_outside(order, 10, 0, seed=0)) == 0


def _same_pairs_task(model, tmp_path):
    from headlens.analyses.patching.pairs import pair_task

    line = '{"clean": "a b c d a b c", "corrupt": "a b c d a b c", "correct": " d", "incorrect": " a"}'
    path = tmp_path / "same.jsonl"
    path.write_text("\n".join([line] * 4) + "\n")
    return pair_task(model, path)


def test_equal_clean_and_corrupt_give_no_disagreement(demo_model, tmp_path):
    """Item 15: every score NaN (no gap) is not a disagreement with exact."""
    run = run_circuit(demo_model, _same_pairs_task(demo_model, tmp_path),
                      CircuitConfig(method="eap", top_n=4, confirm=2, confirm_sample=2, n_bootstrap=20, curve_points=2))  # fmt: skip
    assert run.edges["score"].isna().all()
    assert run.summary["disagreements"] == 0 and not run.edges["disagree"].any()
    assert run.summary["confirmation"]["disagree"] == []


def test_threshold_above_every_score_says_the_circuit_is_empty(demo_model, demo_task):
    run = run_circuit(demo_model, demo_task, CircuitConfig(method="eap", threshold=float("inf"), confirm=0, confirm_sample=0,
                                                           n_bootstrap=20, curve_points=2))  # fmt: skip
    assert run.summary["n_circuit"] == 0
    (note,) = [n for n in run.notes if "the circuit is empty" in n]
    assert "|score| >= inf" in note and "the largest is" in note


def test_a_missed_edge_is_not_negligible_when_the_top_reaches_down_to_negligible_edges():
    """Seen on the demo (--confirm 30): the 30th top edge carried 0.00024 of the gap, so 11 sampled edges of about 0.0003 were
    called missed by the ranking while the AUROC line beside it found no sampled edge outside the top in the exact circuit.
    A missed edge now carries more than the smallest top edge and at least AGREE_FLOOR; the text says which bar held."""
    import pandas as pd

    from headlens.analyses.circuits.confirm import confirmation_summary
    from headlens.reports.api.circuit_text import _sample_lines

    exact = [0.5, 0.2, 0.00024, 0.0003, 0.005, 0.05, -0.03, 0.0001]
    table = pd.DataFrame({"sender": [f"s{i}" for i in range(8)], "receiver": "r", "input": "v", "rank": range(1, 9),
                          "score": exact, "exact": exact, "stability": 1.0, "confirmed": ["top"] * 3 + ["sample"] * 5,
                          "exact_near_zero": False, "disagree": False, "off_exact": False, "estimate_over_exact": 1.0})  # fmt: skip
    sample = confirmation_summary(table, 3, np.arange(3, 8), floor=1e-6, seed=0)["sample"]
    assert sample["smallest_top_exact"] == 0.00024 and sample["missed_floor"] == AGREE_FLOOR
    assert [m["edge"] for m in sample["missed"]] == ["s5 -> r (v)", "s6 -> r (v)"]  # not 0.0003 nor 0.005 (< AGREE_FLOOR)
    (line,) = _sample_lines(sample, {"confirmation": {"n_top": 3}})
    bar = f"|exact| {AGREE_FLOOR:g}, below which an edge is negligible (the smallest confirmed top edge carries 0.00024)"
    assert f"2 carry more than {bar}" in line
    table["exact"] = table["score"] = [0.5, 0.2, 0.04, 0.0003, 0.005, 0.05, -0.03, 0.0001]
    sample = confirmation_summary(table, 3, np.arange(3, 8), floor=1e-6, seed=0)["sample"]
    assert [m["edge"] for m in sample["missed"]] == ["s5 -> r (v)"]  # the top's 0.04 is the bar: -0.03 is below it
    assert "1 carries more than the smallest confirmed top edge (|exact| 0.04)" in _sample_lines(sample, {"confirmation": {"n_top": 3}})[0]
