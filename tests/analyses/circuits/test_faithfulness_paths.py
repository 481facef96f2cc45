"""The faster paths of a circuit run equal the reference paths they replace (issue 45 item 7), and the readable sizes.

The faithfulness hook once formed ``live - corrupt`` for every sender, copy and position (``[copies, batch, sender,
pos, d_model]``, 1.4 GB per reader and forward on SmolLM2) and contracted it with the mask by ``einsum``; it now takes
two matrix products on views of the stores.  The sums are the same up to float32 rounding of the order of summation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from headlens.analyses.circuits import faithfulness
from headlens.analyses.circuits.faithfulness import _contract, _flat, circuit_values
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.heldout import READABLE_SIZES, readable_at, split_pairs
from headlens.analyses.patching.builtin import induction_task


def _reference(m: torch.Tensor, live: torch.Tensor, corrupt: torch.Tensor) -> torch.Tensor:
    """The formula the hook used before: the difference formed, then ``einsum`` with the mask."""
    c, b = live.shape[0], corrupt.shape[0]
    d = live - corrupt[None].expand(c, *corrupt.shape)  # [c, b, S, x]
    return torch.einsum("cbsx,cgs->cbgx", d.reshape(c, b, *d.shape[2:]), m)


def test_contract_equals_the_difference_then_einsum():
    torch.manual_seed(0)
    c, b, s_tot, p, d, k, n_send = 3, 2, 11, 5, 8, 4, 7
    live = torch.randn(c * b, s_tot, p, d) * 10
    corrupt = live[:b].clone() + 0.1 * torch.randn(b, s_tot, p, d)
    m = (torch.rand(c, k, n_send) > 0.4).float()
    lv, ck = _flat(live, c, n_send), _flat(corrupt, 1, n_send)[0]
    got = _contract(m, lv, ck)
    want = _reference(m, lv, ck)
    assert got.shape == (c, b, k, p * d)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * float(live.abs().max()))


def test_circuit_values_equal_the_reference_hook(demo_model, monkeypatch):
    """Whole circuits on the demo (every reader hook): the new contraction against the old formula, to float32 rounding."""
    graph = build_graph(demo_model)
    task = induction_task(demo_model, n=4, T=8)
    rng = np.random.default_rng(0)
    masks = rng.random((5, len(graph.edges))) < np.array([0.0, 1.0, 0.2, 0.5, 0.9])[:, None]
    fast = circuit_values(demo_model, task, graph, masks, batch_size=2, max_rows=6)
    monkeypatch.setattr(faithfulness, "_contract", _reference)
    slow = circuit_values(demo_model, task, graph, masks, batch_size=2, max_rows=6)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-5 * max(1.0, float(np.abs(slow).max())))


def test_readable_at_reads_the_curve_at_the_readable_sizes():
    curve = pd.DataFrame(
        {
            "n_edges": [0, 10, 20, 35, 50, 100, 110],
            "faithfulness": [0.0, 0.1, 0.5, 0.9, 0.96, 1.0, 1.0],
            "ci_low": [0.0, 0.0, 0.4, 0.8, 0.9, 1.0, 1.0],
            "ci_high": [0.0, 0.2, 0.6, 1.0, 1.0, 1.0, 1.0],
            "held_out": [0.0, 0.05, 0.45, 0.85, 0.93, 1.0, 1.0],
            "held_out_ci_low": [0.0] * 7,
            "held_out_ci_high": [1.0] * 7,
        }
    )
    rows = readable_at(curve, split_pairs(32, 0.5, 0))
    assert [r["n_edges"] for r in rows] == [n for n in READABLE_SIZES if n <= 110]
    assert rows[1]["faithfulness"] == 0.5 and rows[1]["held_out"]["faithfulness"] == 0.45
    assert all(r["held_out"] is None for r in readable_at(curve, split_pairs(8, 0.5, 0)))  # too few to split


@pytest.mark.parametrize("held", [True, False])
def test_readable_line_sits_beside_the_size_reaching_the_target(held):
    from headlens.reports.api.circuit_text import _readable_lines

    ho = {"faithfulness": 0.4, "ci_low": 0.3, "ci_high": 0.5} if held else None
    rows = [{"n_edges": n, "faithfulness": 0.5, "ci_low": 0.4, "ci_high": 0.6, "held_out": ho} for n in (10, 20)]
    summary = {"readable": rows, "smallest_reaching_target": 39192, "target_faithfulness": 0.95, "graph": {"n_edges": 70651}}
    (line,) = _readable_lines(summary)
    shown = "0.40 [0.30, 0.50]" if held else "0.50 [0.40, 0.60]"
    assert f"top 10 {shown}, top 20 {shown}" in line
    assert line.endswith("the smallest reaching 0.95: 39,192 of 70,651 edges")
    assert ("held-out" in line) == held


def test_eap_ig_contracts_the_summed_gradient_as_it_did_each_step():
    """EAP-IG sums each reader's gradient over the steps and contracts once: the same as contracting every step."""
    from headlens.analyses.circuits.scores import _contract, _summed

    torch.manual_seed(0)
    b, n_send, p, d, k, steps = 3, 6, 5, 8, 4, 5
    block = (2, k, n_send)  # first edge id, slots, senders
    delta = torch.randn(b, n_send, p, d)
    grads = [torch.randn(b, p, k, d) for _ in range(steps)]
    per_step = torch.zeros(b, 2 + k * n_send, dtype=torch.float64)
    for g in grads:
        _contract(block, delta, per_step, 1.0 / steps)(g)
    sums: dict = {}
    for g in grads:
        _summed((0, "q"), sums)(g)
    once = torch.zeros_like(per_step)
    _contract(block, delta, once, 1.0 / steps)(sums[(0, "q")])
    torch.testing.assert_close(once, per_step, rtol=1e-5, atol=1e-5)
    assert not once[:, :2].any()  # edges of other blocks untouched
