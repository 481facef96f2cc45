"""An estimate judged by exact patching on a sample of edges (analyses/circuits/against_exact.py).

Known answers: the weighted AUC against a brute-force sum over every (positive, negative) pair; the weighted
Spearman with unit weights against scipy's; the stratified sample's weighted AUC against the AUC of every edge,
on numbers (the mean over draws) and on the planted circuit, where every edge is cheap to patch exactly.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from headlens.analyses.circuits.against_exact import (
    CIRCUIT_SHARE,
    against_exact,
    against_exact_table,
    edge_sample,
    weighted_spearman,
)
from headlens.analyses.circuits.roc import weighted_auc
from headlens.analyses.circuits.scores import PerPair
from headlens.analyses.circuits.summary import ranking
from headlens.reports.render.against_exact_lines import against_exact_line


def _brute_auc(s, y, w):
    num = den = 0.0
    for i in np.flatnonzero(y):
        for j in np.flatnonzero(~y):
            num += w[i] * w[j] * (1.0 if s[i] > s[j] else 0.5 if s[i] == s[j] else 0.0)
            den += w[i] * w[j]
    return num / den


def test_weighted_auc_is_the_pairwise_sum():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 6, 60).astype(float)  # many ties
    s[[3, 9]] = np.nan  # ranks lowest
    y = rng.random(60) < 0.3
    w = rng.uniform(0.5, 9.0, 60)
    s_brute = np.where(np.isnan(s), -np.inf, s)
    assert weighted_auc(s, y, w) == pytest.approx(_brute_auc(s_brute, y, w), abs=1e-12)
    assert weighted_auc(s, y) == pytest.approx(_brute_auc(s_brute, y, np.ones(60)), abs=1e-12)
    assert np.isnan(weighted_auc(s, np.zeros(60, dtype=bool), w))


def test_weighted_spearman_unit_weights_is_scipys():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(2)
    a = rng.integers(0, 8, 200).astype(float)
    b = a + rng.normal(0, 3, 200)
    assert weighted_spearman(a, b, np.ones(200)) == pytest.approx(spearmanr(a, b)[0], abs=1e-12)
    # an integer weight is that many copies of the edge
    w = rng.integers(1, 4, 200)
    assert weighted_spearman(a, b, w.astype(float)) == pytest.approx(spearmanr(np.repeat(a, w), np.repeat(b, w))[0], abs=1e-12)


def _per_pair(values, method, gap=1.0):
    n = values.shape[0]
    clean, corrupt = np.full(n, gap), np.zeros(n)
    # noising, logit-diff: the share carried is -(patched - base) / gap
    return PerPair(values=-values, clean=clean, corrupt=corrupt, metric="logit-diff", method=method, direction="noising",
                   edge_ids=np.arange(values.shape[1]))  # fmt: skip


def _synthetic(n_edges=4000, n_pairs=12, seed=3, noise=0.006):
    rng = np.random.default_rng(seed)
    true = rng.exponential(0.004, n_edges) * (rng.random(n_edges) < 0.5)  # half the edges near 0
    exact = true[None, :] + rng.normal(0, 0.002, (n_pairs, n_edges))
    est = 0.7 * true[None, :] + rng.normal(0, noise, (n_pairs, n_edges))
    return _per_pair(est, "eap"), _per_pair(exact, "exact")


def test_stratified_sample_estimates_the_full_auc():
    """Over draws of the random stratum, the weighted AUC averages to the AUC of every edge; the unweighted one
    does not (the top stratum is over-represented), so the weights matter here."""
    est, ex = _synthetic()
    s_est, s_ex = np.abs(-est.values.mean(0)), np.abs(-ex.values.mean(0))
    full = weighted_auc(s_est, s_ex >= CIRCUIT_SHARE)
    order = ranking(s_est)
    weighted, plain = [], []
    for seed in range(200):
        smp = edge_sample([order], 200, 300, seed)
        lab = s_ex[smp.ids] >= CIRCUIT_SHARE
        weighted.append(weighted_auc(s_est[smp.ids], lab, smp.weights))
        plain.append(weighted_auc(s_est[smp.ids], lab))
    assert abs(np.mean(weighted) - full) < 0.005
    assert abs(np.mean(plain) - full) > 0.02
    res = against_exact(est, ex, edge_sample([order], 200, 300, 0), n_bootstrap=200, seed=0)
    assert res.auc_low <= full <= res.auc_high
    assert res.interval == "pairs and random-stratum edges"
    assert res.n_top == 200 and res.n_random == 300 and res.n_rest == 3800


def test_edge_sample_strata():
    orders = [np.arange(100), np.arange(100)[::-1]]
    smp = edge_sample(orders, 10, 20, 0)
    assert len(smp.top) == 20 and set(smp.top) == set(range(10)) | set(range(90, 100))
    assert len(smp.random) == 20 and not set(smp.random) & set(smp.top)
    assert np.allclose(smp.weights[20:], 80 / 20) and np.allclose(smp.weights[:20], 1)
    assert np.array_equal(edge_sample(orders, 10, 20, 0).random, smp.random)
    assert not np.array_equal(edge_sample(orders, 10, 20, 1).random, smp.random)


def test_line_says_a_wide_interval_is_not_a_finding():
    est, ex = _synthetic(n_edges=400, n_pairs=4, noise=0.03)
    res = against_exact(est, ex, edge_sample([ranking(np.abs(est.values.mean(0)))], 5, 10, 0), n_bootstrap=100)
    assert res.wide and "too wide to read" in against_exact_line(res.row())
    tight = replace(res, auc_low=res.auc - 0.01, auc_high=res.auc + 0.01)
    line = against_exact_line(tight.row())
    assert not tight.wide and "too wide" not in line and line.startswith(f"EAP: AUROC {res.auc:.2f} [")
    assert "over 15 edges (top 5 + random 10 of 395)" in line
    table = against_exact_table([res])
    assert list(table["method"]) == ["eap"] and bool(table["wide"].iloc[0])


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    from headlens.analyses.circuits.exact import exact_scores
    from headlens.analyses.circuits.graph import build_graph
    from headlens.analyses.circuits.scores import attribution_scores
    from headlens.analyses.patching.builtin import induction_task
    from headlens.analyses.synthetic.planted_circuit import build_planted_circuit
    from headlens.analyses.synthetic.planted_spec import PlantedSpec
    from headlens.probes.loading import load_model

    model = load_model(model=str(build_planted_circuit(tmp_path_factory.mktemp("planted_ae"), PlantedSpec(d_model=192, n_ctx=64))),
                       device="cpu")  # fmt: skip
    task = induction_task(model, n=8, T=12)
    graph = build_graph(model)
    est = {m: attribution_scores(model, task, graph, steps=s) for m, s in (("eap", 1), ("eap-ig", 5))}
    return est, exact_scores(model, task, graph), graph, model, task


def test_planted_circuit_sampled_auc_covers_the_full_auc(planted):
    """Every edge of the planted circuit's graph patched exactly: the AUC of each estimate over all of them lies in
    the interval of the weighted AUC from its top 10 and a random 30 of the rest."""
    from headlens.analyses.circuits.summary import edge_table

    est, ex, graph, _, _ = planted
    exact_share = np.abs(edge_table(graph, ex, n_bootstrap=10)["score"].to_numpy())
    label = exact_share >= CIRCUIT_SHARE
    assert 0 < label.sum() < len(label)
    for pp in est.values():
        share = np.abs(edge_table(graph, pp, n_bootstrap=10)["score"].to_numpy())
        full = weighted_auc(share, label)
        smp = edge_sample([ranking(share)], 10, 30, 0)
        res = against_exact(pp, ex, smp, n_bootstrap=300)
        assert res.auc_low <= full <= res.auc_high, (pp.method, full, res)
        # the same sample with all edges as its random stratum: the weighted AUC is the full one
        whole = against_exact(pp, ex, edge_sample([ranking(share)], 0, len(share), 0), n_bootstrap=20)
        assert whole.auc == pytest.approx(full, abs=1e-12)


def test_random_stratum_widens_the_interval_by_what_it_cannot_rule_out():
    """A draw that finds no edge of the exact circuit outside the top cannot rule out some; one that finds one in 30
    cannot rule out many more than its estimate (seen on the real model's page: one circuit edge in 20 random edges of
    70,641 printed AUROC 1.00 [1.00, 1.00])."""
    from scipy.stats import beta

    from headlens.analyses.circuits.against_exact import EdgeSample, hidden_bound

    smp = EdgeSample(n_edges=110, top=np.arange(10), random=np.arange(10, 40), seed=0)
    assert hidden_bound(np.zeros(30), smp) == pytest.approx(100 * (1 - 0.05 ** (1 / 30)))
    one = hidden_bound(np.r_[np.zeros(29), 0.5], smp)
    assert one == pytest.approx(100 * (beta.ppf(0.95, 2, 29) - 1 / 30)) and 10 < one < 100
    assert hidden_bound(np.full(30, 0.5), smp) == 0.0  # every drawn edge in the circuit: nothing more to place
    big = EdgeSample(n_edges=70651, top=np.arange(10), random=np.arange(10, 30), seed=0)
    assert 11_000 < hidden_bound(np.r_[np.zeros(19), 0.5], big) < 12_000  # 15,260 bound - 3,532 estimated
    assert hidden_bound(np.zeros(100), EdgeSample(n_edges=110, top=np.arange(10), random=np.arange(10, 110), seed=0)) == 0.0


def test_circuit_run_judges_its_estimate_on_the_confirmed_edges(planted):
    """A circuit run with an estimate confirms its top and a random sample: that stratified sample gives the estimate's
    AUROC against exact (summary, against_exact.csv, one finding line), the same as against_exact on the same edges."""
    import headlens
    from headlens.analyses.circuits.config import CircuitConfig
    from headlens.analyses.circuits.run import run_circuit
    from headlens.reports.api.circuit_text import circuit_lines

    _, _, graph, model, task = planted
    cfg = CircuitConfig(method="eap-ig", top_n=8, confirm=8, confirm_sample=60, held_out=0, n_bootstrap=100, curve_points=2)
    run = run_circuit(model, task, cfg, graph=graph)
    (row,) = run.summary["against_exact"]
    assert row["method"] == "eap-ig" and row["n_top"] == 8 and row["n_random"] == 60 and row["n_rest"] == len(graph.edges) - 8
    assert row["interval"] == "pairs and random-stratum edges" and row["auc_low"] <= row["auc"] <= row["auc_high"]
    result = headlens.CircuitResult(run=run, manifest={"result": "circuit"})
    assert list(result.tables["against_exact"]["method"]) == ["eap-ig"]
    lines = [line for line in circuit_lines(result) if "against exact patching" in line]
    assert len(lines) == 1 and lines[0].startswith("EAP-IG: AUROC ") and "(top 8 + random 60 of 102)" in lines[0]
