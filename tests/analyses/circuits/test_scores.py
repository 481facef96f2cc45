"""Exact edge patching against an independent brute force, faithfulness end points, and bad settings.

The brute force computes one edge's patch by hand from the Hugging Face modules: the receiver's
post-projection input (``hook_q``/``hook_k``/``hook_v``, the MLP's post-norm input, or the final
norm's input) rebuilt as ``proj(norm(stream + delta))`` with the HF model's own norm and
projection weights, in a plain forward of the bridge with its split-input flags off and no late
start.  GPT-2 (MHA, LayerNorm, biases), Llama (GQA: 2 key-value heads for 4 query heads, RMSNorm,
rotary) and Mistral (GQA and a sliding window of 16 keys, on 21-token inputs).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.cost import MAX_AUTO_ROWS, MIN_AUTO_ROWS, auto_rows
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.hooks import check_edge_model, edge_flags
from headlens.analyses.circuits.readout import AFTER_HEAD, at_last, readout_of
from headlens.analyses.circuits.run import run_circuit
from headlens.analyses.circuits.scores import attribution_scores
from headlens.analyses.circuits.summary import stability
from headlens.analyses.patching.builtin import induction_task
from headlens.probes.errors import InputError, UnsupportedModelError
from headlens.probes.hooks import attached

#: exact edge patching vs the hand-built brute force (float32 forwards).
EXACT_ATOL = 2e-4
#: a late-started forward in copies against the full forward of the batch (float32).
ROUNDING_ATOL = 1e-5


def _capture(bridge, names, tokens):
    got = {}

    def keep(n):
        def fn(x, hook=None):
            got[n] = x.detach().clone()

        return fn

    with torch.no_grad(), bridge.hooks(fwd_hooks=[(n, keep(n)) for n in names]):
        bridge(tokens)
    return got


def _sender_out(model, fam, got, sender):
    if sender == "embed":
        return got["blocks.0.hook_resid_pre"]
    layer, head = (int(x) for x in sender.split("."))
    z = got[f"blocks.{layer}.attn.hook_z"][:, :, head]  # [b, p, d_head]
    hf = model.bridge.original_model
    dh = model.d_head
    if fam == "gpt2":
        w = hf.transformer.h[layer].attn.c_proj.weight[head * dh : (head + 1) * dh]  # Conv1D [in, out]
        return z @ w
    w = hf.model.layers[layer].self_attn.o_proj.weight[:, head * dh : (head + 1) * dh]
    return z @ w.T


def _brute(model, fam, task, sender, receiver, which):
    """Noising patch of one edge, per pair: patched - clean logit difference."""
    bridge, hf = model.bridge, model.bridge.original_model
    clean, corrupt = task.clean, task.corrupt
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.attn.hook_z" for i in range(model.n_layers)]
    names += [f"blocks.{i}.hook_resid_pre" for i in range(model.n_layers)] + [f"blocks.{i}.hook_resid_mid" for i in range(model.n_layers)]
    names += [f"blocks.{model.n_layers - 1}.hook_resid_post"]
    gc, gk = _capture(bridge, names, clean), _capture(bridge, names, corrupt)
    delta = _sender_out(model, fam, gk, sender) - _sender_out(model, fam, gc, sender)
    dh = model.d_head
    if which == "logits":
        x = gc[f"blocks.{model.n_layers - 1}.hook_resid_post"] + delta
        hook, value = "ln_final.hook_in", x
        slot = None
    elif which == "mlp":
        layer = int(receiver[3:])
        x = gc[f"blocks.{layer}.hook_resid_mid"] + delta
        ln = hf.transformer.h[layer].ln_2 if fam == "gpt2" else hf.model.layers[layer].post_attention_layernorm
        hook, value, slot = f"blocks.{layer}.mlp.hook_in", ln(x), None
    else:
        layer = int(receiver.split(".")[0])
        slot = int(receiver.split("+")[0].split(".")[1])
        n_kv = int(getattr(bridge.cfg, "n_key_value_heads", None) or model.n_heads)
        if which != "q":
            slot //= model.n_heads // n_kv
        x = gc[f"blocks.{layer}.hook_resid_pre"] + delta
        if fam == "gpt2":
            blk = hf.transformer.h[layer]
            d = model.bridge.cfg.d_model
            i = "qkv".index(which)
            cols = slice(i * d + slot * dh, i * d + (slot + 1) * dh)
            y = blk.ln_1(x) @ blk.attn.c_attn.weight[:, cols] + blk.attn.c_attn.bias[cols]
        else:
            blk = hf.model.layers[layer]
            proj = getattr(blk.self_attn, f"{which}_proj")
            y = (blk.input_layernorm(x) @ proj.weight.T)[..., slot * dh : (slot + 1) * dh]
        hook, value = f"blocks.{layer}.attn.hook_{which}", y
    value = value.detach()

    def replace(t, hook=None):
        t = t.clone()
        if slot is None:
            t[:] = value
        else:
            t[:, :, slot] = value
        return t

    with torch.no_grad():
        base = bridge(clean)
        with bridge.hooks(fwd_hooks=[(hook, replace)]):
            patched = bridge(clean)
    idx = torch.arange(len(task))
    last = task.lengths - 1

    def ld(lg):
        return (lg[idx, last, task.correct] - lg[idx, last, task.incorrect]).double().numpy()

    return ld(patched) - ld(base)


EDGES = {
    "gpt2": [("embed", "0.1", "q"), ("0.2", "1.3", "k"), ("0.0", "1.1", "v"), ("1.2", "logits", "logits"), ("0.3", "mlp1", "mlp")],
    "llama": [
        ("embed", "0.1", "q"),
        ("0.2", "1.0+1.1", "k"),
        ("0.3", "1.2+1.3", "v"),
        ("1.0", "logits", "logits"),
        ("embed", "mlp0", "mlp"),
    ],
    "mistral": [("0.1", "1.3", "q"), ("0.0", "1.2+1.3", "k"), ("embed", "0.0+0.1", "v"), ("0.3", "logits", "logits")],
}


@pytest.mark.parametrize("fam", ["gpt2", "llama", "mistral"])
def test_exact_equals_brute_force(family_model, fam):
    model = family_model(fam)
    graph = build_graph(model)
    task = induction_task(model, n=4, T=10)  # 21 tokens: past Mistral's window of 16
    ids = graph.index(EDGES[fam])
    got = exact_scores(model, task, graph, ids, max_rows=8)  # two copies per forward: chunks and late starts
    for j, (s, r, w) in enumerate(EDGES[fam]):
        want = _brute(model, fam, task, s, r, w)
        assert np.abs(want).max() > 1e-3, f"{fam} {s}->{r} {w}: the brute-force patch does nothing, the check would be empty"
        np.testing.assert_allclose(got.values[:, j], want, atol=EXACT_ATOL, err_msg=f"{fam} {s}->{r} {w}")
    assert got.info["started_late"] is True  # readers at layer 1: those forwards start there, checked by their control row
    assert got.info["head_skipped"] is True  # logit-diff read from the head's input: the output head never ran on a patch
    # GPT-2's patched forwards run outside the bridge (own_blocks); the other families' through it, saying why
    assert got.info["own_blocks"] is (fam == "gpt2"), got.info["own_blocks_reason"]
    assert (got.info["own_blocks_reason"] == "") is (fam == "gpt2")
    assert not model.bridge.cfg.use_split_qkv_input and not model.bridge.cfg.use_hook_mlp_in  # flags restored


def test_default_rows_match_small_chunks(family_model):
    """The default chunk size (every row of a start block in one forward on these tiny models) gives the values of
    2-copy chunks; auto_rows stays within its bounds and shrinks as the inputs grow."""
    model = family_model("gpt2")
    graph = build_graph(model)
    task = induction_task(model, n=4, T=8)
    small = exact_scores(model, task, graph, max_rows=8)
    auto = exact_scores(model, task, graph)
    assert auto.info["own_blocks"] is True  # GPT-2: the patched forwards run outside the bridge, in a budget of their own
    assert small.info["max_rows"] == 8 and auto.info["max_rows"] == auto_rows(model, int(task.lengths.max()), own=True)
    assert auto.info["max_rows"] > len(task) * len(graph.edges) / (model.n_layers + 1)  # few forwards: one per start block here
    np.testing.assert_allclose(auto.values, small.values, atol=ROUNDING_ATOL)
    np.testing.assert_array_equal(auto.clean, small.clean)
    for own in (False, True):
        sizes = [auto_rows(model, w, own=own) for w in (1, 64, 4096)]
        assert all(MIN_AUTO_ROWS <= r <= MAX_AUTO_ROWS for r in sizes) and sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    assert auto_rows(model, 64, own=True) > auto_rows(model, 64)  # no split copies, no logits


@pytest.mark.parametrize("via", ["check_edge_model", "exact_scores"])
def test_readers_that_do_not_read_the_writers_sum_are_refused(family_model, via):
    """A stream scaled between the blocks (the kind of model the additivity check exists for): refused in one line,
    by the check's own probe forward and by exact patching's capture forward, which runs that check in its place."""
    model = family_model("gpt2")
    graph = build_graph(model)
    task = induction_task(model, n=2, T=6)

    def double(x, hook=None):
        return 2 * x

    with attached(model.bridge, [("blocks.1.hook_resid_pre", double)]), pytest.raises(UnsupportedModelError) as err:
        if via == "check_edge_model":
            with edge_flags(model):
                check_edge_model(model, graph)
        else:
            exact_scores(model, task, graph)
    assert "read the sum of the writers" in str(err.value) and "blocks.1." in str(err.value) and "\n" not in str(err.value)
    assert not model.bridge.cfg.use_split_qkv_input and not model.bridge.cfg.use_hook_mlp_in  # flags restored
    assert exact_scores(model, task, graph).values.shape == (2, len(graph.edges))  # the hook is gone: the model is accepted again


def test_a_scale_after_the_head_makes_the_head_run(family_model):
    """Logits doubled after the output head (what soft-capping or a logit scale does to the readout's assumption): the
    base run's logit differences read from the head's input miss its logits, so the head runs, and every value is the
    doubled one; without that check the values would be the undoubled ones."""
    model = family_model("gpt2")
    graph = build_graph(model)
    task = induction_task(model, n=3, T=8)
    plain = exact_scores(model, task, graph)

    def double(x, hook=None):
        return 2 * x

    with attached(model.bridge, [("unembed.hook_out", double)]):
        got = exact_scores(model, task, graph)
    assert plain.info["head_skipped"] is True and got.info["head_skipped"] is False
    assert np.abs(plain.values).max() > 1e-2  # the comparison below is not between zeros
    np.testing.assert_allclose(got.values, 2 * plain.values, atol=2 * ROUNDING_ATOL)


def test_a_config_that_changes_the_logits_after_the_head_is_read_through_the_head(family_model):
    """readout_of: None where the config says the logits change after the head (soft-capping, a scale), whatever the
    base run's check would say; a plain GPT-2 head is read from its input under logit-diff only."""
    model = family_model("gpt2")
    config = model.bridge.original_model.config
    assert readout_of(model, "logit-diff") is not None and readout_of(model, "loss") is None
    for field in AFTER_HEAD:
        had, saved = hasattr(config, field), getattr(config, field, None)
        try:
            setattr(config, field, 0.5)
            assert readout_of(model, "logit-diff") is None, field
        finally:
            if had:
                setattr(config, field, saved)
            else:
                delattr(config, field)
        assert hasattr(config, field) == had
    assert readout_of(model, "logit-diff") is not None


def test_at_last_reads_each_rows_last_position():
    """The base run's head input comes at every position, or under logits_to_keep at the sorted distinct last
    positions only; both give each row's last position, and anything else is refused (the head then runs)."""
    x = torch.arange(3 * 5 * 2, dtype=torch.float32).reshape(3, 5, 2)
    lengths = torch.tensor([5, 3, 3])
    want = x[torch.tensor([0, 1, 2]), torch.tensor([4, 2, 2])]
    assert torch.equal(at_last(x, lengths, 5), want)
    assert torch.equal(at_last(x[:, [2, 4]], lengths, 5), want)
    with pytest.raises(ValueError, match="neither all 5 nor the 2 last ones"):
        at_last(x[:, :3], lengths, 5)


def test_identical_inputs_give_zero_scores(family_model):
    """Clean = corrupt: every sender's difference is 0, so every estimate is exactly 0 and every exact patch 0 up to
    float32 rounding (the patched forwards start late, in copies; the base run is one full forward)."""
    model = family_model("gpt2")
    graph = build_graph(model)
    task = induction_task(model, n=3, T=6)
    task.corrupt[:] = task.clean
    for got in (
        attribution_scores(model, task, graph, steps=1),
        attribution_scores(model, task, graph, steps=3),
        exact_scores(model, task, graph),
    ):
        assert got.values.shape == (3, len(graph.edges))
        tol = ROUNDING_ATOL if got.method == "exact" else 0.0
        assert np.abs(got.values).max() <= tol, got.method
        if got.method == "exact":  # no sender moves, so no patched forward ran: none started late
            assert got.info["started_late"] is False


def test_faithfulness_end_points_are_the_clean_and_corrupted_runs(family_model):
    model = family_model("llama")
    graph = build_graph(model)
    task = induction_task(model, n=4, T=8)
    n = len(graph.edges)
    vals = circuit_values(model, task, graph, np.array([np.ones(n, bool), np.zeros(n, bool)]))
    ex = exact_scores(model, task, graph, [0])
    np.testing.assert_allclose(vals[0], ex.clean, atol=1e-4)
    np.testing.assert_allclose(vals[1], ex.corrupt, atol=1e-4)
    assert np.abs(ex.clean - ex.corrupt).max() > 0.01


def test_bad_settings_are_one_line_errors(family_model):
    model = family_model("gpt2")
    task = induction_task(model, n=4, T=6)
    for kw in ({"steps": 0}, {"method": "acdc"}, {"top_n": 0}, {"top_n": 3, "threshold": 0.1}, {"method": "eap-ig", "steps": 1}):
        with pytest.raises(InputError):
            CircuitConfig(**kw)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="top_n=100000 is above"):
        run_circuit(model, task, CircuitConfig(top_n=100000))
    with pytest.raises(InputError, match="steps"):
        attribution_scores(model, task, build_graph(model), steps=0)


