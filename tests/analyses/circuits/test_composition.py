"""Weight-based composition (analyses/circuits/composition.py): equal to TransformerLens'
``all_composition_scores`` (raw weights and TL's processed weights), to a dense plain-torch
computation from the Hugging Face weights (GQA included), the planted circuit, the demo model's
induction circuit above its random baseline, OV copying scores."""

from __future__ import annotations

import pytest
import torch

from headlens.analyses.circuits.composition import (
    MODES,
    CompositionConfig,
    check_composition_config,
    head_weights,
    mode_scores,
    pair_scores,
    random_baseline,
    run_composition,
)
from headlens.analyses.circuits.composition_evidence import composition_note
from headlens.probes.errors import InputError
from tests.helpers import assert_close

#: Composition scores against TransformerLens: the issue's figure.
TL_TOL = 1e-5


@pytest.fixture(scope="module")
def tl_processed(tiny_checkpoint):
    """The tiny GPT-2 checkpoint booted by TransformerLens itself with its weights processed
    (fold_ln, center_writing_weights, center_unembed: ``enable_compatibility_mode``)."""
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(str(tiny_checkpoint), device="cpu")
    bridge.enable_compatibility_mode()
    return bridge


@pytest.mark.parametrize("mode", MODES)
def test_equal_to_transformer_lens_raw(tiny_model, mode):
    ours = mode_scores(head_weights(tiny_model, fold_ln=False), mode)
    theirs = tiny_model.bridge.all_composition_scores(mode.upper()).scores.detach().double()
    assert ours.shape == theirs.shape == (2, 4, 2, 4)
    assert float((ours - theirs).abs().max()) <= TL_TOL
    assert float(theirs.abs().max()) > 0.05  # not two zero tensors


@pytest.mark.parametrize("mode", MODES)
def test_folded_equal_to_transformer_lens_processed_weights(tiny_model, tl_processed, mode):
    """Our analytic folding of the raw weights = TL's process_weights then all_composition_scores."""
    ours = mode_scores(head_weights(tiny_model, fold_ln=True), mode)
    theirs = tl_processed.all_composition_scores(mode.upper()).scores.detach().double()
    assert float((ours - theirs).abs().max()) <= TL_TOL
    raw = mode_scores(head_weights(tiny_model, fold_ln=False), mode)
    assert float((raw - theirs).abs().max()) > 10 * TL_TOL  # folding changes the numbers: the test can tell


def _dense_score(a, b):
    return float(torch.linalg.norm(a @ b) / (torch.linalg.norm(a) * torch.linalg.norm(b)))


def test_gqa_dense_from_hf_weights(family_model):
    """Llama with 4 query / 2 KV heads: every score equals a dense d_model x d_model computation
    from the checkpoint's q_proj/k_proj/v_proj/o_proj and input_layernorm (independent of the bridge)."""
    model = family_model("llama")
    hf = model.bridge.original_model
    cfg = hf.config
    n_h, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    assert n_kv < n_h
    d_head = cfg.hidden_size // n_h
    layers = hf.model.layers

    def mats(layer, head):
        attn, gain = layers[layer].self_attn, layers[layer].input_layernorm.weight.double()
        kv = head // (n_h // n_kv)
        sl, kl = slice(head * d_head, (head + 1) * d_head), slice(kv * d_head, (kv + 1) * d_head)
        wq = gain[:, None] * attn.q_proj.weight.double()[sl].T
        wk = gain[:, None] * attn.k_proj.weight.double()[kl].T
        wv = gain[:, None] * attn.v_proj.weight.double()[kl].T
        wo = attn.o_proj.weight.double()[:, sl].T
        return wq, wk, wv, wo

    ours = {m: mode_scores(head_weights(model, fold_ln=True), m) for m in MODES}
    with torch.no_grad():
        for s in range(n_h):
            for r in range(n_h):
                _, _, sv, so = mats(0, s)
                rq, rk, rv, ro = mats(1, r)
                ov = sv @ so
                expected = {"q": _dense_score(ov, rq @ rk.T), "k": _dense_score(ov, rk @ rq.T), "v": _dense_score(ov, rv @ ro)}
                for m in MODES:
                    assert abs(float(ours[m][0, s, 1, r]) - expected[m]) <= TL_TOL, (m, s, r)
    theirs = model.bridge.all_composition_scores("K").scores.detach().double()
    assert float((mode_scores(head_weights(model, fold_ln=False), "k") - theirs).abs().max()) <= TL_TOL


