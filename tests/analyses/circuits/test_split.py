"""Edges of the families whose attention runs inside Hugging Face (GPT-Neo, OPT, GPT-J), against a brute force.

Their q/k/v readers are split by headlens' own hooks (:mod:`headlens.analyses.circuits.split`).
The brute force builds one edge's patch from the Hugging Face modules alone: the receiver's
post-projection value (``hook_q``/``hook_k``/``hook_v``, the MLP's first linear layer's input,
or the final norm's input) is set to ``proj(norm(stream + eps * delta))`` with the HF model's
own norm and projection weights, in a plain forward of the bridge with no split inputs and no
late start.  ``eps = 1``: the exact patch; the derivative in ``eps`` at 0 (autograd): the EAP
estimate.  GPT-J's block is parallel with one shared ``ln_1``: its MLP edges are checked too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.scores import attribution_scores
from headlens.analyses.patching.builtin import induction_task
from headlens.probes.errors import UnsupportedModelError

#: exact edge patching vs the hand-built brute force (float32 forwards).
EXACT_ATOL = 2e-4
#: EAP vs the brute force's autograd derivative (float32; both one backward).
EAP_ATOL = 1e-4

FAMILIES = ("gpt_neo", "opt", "gptj")

EDGES = {
    "gpt_neo": [("embed", "0.1", "q"), ("0.2", "1.3", "k"), ("0.0", "1.1", "v"), ("1.2", "logits", "logits"), ("1.2", "mlp1", "mlp")],
    "opt": [("embed", "0.2", "k"), ("0.0", "1.0", "q"), ("mlp0", "1.3", "v"), ("0.0", "logits", "logits"), ("0.2", "mlp0", "mlp")],
    "gptj": [
        ("embed", "0.3", "v"),
        ("0.0", "1.2", "q"),
        ("mlp0", "1.1", "k"),
        ("1.1", "logits", "logits"),
        ("0.2", "mlp1", "mlp"),
        ("embed", "mlp0", "mlp"),
    ],
}


def _raw(module):
    return getattr(module, "original_component", None) or module


def _parts(model, fam, layer):
    """(input norm, attention, MLP norm, MLP reads the block input) of one HF block."""
    hf = model.bridge.original_model
    if fam == "gpt_neo":
        blk = _raw(hf.transformer.h[layer])  # GPTNeoBlock -> GPTNeoAttention -> GPTNeoSelfAttention
        return _raw(blk.ln_1), _raw(_raw(blk.attn).attention), _raw(blk.ln_2), False
    if fam == "opt":
        blk = _raw(hf.model.decoder.layers[layer])
        return _raw(blk.self_attn_layer_norm), _raw(blk.self_attn), _raw(blk.final_layer_norm), False
    blk = _raw(hf.transformer.h[layer])
    return _raw(blk.ln_1), _raw(blk.attn), _raw(blk.ln_1), True


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
    if sender.startswith("mlp"):
        return got[f"blocks.{int(sender[3:])}.hook_mlp_out"]
    layer, head = (int(x) for x in sender.split("."))
    z = got[f"blocks.{layer}.attn.hook_z"][:, :, head]  # [b, p, d_head]
    out_proj = _raw(_parts(model, fam, layer)[1].out_proj)
    dh = model.d_head
    return z @ out_proj.weight[:, head * dh : (head + 1) * dh].T


def _brute(model, fam, task, sender, receiver, which, eps):
    """The metric (logit difference, per pair) with ``eps * delta`` of the edge added to the receiver's input."""
    bridge = model.bridge
    n_l = model.n_layers
    names = ["blocks.0.hook_resid_pre"]
    for i in range(n_l):
        names += [f"blocks.{i}.attn.hook_z", f"blocks.{i}.hook_mlp_out", f"blocks.{i}.hook_resid_pre"]
        if fam != "gptj":
            names.append(f"blocks.{i}.hook_resid_mid")
    names.append(f"blocks.{n_l - 1}.hook_resid_post")
    gc, gk = _capture(bridge, names, task.clean), _capture(bridge, names, task.corrupt)
    delta = _sender_out(model, fam, gk, sender) - _sender_out(model, fam, gc, sender)
    dh = model.d_head
    step = delta * eps
    slot = None
    if which == "logits":
        hook, value = "ln_final.hook_in", gc[f"blocks.{n_l - 1}.hook_resid_post"] + step
    elif which == "mlp":
        layer = int(receiver[3:])
        _ln1, _attn, ln2, reads_pre = _parts(model, fam, layer)
        stream = gc[f"blocks.{layer}.hook_resid_pre"] if reads_pre else gc[f"blocks.{layer}.hook_resid_mid"]
        hook, value = f"blocks.{layer}.mlp.in.hook_in", ln2(stream + step)
    else:
        layer, slot = int(receiver.split(".")[0]), int(receiver.split(".")[1])
        ln1, attn, _ln2, _ = _parts(model, fam, layer)
        proj = _raw(getattr(attn, f"{which}_proj"))
        y = ln1(gc[f"blocks.{layer}.hook_resid_pre"] + step) @ proj.weight.T
        if proj.bias is not None:
            y = y + proj.bias
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


