"""The edge graph: its size formula against the enumeration and against TransformerLens' own graph, GQA and
parallel blocks on every family of the test matrix, and the one-line refusal of encoders."""

from __future__ import annotations

import pytest

from headlens.analyses.circuits.graph import build_graph, expected_edge_count
from headlens.analyses.circuits.scores import attribution_scores
from headlens.analyses.patching.builtin import induction_task
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.errors import UnsupportedModelError


def test_gpt2_small_size():
    # per layer l: 3 * 12 head inputs and one MLP input fed by 1 + 13 l writers (+ the layer's 12 heads for the MLP);
    # logits by all 157: 36 * 870 + 1014 + 157
    assert expected_edge_count(12, 12) == 32_491


@pytest.mark.parametrize("fam", FAMILIES)
def test_enumeration_matches_formula(family_model, fam):
    model = family_model(fam)
    g = build_graph(model)
    info = g.info
    assert len(g.edges) == expected_edge_count(info["n_layers"], info["n_heads"], info["n_kv_heads"], info["parallel_attn_mlp"])
    assert not g.edges.duplicated(["sender", "receiver", "input"]).any()
    e = g.edges
    earlier = e["sender_layer"] < e["receiver_layer"]
    same_layer_head_to_mlp = (e["input"] == "mlp") & (e["sender_kind"] == "head") & (e["sender_layer"] == e["receiver_layer"])
    assert (earlier | same_layer_head_to_mlp).all()  # every writer precedes its reader
    if fam == "llama":  # GQA: 2 kv heads for 4 query heads
        assert info["n_kv_heads"] == 2
        assert set(g.edges.loc[g.edges["input"] == "k", "receiver"]) == {"0.0+0.1", "0.2+0.3", "1.0+1.1", "1.2+1.3"}
    assert info["parallel_attn_mlp"] == (fam in ("gpt_neox", "gptj"))
    assert info["head_sum_norm"] == (fam == "gemma2")
    if fam in ("gpt_neox", "gptj"):  # parallel attention and MLP: a layer's heads do not feed its MLP
        assert info["parallel_attn_mlp"]
        assert not ((g.edges["input"] == "mlp") & (g.edges["sender_layer"] == g.edges["receiver_layer"])).any()


def test_same_edges_as_transformer_lens(tiny_model):
    """TransformerLens' enumerate_edges at one position is this graph (MHA, sequential blocks)."""
    import torch
    from transformer_lens.tools.analysis.attribution_patching import GradientCache, enumerate_edges

    g = build_graph(tiny_model)
    n_l, n_h, d = tiny_model.n_layers, tiny_model.n_heads, tiny_model.bridge.cfg.d_model
    acts = {"hook_embed": torch.zeros(1, 1, d), f"blocks.{n_l - 1}.hook_resid_post": torch.zeros(1, 1, d)}
    for layer in range(n_l):
        acts[f"blocks.{layer}.attn.hook_z"] = torch.zeros(1, 1, n_h, tiny_model.d_head)
        for name in ("hook_mlp_out", "hook_mlp_in"):
            acts[f"blocks.{layer}.{name}"] = torch.zeros(1, 1, d)
        for name in ("hook_result", "hook_q_input", "hook_k_input", "hook_v_input"):
            acts[f"blocks.{layer}.attn.{name}"] = torch.zeros(1, 1, n_h, d)
    edges = enumerate_edges(tiny_model.bridge, GradientCache(activations=acts, gradients={}, metric=torch.zeros(())))
    assert len(edges) == len(g.edges)


def test_encoders_are_refused(family_model):
    """An encoder's heads read the whole sequence and its blocks are post-norm: no edge graph, in one line."""
    model = family_model("bert")
    task = induction_task(model, n=2, T=6)
    with pytest.raises(UnsupportedModelError, match="encoders are not supported") as err:
        attribution_scores(model, task, build_graph(model))
    assert "\n" not in str(err.value)
    assert not model.bridge.cfg.use_split_qkv_input and not model.bridge.cfg.use_hook_mlp_in  # flags untouched
