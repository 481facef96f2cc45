"""Every decoder family of the test matrix gets an edge graph whose three scorers and circuits agree with each other.

Per family (tiny random checkpoints built from config): the circuit with every edge kept is the
clean run and with none the corrupted one; a circuit missing one edge is that edge's exact patch
(two independent code paths: the faithfulness rebuild of every reader and the single-edge
patch from a late start); EAP and EAP-IG give a finite value for every edge.  The hand-built
brute forces are in test_scores (GPT-2, Llama, Mistral), test_split (GPT-Neo,
OPT, GPT-J) and test_writes (Gemma 2).
"""

from __future__ import annotations

import numpy as np
import pytest

from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.scores import attribution_scores
from headlens.analyses.patching.builtin import induction_task
from headlens.analyses.synthetic.families import FAMILIES

#: two float32 forwards that differ in batching and start layer.
PATH_ATOL = 2e-4


@pytest.mark.parametrize("fam", FAMILIES)
def test_scorers_and_circuits_agree(family_model, fam):
    model = family_model(fam)
    graph = build_graph(model)
    task = induction_task(model, n=3, T=10)  # 21 tokens: past the windowed families' 16
    n = len(graph.edges)
    e = graph.edges
    picks = [
        int(e.index[(e["input"] == "k") & (e["sender_kind"] == "head")][0]),
        int(e.index[(e["input"] == "q") & (e["receiver_layer"] == 1)][-1]),
        int(e.index[e["input"] == "mlp"][-1]),
        int(e.index[(e["input"] == "logits") & (e["sender_kind"] == "head")][-1]),
    ]
    masks = [np.ones(n, bool), np.zeros(n, bool)]
    for j in picks:
        m = np.ones(n, bool)
        m[j] = False
        masks.append(m)
    vals = circuit_values(model, task, graph, np.array(masks))
    ex = exact_scores(model, task, graph, picks)
    np.testing.assert_allclose(vals[0], ex.clean, atol=PATH_ATOL)
    np.testing.assert_allclose(vals[1], ex.corrupt, atol=PATH_ATOL)
    assert np.abs(ex.clean - ex.corrupt).max() > 0.01
    np.testing.assert_allclose(vals[2:] - ex.clean[None, :], ex.values.T, atol=PATH_ATOL)
    assert np.abs(ex.values).max() > 1e-3  # some picked edge matters: the comparison is not of zeros
    for steps in (1, 3):
        got = attribution_scores(model, task, graph, steps=steps)
        assert got.values.shape == (3, n) and np.isfinite(got.values).all()
        assert np.abs(got.values).max() > 0
