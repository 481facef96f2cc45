"""Exact patching's two paths (probes/reader_rows.py): the fast blocks against the bridge's forwards, the fallback when a
control misses the base run, GPT-2's attention options, and the resolution rule.

The bridge path (a no-op hook on the model sends the forwards through it) is the reference here; the
independent brute force of every reader kind is in test_scores.test_exact_equals_brute_force, which runs
the fast blocks on GPT-2.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import headlens.probes.reader_rows as reader_rows
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.resolution import RESOLUTION_EPS, change
from headlens.analyses.patching.builtin import induction_task
from headlens.probes.fast_blocks import fast_blocks
from headlens.probes.hooks import attached

#: fast blocks against the bridge's forwards (float32, the same weights, other kernels).
ROUNDING_ATOL = 1e-5


def _noop(x, hook=None):
    return None


def _ragged(model, n=4, T=8):
    """An induction task whose items end at different positions (the metric read at each item's own last one)."""
    task = induction_task(model, n=n, T=T)
    full = int(task.lengths.max())
    task.lengths[:] = torch.tensor([full, full - 3, full - 5, full - 1][:n])
    return task


def test_fast_blocks_match_the_forwards_through_the_bridge(family_model):
    """Every edge of GPT-2, items of unequal lengths, several passes (max_rows=16) and one: the values of the bridge's
    forwards, and what the info says."""
    model = family_model("gpt2")
    graph = build_graph(model)
    task = _ragged(model)
    with attached(model.bridge, [("blocks.0.hook_resid_pre", _noop)]):
        ref = exact_scores(model, task, graph)
    assert ref.info["own_blocks"] is False and ref.info["own_blocks_reason"] == "hooks attached to the model"
    for max_rows in (16, None):
        got = exact_scores(model, task, graph, max_rows=max_rows)
        assert got.info["own_blocks"] is True and got.info["own_blocks_reason"] == ""
        assert np.abs(ref.values).max() > 1e-2 and (ref.values != 0).mean() > 0.2  # not a comparison between zeros
        np.testing.assert_allclose(got.values, ref.values, atol=ROUNDING_ATOL)
        np.testing.assert_allclose(got.clean, ref.clean, atol=ROUNDING_ATOL)
        np.testing.assert_allclose(got.corrupt, ref.corrupt, atol=ROUNDING_ATOL)


def test_a_control_that_misses_the_base_run_sends_the_forwards_through_the_bridge(family_model, monkeypatch, caplog):
    """Fast blocks that compute something else (every attention scale doubled): the controls miss the base run on the
    first pass, the sweep reruns through the bridge, its values are the bridge's, and the info and the log say why."""
    model = family_model("gpt2")
    graph = build_graph(model)
    task = induction_task(model, n=3, T=8)
    with attached(model.bridge, [("blocks.0.hook_resid_pre", _noop)]):
        ref = exact_scores(model, task, graph)

    def broken(m, **kw):
        own, why = fast_blocks(m, **kw)
        assert own is not None, why
        own.scale = [2 * s for s in own.scale]
        return own, why

    monkeypatch.setattr(reader_rows, "fast_blocks", broken)
    with caplog.at_level("INFO", logger="headlens.analyses.circuits.exact"):
        got = exact_scores(model, task, graph)
    assert got.info["own_blocks"] is False and "missed the base run" in got.info["own_blocks_reason"]
    assert any("missed the base run" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(got.values, ref.values)


def test_a_difference_below_the_resolution_is_no_change():
    eps = float(torch.finfo(torch.float32).eps)
    base = torch.tensor([1.0, 1.0, 100.0, 100.0, 0.0], dtype=torch.float64)
    patched = base + torch.tensor([RESOLUTION_EPS * eps * 0.9, 1e-5, 100 * RESOLUTION_EPS * eps * 0.9, 1e-3, -1e-7])
    got = change(patched, base, eps)
    assert got[0] == 0 and got[2] == 0 and got[4] == 0  # within 4 epsilons of max(1, |value|)
    assert got[1] == pytest.approx(1e-5) and got[3] == pytest.approx(1e-3)


#: fast blocks against the bridge's forwards in bfloat16: the two round differently (a joining row's stream is its control's
#: plus its head's change, the bridge's a sum of its own), each about as far from the float32 values (measured: 0.040-0.044
#: and 0.044-0.065 of values up to 0.96).
BF16_ATOL = 0.1


@pytest.mark.parametrize(
    ("flags", "dtype"), [({"reorder_and_upcast_attn": True}, "bfloat16"), ({"scale_attn_by_inverse_layer_idx": True}, "float32")]
)
def test_fast_blocks_follow_gpt2s_attention_flags(tmp_path, flags, dtype):
    """GPT-2's attention options the fast blocks mirror (scores and softmax in float32, which only bfloat16 shows; scale
    1/(layer+1)) on a 3-layer model, so that rows join at a block before the last one and at the last: the controls match
    the bridge's base values (else the info says the bridge ran), and every edge's value is the bridge's."""
    import transformers

    from headlens.analyses.synthetic.families import family_config
    from headlens.probes.loading import load_model
    from headlens.probes.scoped import torch_seed
    from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

    config = family_config("gpt2", n_layers=3, n_heads=4, d_model=32, n_ctx=32)
    for key, value in flags.items():
        setattr(config, key, value)
    with torch_seed(0):
        transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
    load_offline_gpt2_tokenizer(str(tmp_path / "tok")).save_pretrained(tmp_path)
    model = load_model(model=str(tmp_path), device="cpu", dtype=dtype)
    graph = build_graph(model)
    task = _ragged(model)
    with attached(model.bridge, [("blocks.0.hook_resid_pre", _noop)]):
        ref = exact_scores(model, task, graph)
    got = exact_scores(model, task, graph)
    assert got.info["own_blocks"] is True and ref.info["own_blocks"] is False
    assert np.abs(ref.values).max() > 0.5 and (ref.values != 0).mean() > 0.2
    np.testing.assert_allclose(got.values, ref.values, atol=ROUNDING_ATOL if dtype == "float32" else BF16_ATOL)
