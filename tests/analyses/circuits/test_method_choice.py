"""Issue 46, item 3: the default method scores exactly where that is cheap (at most 200 forward equivalents), else
EAP-IG with a note on why its estimate may split the credit.

Before: the default was EAP-IG everywhere; on the demo (``--builtin induction --n-pairs 32``) its median estimate/exact
over the 20 confirmed edges was 0.51 (0.49 in the issue), the induction head's query and key inputs each given
about half of the exact share."""

from __future__ import annotations

import pytest

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.cost import circuit_cost
from headlens.analyses.circuits.method_choice import AUTO_EXACT_FORWARDS, SPLIT_CREDIT, choose_method
from headlens.analyses.circuits.run import run_circuit
from headlens.analyses.patching.builtin import builtin_task


def test_the_default_is_auto():
    assert CircuitConfig().method == "auto"


@pytest.mark.parametrize(("n_edges", "chosen", "word"), [(110, "exact", "at most 200"), (AUTO_EXACT_FORWARDS, "exact", "at most"),
                                                          (32491, "eap-ig", "more than 200")])  # fmt: skip
def test_auto_is_exact_up_to_the_limit(n_edges, chosen, word):
    cfg, why = choose_method(CircuitConfig(), n_edges)
    assert cfg.method == chosen and why is not None and why["chosen"] == chosen and word in why["why"]
    assert why["exact_forwards"] == n_edges
    assert choose_method(CircuitConfig(method="eap"), 110) == (CircuitConfig(method="eap"), None)  # a given method stays
    assert choose_method(CircuitConfig(ablation="zero"), 32491)[0].method == "exact"  # mean/zero ablation scores exactly


@pytest.fixture(scope="module")
def demo_task(demo_model):
    return builtin_task(demo_model, "induction", n=16, seed=0)


def test_demo_default_scores_exactly(demo_model, demo_task):
    run = run_circuit(demo_model, demo_task, CircuitConfig(n_bootstrap=50, curve_points=4, confirm=0, confirm_sample=0))
    assert run.summary["method"] == "exact" and run.summary["method_choice"]["asked"] == "auto"
    assert any(n.startswith("method auto: exact, because exact scoring of every edge is estimated at 110") for n in run.notes)
    assert SPLIT_CREDIT not in run.notes
    e = run.edges
    assert (e["exact"] == e["score"]).all() and not e["disagree"].any()  # estimate/exact is 1 by construction
    assert "exact scoring: 110 edges" in circuit_cost(demo_model, 110, 16, int(demo_task.clean.shape[1]), CircuitConfig())


def test_an_estimate_says_it_may_split_the_credit(demo_model, demo_task):
    run = run_circuit(demo_model, demo_task, CircuitConfig(method="eap", n_bootstrap=50, curve_points=4, confirm=2, confirm_sample=0))
    assert SPLIT_CREDIT in run.notes and run.summary["method_choice"] is None