def test_stability_counts_resamples_that_select_the_edge():
    rng = np.random.default_rng(0)
    x = np.stack([np.ones(20), 0.95 + rng.normal(0, 0.5, 20), np.zeros(20)], axis=1)  # [pair, edge]
    st = stability(x, np.ones(20), top_n=1, threshold=None, n_bootstrap=400, seed=0)
    assert st.sum() == pytest.approx(1.0)  # one edge selected per resample
    assert 0.5 < st[0] < 1.0 and 0.0 < st[1] < 0.5 and st[2] == 0.0
    assert (stability(x, np.ones(20), top_n=2, threshold=None, n_bootstrap=50)[:2] == 1.0).all()


def test_stability_needs_the_full_samples_sign():
    """An edge picked by |score| in every resample but whose sign flips is not stable: a resample
    counts only when it selects the edge with the sign the edge has on all pairs."""
    rng = np.random.default_rng(1)
    flip = np.tile([5.0, -4.6], 4) + rng.normal(0, 0.01, 8)  # mean ~ +0.2, resampled means of either sign
    x = np.stack([flip, np.full(8, 0.01)], axis=1)  # [pair, edge]
    for rule in ({"top_n": 1, "threshold": None}, {"top_n": None, "threshold": 0.05}):
        st = stability(x, np.ones(8), n_bootstrap=400, seed=0, **rule)
        boot = rng.multinomial(8, np.full(8, 1 / 8), size=4000) @ flip
        assert st[0] == pytest.approx(float((boot > 0).mean()), abs=0.08) and st[0] < 0.8
    assert (stability(-x, np.ones(8), top_n=2, threshold=None, n_bootstrap=50)[1] == 1.0).all()  # one sign throughout: stable


