"""Gemma 2's post-attention norm: edges with the norm recomputed in the reader's copy, against a brute force.

Gemma 2 adds ``post_attention_layernorm(o_proj(z))`` to the stream.  A head's edge moves that
head's ``z_h W_O[h]`` to the corrupted run's inside the reader's copy of the layer's attention
output and recomputes the norm there (:mod:`headlens.analyses.circuits.writes`).  The brute
force builds that copy from the Hugging Face modules alone (``o_proj``, the post-attention norm,
the reader's input norm and projection, with GQA: 2 key-value heads for 4 query heads),
sets the receiver's post-projection value to it in a plain forward of the bridge (no split
inputs, no late start), and compares: exact patching (eps = 1), EAP (the derivative in eps at 0),
and a circuit missing two heads of one layer into one reader (the norm of their joint swap, which
is not the sum of the two single swaps).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.run import run_circuit
from headlens.analyses.circuits.scores import attribution_scores
from headlens.analyses.circuits.writes import HEAD_SUM_NORM_NOTE
from headlens.analyses.patching.builtin import induction_task

#: exact edge patching / faithfulness vs the hand-built brute force (float32 forwards).
EXACT_ATOL = 2e-4
#: EAP vs the brute force's autograd derivative (float32).
EAP_ATOL = 1e-4

EDGES = [
    ("0.1", "1.2", "q"),
    ("0.3", "1.0+1.1", "k"),
    ("0.0", "1.2+1.3", "v"),
    ("0.2", "logits", "logits"),
    ("1.0", "logits", "logits"),
    ("0.1", "mlp0", "mlp"),
    ("1.3", "mlp1", "mlp"),
    ("embed", "0.0", "q"),
    ("mlp0", "1.1", "q"),
]


def _raw(module):
    return getattr(module, "original_component", None) or module


def _layer(model, layer):
    return _raw(model.bridge.original_model.model.layers[layer])


def _capture(bridge, names, tokens):
    got = {}

    def keep(n):
        def fn(x, hook=None):
            got[n] = x.detach().clone()

        return fn

    with torch.no_grad(), bridge.hooks(fwd_hooks=[(n, keep(n)) for n in names]):
        bridge(tokens)
    return got


def _change(model, gc, gk, senders):
    """What the reader's copy of the stream gains when ``senders`` move to the corrupted run (heads: one norm per layer)."""
    total = 0.0
    heads: dict[int, list[int]] = {}
    for s in senders:
        if s == "embed":
            total = total + gk["blocks.0.hook_resid_pre"] - gc["blocks.0.hook_resid_pre"]
        elif s.startswith("mlp"):
            n = f"blocks.{int(s[3:])}.hook_mlp_out"
            total = total + gk[n] - gc[n]
        else:
            layer, head = (int(x) for x in s.split("."))
            heads.setdefault(layer, []).append(head)
    dh = model.d_head
    for layer, hs in heads.items():
        blk = _layer(model, layer)
        o_proj, post = _raw(blk.self_attn.o_proj), _raw(blk.post_attention_layernorm)
        zc, zk = gc[f"blocks.{layer}.attn.hook_z"], gk[f"blocks.{layer}.attn.hook_z"]  # [b, p, head, d_head]
        a = o_proj(zc.flatten(2))
        moved = a.clone()
        for h in hs:
            w = o_proj.weight[:, h * dh : (h + 1) * dh]
            moved = moved + (zk[:, :, h] - zc[:, :, h]) @ w.T
        total = total + post(moved) - post(a)
    return total


def _brute(model, task, senders, receiver, which, eps):
    bridge, n_l = model.bridge, model.n_layers
    names = ["blocks.0.hook_resid_pre", f"blocks.{n_l - 1}.hook_resid_post"]
    for i in range(n_l):
        names += [f"blocks.{i}.attn.hook_z", f"blocks.{i}.hook_mlp_out", f"blocks.{i}.hook_resid_pre", f"blocks.{i}.hook_resid_mid"]
    gc, gk = _capture(bridge, names, task.clean), _capture(bridge, names, task.corrupt)
    step = _change(model, gc, gk, senders) * eps
    slot = None
    if which == "logits":
        hook, value = "ln_final.hook_in", gc[f"blocks.{n_l - 1}.hook_resid_post"] + step
    elif which == "mlp":
        layer = int(receiver[3:])
        norm = _raw(_layer(model, layer).pre_feedforward_layernorm)
        hook, value = f"blocks.{layer}.mlp.hook_in", norm(gc[f"blocks.{layer}.hook_resid_mid"] + step)
    else:
        layer = int(receiver.split(".")[0])
        slot = int(receiver.split("+")[0].split(".")[1])
        n_kv = int(bridge.cfg.n_key_value_heads)
        if which != "q":
            slot //= model.n_heads // n_kv
        blk = _layer(model, layer)
        proj = _raw(getattr(blk.self_attn, f"{which}_proj"))
        y = _raw(blk.input_layernorm)(gc[f"blocks.{layer}.hook_resid_pre"] + step) @ proj.weight.T
        dh = model.d_head
        hook, value = f"blocks.{layer}.attn.hook_{which}", y[..., slot * dh : (slot + 1) * dh]

    def replace(t, hook=None):
        t = t.clone()
        if slot is None:
            t[:] = value
        else:
            t[:, :, slot] = value
        return t

    with bridge.hooks(fwd_hooks=[(hook, replace)]):
        lg = bridge(task.clean)
    idx, last = torch.arange(len(task)), task.lengths - 1
    return lg[idx, last, task.correct] - lg[idx, last, task.incorrect]


