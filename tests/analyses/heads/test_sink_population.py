"""Sinks as a population (issue 45 item 3): the strongest detector is a head's specific role, and
:func:`sink_population` says how many heads sink and how much attention each layer parks on the
first token, against a uniform head, on a planted scores table (tests/analyses/heads/planted_sinks.py)."""

from __future__ import annotations

import numpy as np
import pytest

from headlens.analyses.heads.classify import classify_heads
from headlens.analyses.heads.sink_population import sink_only_heads, sink_population
from tests.analyses.heads.planted_sinks import BASELINES, N_HEADS, N_LAYERS, NOT_SINKS, PLANTED, planted_sink_scores


def test_strongest_detector_is_the_role_other_than_sink():
    scores = planted_sink_scores()
    heads = classify_heads(scores).heads.set_index("name")
    # 2.1: induction 0.8 and sink 0.95, both roles: named after induction, with induction's score
    assert heads.loc["2.1", "strongest_detector"] == "induction"
    assert heads.loc["2.1", "strongest_score"] == pytest.approx(0.8)
    # a head whose only role is sink is still named after it; a previous-token head after its role
    assert heads.loc["3.2", "strongest_detector"] == "sink"
    assert heads.loc["0.0", "strongest_detector"] == "previous_token"


def test_sink_population_counts_heads_and_shares_per_layer():
    scores = planted_sink_scores()
    roles = classify_heads(scores).roles
    pop = sink_population(scores, roles)
    assert pop is not None
    assert (pop.n_heads, pop.n_sink, pop.n_sink_only, pop.n_prompts) == (12, 10, 9, 20)
    assert pop.is_population
    assert sink_only_heads(roles) == {(a, b) for a in range(N_LAYERS) for b in range(N_HEADS)} - NOT_SINKS - {(2, 1)}
    for layer in range(N_LAYERS):  # the mean over the layer's heads of the sink score, planted or at the baseline
        want = np.mean([PLANTED.get((layer, h, "sink"), BASELINES["sink"]) for h in range(N_HEADS)])
        assert pop.layer_share[layer] == pytest.approx(want)
        assert pop.layer_uniform[layer] == pytest.approx(BASELINES["sink"])
    assert pop.mean_share == pytest.approx(np.mean(pop.layer_share))
    assert pop.mean_uniform == pytest.approx(BASELINES["sink"])


def test_half_the_heads_sinking_is_not_a_population():
    scores = planted_sink_scores(not_sinks={(1, 0), (1, 1), (1, 2), (3, 2)})  # 6 of 12 heads sink: exactly half
    pop = sink_population(scores, classify_heads(scores).roles)
    assert pop is not None and pop.n_sink == 6 and not pop.is_population
    seven = planted_sink_scores(not_sinks={(1, 0), (1, 1), (1, 2)})
    pop = sink_population(seven, classify_heads(seven).roles)
    assert pop is not None and pop.n_sink == 7 and pop.is_population


def test_no_sink_detector_no_population():
    scores = planted_sink_scores()
    scores = scores[scores["detector"] != "sink"]
    assert sink_population(scores, classify_heads(scores).roles) is None