@pytest.mark.parametrize("fam", ["gpt2", "gemma2"])
def test_sender_chunks_give_the_same_scores(family_model, fam):
    """Edges scored in chunks of edge subsets (the senders of at most max_senders at a time; Gemma 2's normalised
    heads kept together) equal the one-pass scores, at one pass of forwards and backwards per chunk."""
    from headlens.analyses.circuits.scores import sender_windows

    model = family_model(fam)
    graph = build_graph(model)
    task = induction_task(model, n=3, T=8)
    windows = sender_windows(graph, 3)  # 4 heads per layer: every unit alone, the embeddings with nothing else
    assert windows == [(0, 1), (1, 5), (5, 6), (6, 10), (10, 11)]
    assert sender_windows(graph, 6) == [(0, 6), (6, 11)] and sender_windows(graph, None) == [(0, 11)]
    for steps in (1, 3):
        whole = attribution_scores(model, task, graph, steps=steps)
        chunked = attribution_scores(model, task, graph, steps=steps, max_senders=3)
        np.testing.assert_allclose(chunked.values, whole.values, atol=1e-6, rtol=1e-5)
        assert np.abs(whole.values).max() > 1e-2
        assert chunked.forwards == 5 * whole.forwards
    with pytest.raises(InputError):
        attribution_scores(model, task, graph, max_senders=0)