def _hook_count(model):
    """Torch hooks on the bridge's modules, after one forward (the bridge wires its own capture hooks at its first)."""
    with torch.no_grad():
        model.bridge(torch.arange(3, 7)[None])
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.bridge.modules())


@pytest.mark.parametrize("fam", FAMILIES)
def test_exact_and_eap_equal_brute_force(family_model, fam):
    model = family_model(fam)
    graph = build_graph(model)
    task = induction_task(model, n=4, T=10)  # 21 tokens: past GPT-Neo's local window of 16
    ids = graph.index(EDGES[fam])
    before = _hook_count(model)
    exact = exact_scores(model, task, graph, ids, max_rows=8)  # two copies per forward: chunks and late starts
    eap = attribution_scores(model, task, graph, steps=1).values[:, ids]
    assert _hook_count(model) == before  # every hook of the split readers removed
    assert not model.bridge.cfg.use_split_qkv_input and not model.bridge.cfg.use_hook_mlp_in  # flags restored
    with torch.no_grad():
        base = _brute(model, fam, task, *EDGES[fam][0], torch.zeros(len(task), 1, 1)).double().numpy()
    for j, (s, r, w) in enumerate(EDGES[fam]):
        with torch.no_grad():
            want = (_brute(model, fam, task, s, r, w, torch.ones(len(task), 1, 1)).double().numpy()) - base
        assert np.abs(want).max() > 1e-3, f"{fam} {s}->{r} {w}: the brute-force patch does nothing, the check would be empty"
        np.testing.assert_allclose(exact.values[:, j], want, atol=EXACT_ATOL, err_msg=f"exact {fam} {s}->{r} {w}")
        eps = torch.zeros(len(task), 1, 1, requires_grad=True)
        (grad,) = torch.autograd.grad(_brute(model, fam, task, s, r, w, eps).sum(), [eps])
        d = grad.flatten().double().numpy()
        assert np.abs(d).max() > 1e-3, f"{fam} {s}->{r} {w}: zero derivative, the check would be empty"
        np.testing.assert_allclose(eap[:, j], d, atol=EAP_ATOL, err_msg=f"eap {fam} {s}->{r} {w}")


def test_parallel_block_faithfulness_end_points(family_model):
    """GPT-J: with every edge kept the circuit is the clean run, with none the corrupted one (each MLP's own copy of ln_1's input)."""
    model = family_model("gptj")
    graph = build_graph(model)
    assert graph.info["parallel_attn_mlp"]
    task = induction_task(model, n=4, T=8)
    n = len(graph.edges)
    vals = circuit_values(model, task, graph, np.array([np.ones(n, bool), np.zeros(n, bool)]))
    ex = exact_scores(model, task, graph, [0])
    np.testing.assert_allclose(vals[0], ex.clean, atol=1e-4)
    np.testing.assert_allclose(vals[1], ex.corrupt, atol=1e-4)
    assert np.abs(ex.clean - ex.corrupt).max() > 0.01


def test_projection_that_does_not_read_the_block_norm_is_refused(family_model):
    """A q projection fed something other than the block input's norm (here: shifted by a hook of the test's,
    as OPT-350m's post-norm blocks would feed the raw stream) makes the split readers wrong: refused in one line."""
    model = family_model("opt")
    task = induction_task(model, n=2, T=6)
    q = _raw(_parts(model, "opt", 1)[1].q_proj)
    before = _hook_count(model)
    shift = q.register_forward_pre_hook(lambda _m, args: (args[0] + 1.0, *args[1:]))
    try:
        with pytest.raises(UnsupportedModelError, match=r"blocks\.1\.attn\.q does not read its block's input norm") as err:
            attribution_scores(model, task, build_graph(model))
    finally:
        shift.remove()
    assert "\n" not in str(err.value)
    assert _hook_count(model) == before


def test_bfloat16_is_not_refused(family_checkpoint, family_model):
    """In bfloat16 the split projections and the readers' sums carry rounding of ~2e-3: the checks' bounds
    scale with the dtype's epsilon, so a bfloat16 GPT-J is scored, close to its float32 scores (the
    session's float32 GPT-J: ``load_model``'s default dtype)."""
    from headlens.probes.loading import load_model

    folder = str(family_checkpoint("gptj"))
    scores = {}
    for dtype in ("float32", "bfloat16"):
        model = family_model("gptj") if dtype == "float32" else load_model(model=folder, device="cpu", dtype=dtype)
        assert next(model.bridge.parameters()).dtype == getattr(torch, dtype)
        task = induction_task(model, n=2, T=6)
        scores[dtype] = attribution_scores(model, task, build_graph(model)).values.mean(0)
    ref, low = scores["float32"], scores["bfloat16"]
    assert np.isfinite(low).all()
    assert np.corrcoef(ref, low)[0, 1] > 0.95