@pytest.fixture(scope="module")
def gemma2(family_model):
    model = family_model("gemma2")
    graph = build_graph(model)
    task = induction_task(model, n=4, T=10)  # 21 tokens: past the even layers' window of 16
    with torch.no_grad():
        base = _brute(model, task, [], "logits", "logits", torch.zeros(len(task), 1, 1)).double().numpy()
    return model, graph, task, base


def test_graph_says_the_head_sum_is_normalised(gemma2):
    _model, graph, _task, _base = gemma2
    assert graph.info["head_sum_norm"] and graph.size()["head_sum_norm"]
    assert graph.info["n_kv_heads"] == 2


def test_exact_and_eap_equal_brute_force(gemma2):
    model, graph, task, base = gemma2
    ids = graph.index(EDGES)
    exact = exact_scores(model, task, graph, ids, max_rows=8)
    assert exact.info["head_skipped"] is False  # soft-capped logits (final_logit_softcapping 30): the head runs
    eap = attribution_scores(model, task, graph, steps=1).values[:, ids]
    for j, (s, r, w) in enumerate(EDGES):
        with torch.no_grad():
            want = _brute(model, task, [s], r, w, torch.ones(len(task), 1, 1)).double().numpy() - base
        assert np.abs(want).max() > 1e-3, f"{s}->{r} {w}: the brute-force patch does nothing, the check would be empty"
        np.testing.assert_allclose(exact.values[:, j], want, atol=EXACT_ATOL, err_msg=f"exact {s}->{r} {w}")
        eps = torch.zeros(len(task), 1, 1, requires_grad=True)
        (grad,) = torch.autograd.grad(_brute(model, task, [s], r, w, eps).sum(), [eps])
        d = grad.flatten().double().numpy()
        assert np.abs(d).max() > 1e-3, f"{s}->{r} {w}: zero derivative, the check would be empty"
        np.testing.assert_allclose(eap[:, j], d, atol=EAP_ATOL, err_msg=f"eap {s}->{r} {w}")


def test_circuit_recomputes_the_norm_on_each_readers_mix(gemma2):
    """Two heads of layer 0 left out of one reader: the reader's copy is N(a with both swapped), not the sum of
    the two single swaps; end points: every edge kept = clean, none = corrupted."""
    model, graph, task, base = gemma2
    n = len(graph.edges)
    pairs = {"q": [("0.1", "1.2", "q"), ("0.2", "1.2", "q")], "logits": [("0.0", "logits", "logits"), ("0.3", "logits", "logits")]}
    masks = [np.ones(n, bool), np.zeros(n, bool)]
    for edges in pairs.values():
        m = np.ones(n, bool)
        m[graph.index(edges)] = False
        masks.append(m)
    vals = circuit_values(model, task, graph, np.array(masks))
    ex = exact_scores(model, task, graph, graph.index([e for edges in pairs.values() for e in edges]))
    np.testing.assert_allclose(vals[0], ex.clean, atol=1e-4)
    np.testing.assert_allclose(vals[1], ex.corrupt, atol=1e-4)
    for i, edges in enumerate(pairs.values()):
        (s1, r, w), (s2, _, _) = edges
        with torch.no_grad():
            want = _brute(model, task, [s1, s2], r, w, torch.ones(len(task), 1, 1)).double().numpy() - base
        np.testing.assert_allclose(vals[2 + i] - ex.clean, want, atol=EXACT_ATOL, err_msg=f"{s1}+{s2}->{r}")
        additive = ex.values[:, 2 * i] + ex.values[:, 2 * i + 1]
        assert np.abs(want - additive).max() > 10 * EXACT_ATOL  # the joint swap is not the sum: the check can fail


def test_run_notes_the_assumption(gemma2):
    model, graph, task, _base = gemma2
    run = run_circuit(model, task, CircuitConfig(method="eap", top_n=5, confirm=2, n_bootstrap=20, curve_points=2), graph=graph)
    assert HEAD_SUM_NORM_NOTE in run.notes
    assert run.summary["graph"]["head_sum_norm"]
    assert run.summary["forwards"]["exact_blocks"].startswith("bridge: ")  # Gemma 2's confirmations: through the bridge, and why