def test_pair_scores_dense_and_baseline_reproducible():
    gen = torch.Generator().manual_seed(3)
    V, X, Y = (torch.randn(3, 20, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    O = torch.randn(3, 4, 20, generator=gen, dtype=torch.float64)
    got = pair_scores(V, O, X, Y)
    for a in range(3):
        for b in range(3):
            assert_close(got[a, b], _dense_score(V[a] @ O[a], X[b] @ Y[b].T), "reference")
    one, two = random_baseline(20, 4, n=40, seed=1), random_baseline(20, 4, n=40, seed=1)
    assert (one == two).all() and one.std() > 0
    assert (random_baseline(20, 4, n=40, seed=2) != one).any()


def test_planted_circuit(planted_model):
    """Planted heads: 0.0 (previous token) feeds 1.0 (induction) through its key; the heads without
    a role have QK = 0, so nothing Q- or K-composes into them."""
    run = run_composition(planted_model, CompositionConfig(n_baseline=50, n_tokens=0))
    k = run.scores[run.scores["input"] == "k"].set_index(["sender", "receiver"])["score"]
    assert k[("0.0", "1.0")] == k.max()
    assert bool(run.scores.set_index(["sender", "receiver", "input"]).loc[("0.0", "1.0", "k"), "above_baseline"])
    zero_qk = run.scores[run.scores["receiver"].isin(["1.2", "1.3"]) & run.scores["input"].isin(["q", "k"])]
    assert len(zero_qk) and zero_qk["score"].fillna(0).abs().max() < 1e-12


def test_demo_induction_circuit_above_baseline():
    """The demo model: previous-token head 0.0 K-composes into every induction head 1.x far above
    the random baseline; its Q- and V-composition into them do not clear the baseline."""
    import headlens

    model = headlens.load_model("demo")
    run = run_composition(model, CompositionConfig(n_baseline=100, n_tokens=200))
    rows = run.scores[run.scores["sender"] == "0.0"].set_index(["receiver", "input"])
    for r in ("1.0", "1.1", "1.2", "1.3"):
        assert bool(rows.loc[(r, "k"), "above_baseline"]) and rows.loc[(r, "k"), "z"] > 10
        assert not rows.loc[(r, "q"), "above_baseline"] and not rows.loc[(r, "v"), "above_baseline"]
    assert run.copying is not None
    cop = run.copying.set_index("name")
    assert (cop.loc[["1.0", "1.1", "1.2", "1.3"], "copying"] > 0.9).all()  # induction heads copy
    assert cop.loc["0.0", "copying"] < 0.5
    lines = composition_note(run, {"0.0": ["previous_token"], "1.0": ["induction"], "0.1": []})
    assert len(lines) == 1 and "0.0" in lines[0] and "1.0" in lines[0] and "above its random baseline" in lines[0]


def test_copying_equals_dense_eigenvalues(tiny_model):
    """The d_head x d_head eigenvalue form = the eigenvalues of the dense W_OV (W_U W_E) [d_model, d_model]."""
    run = run_composition(tiny_model, CompositionConfig(fold_ln=False, n_baseline=10, n_tokens=50))
    w = head_weights(tiny_model, fold_ln=False)
    b = tiny_model.bridge
    ue = b.W_U.detach().double() @ b.W_E.detach().double()
    assert run.copying is not None
    for row in run.copying.to_dict("records"):
        layer, head = int(row["layer"]), int(row["head"])
        eig = torch.linalg.eigvals((w.W_V[layer, head] @ w.W_O[layer, head]) @ ue)
        eig = eig[eig.abs() > 1e-9 * eig.abs().max()]
        assert abs(float(row["copying"]) - float(eig.real.sum() / eig.abs().sum())) < 1e-8
        assert 0.0 <= float(row["positive_share"]) <= 1.0 and 0.0 <= float(row["diagonal"]) <= 1.0


@pytest.mark.parametrize(
    ("settings", "word"),
    [({"modes": ("x",)}, "modes="), ({"modes": ()}, "modes="), ({"n_baseline": 1}, "n_baseline="), ({"n_tokens": -1}, "n_tokens=")],
)
def test_bad_settings_one_line(settings, word):
    with pytest.raises(InputError) as err:
        check_composition_config(CompositionConfig(**settings))
    assert word in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("family", ["llama", "gemma", "gpt_neox", "gemma2"])
def test_folded_equal_to_transformer_lens_across_families(family, family_model, family_checkpoint):
    """GQA + RMSNorm (Llama), MQA + Gemma's 1 + weight norm, parallel attention (GPT-NeoX), Gemma 2's
    post-attention norm (noted): our folding = TransformerLens' processed weights."""
    from transformer_lens.model_bridge import TransformerBridge

    model = family_model(family)
    bridge = TransformerBridge.boot_transformers(str(family_checkpoint(family)), device="cpu")
    bridge.enable_compatibility_mode()
    w = head_weights(model, fold_ln=True)
    for mode in MODES:
        theirs = bridge.all_composition_scores(mode.upper()).scores.detach().double()
        assert float((mode_scores(w, mode) - theirs).abs().max()) <= TL_TOL, mode
    assert any("ln1_post" in n for n in w.notes) == (family == "gemma2")


def test_paired_scores_are_the_diagonal():
    from headlens.analyses.circuits.composition import paired_scores

    gen = torch.Generator().manual_seed(5)
    V, X, Y = (torch.randn(4, 16, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    O = torch.randn(4, 3, 16, generator=gen, dtype=torch.float64)
    assert_close(paired_scores(V, O, X, Y), torch.diagonal(pair_scores(V, O, X, Y)), "reference")
