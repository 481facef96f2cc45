"""The circuit diagram under grouped-query attention (issue 45, item 3): a key-value receiver is one node, drawn once and
labelled as the key-value head ("1.0-2 kv"), not once per query head with one head's label."""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

import headlens
from headlens.reports.render.figures.circuit import KV_DY, circuit_figure, node_label


def _labels(fig) -> Counter:
    return Counter(t.get_text() for ax in fig.axes for t in ax.texts if t.get_text())


def test_node_label_names_the_key_value_head():
    assert node_label("16.0+16.1+16.2") == "16.0-2 kv" and node_label("1.3") == "1.3" and node_label("mlp0") == "mlp0"


def test_a_gqa_receiver_is_drawn_once():
    """Three query heads share a key-value head: its k and v edges meet one node, labelled once."""
    edges = pd.DataFrame({"sender": ["0.1", "embed", "1.0"], "receiver": ["1.0+1.1+1.2", "1.0+1.1+1.2", "logits"],
                          "input": ["k", "v", "logits"], "score": [0.5, 0.3, 0.8], "in_circuit": [True] * 3})  # fmt: skip
    fig = circuit_figure(edges, n_layers=2, n_heads=6)
    labels = _labels(fig)
    assert labels["1.0-2 kv"] == 1 and labels["1.0"] == 1  # 1.0 itself, as the sender to the logits
    assert "1.1" not in labels and "1.2" not in labels
    (ax,) = [a for a in fig.axes if a.texts]
    kv = next(t for t in ax.texts if t.get_text() == "1.0-2 kv")
    assert kv.xy == pytest.approx((1.0, 3.0 - KV_DY))  # centred under heads 0..2 of layer 1, below their row


def test_tiny_llama_circuit_labels_each_node_once(family_model):
    """On the tiny Llama of the family matrix (4 query heads, 2 key-value heads), every node of the diagram is labelled once
    and each key-value receiver of the circuit by its key-value head."""
    r = headlens.circuit(family_model("llama"), method="eap", n_pairs=4, top_n=40, n_bootstrap=20, confirm=0, confirm_sample=0)
    ce = r.circuit_edges
    kv = set(ce.loc[ce["receiver"].str.contains("+", regex=False), "receiver"])
    assert kv, "the circuit has GQA key-value receivers"
    labels = _labels(r.plot("circuit"))
    assert max(labels.values()) == 1
    assert {node_label(n) for n in kv} <= set(labels) and all(" kv" in node_label(n) for n in kv)


def test_nan_scores_draw_by_the_metric_change_and_say_so():
    """Issue 46 item 15's case (no clean-corrupt gap, every score NaN): the edges are drawn by |score_raw|, and the title says so."""
    edges = pd.DataFrame({"sender": ["0.1", "1.0"], "receiver": ["1.0", "logits"], "input": ["k", "logits"],
                          "score": [float("nan")] * 2, "score_raw": [0.2, -0.1], "in_circuit": [True] * 2})  # fmt: skip
    (ax,) = circuit_figure(edges, n_layers=2, n_heads=4).axes[:1]
    assert "every score is NaN" in ax.get_title()
    widths = sorted(a.arrow_patch.get_linewidth() for a in ax.texts if a.arrow_patch is not None)
    assert len(widths) == 2 and all(w > 0 for w in widths) and widths[0] < widths[1]
