"""Ablation library: exactness against a hand-written Hugging Face hook, fast == naive,
replacement values, statistics, the planted induction head, and the head-mask format."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from headlens.analyses.ablation.gradients import attribution_estimates, head_importance, normalise_per_layer, spearman
from headlens.analyses.ablation.study import (
    METHODS,
    AblationConfig,
    ablated_logits,
    ablated_values,
    baseline_pass,
    naive_single_head_values,
    run_ablation,
    single_head_values,
)
from headlens.analyses.measure.evalset import TaskItem, repeated_tokens_eval_set, task_eval_set, text_eval_set
from headlens.analyses.measure.masks import HeadMask, read_mask
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import InputError, StimulusError
from headlens.probes.outputs import write_json
from headlens.probes.patch import check_start
from tests.helpers import assert_close

NO_ROLE = ("0.3", "1.2", "1.3")


@pytest.fixture(scope="module")
def windows(tiny_model):
    return text_eval_set(tiny_model.tokenizer, eval_text(), n_windows=3, window=24, prepend_bos=True, n_ctx=tiny_model.n_ctx)


@pytest.fixture(scope="module")
def task(tiny_model):
    items = [
        TaskItem(prompt="When Mary and John went to the store, John gave a drink to", correct=" Mary", incorrect=" John"),
        TaskItem(prompt="Then Sarah and David talked, and David said to", correct=" Sarah", incorrect=" David"),
        TaskItem(prompt="Alice and James", correct=" went", incorrect=" said"),
    ]
    return task_eval_set(tiny_model.tokenizer, items, prepend_bos=True, n_ctx=tiny_model.n_ctx)


@pytest.fixture(scope="module")
def hf_model(tiny_checkpoint):
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(tiny_checkpoint, attn_implementation="eager").eval()


def _hf_logits(hf, tokens, ablate=None, d_head=16):
    """Reference: plain GPT2LMHeadModel (eager), a forward pre-hook on c_proj zeroing one head's slice."""
    handle = None
    if ablate is not None:
        layer, head = ablate

        def pre(module, args):
            x = args[0].clone()
            x[..., head * d_head : (head + 1) * d_head] = 0
            return (x,)

        handle = hf.transformer.h[layer].attn.c_proj.register_forward_pre_hook(pre)
    try:
        with torch.no_grad():
            return hf(tokens).logits
    finally:
        if handle is not None:
            handle.remove()


def _losses(logits, tokens):
    """Per-window mean next-token cross-entropy, in float64 (float32 rounds a 10.8-nat loss to ~1e-6)."""
    return F.cross_entropy(logits[:, :-1].double().transpose(1, 2), tokens[:, 1:], reduction="none").mean(1)


def test_zero_ablation_equals_hugging_face_reference_hook(tiny_model, hf_model, windows):
    """Logits within 1e-6 absolute; per-window losses and deltas within 1e-6 absolute, through
    both the one-forward-per-head path and the fast table."""
    tokens = windows.tokens
    result = run_ablation(tiny_model, windows, AblationConfig(method="zero", attribution=False, n_bootstrap=0))
    assert result.info["prefix_reuse"] is True
    clean_logits = _hf_logits(hf_model, tokens)
    assert (ablated_logits(tiny_model, tokens, []) - clean_logits).abs().max() <= 1e-6
    clean = _losses(clean_logits, tokens)
    assert abs(result.masked_value - clean.mean().item()) <= 1e-6
    base = baseline_pass(tiny_model, windows, resid_layers=[0, 1])
    for layer in range(2):
        per_item = single_head_values(tiny_model, windows, layer, [0, 1, 2, 3], base)
        for head in range(4):
            ref_logits = _hf_logits(hf_model, tokens, ablate=(layer, head))
            ours = ablated_logits(tiny_model, tokens, [(layer, head)])
            assert (ours - ref_logits).abs().max() <= 1e-6, (layer, head)
            assert (ours - clean_logits).abs().max() > 1e-3  # the ablation did something
            ref = _losses(ref_logits, tokens)
            assert (per_item[head] - ref).abs().max() <= 1e-6, (layer, head)
            row = result.table[(result.table["layer"] == layer) & (result.table["head"] == head)].iloc[0]
            assert abs(row["value"] - ref.mean().item()) <= 1e-6
            assert abs(row["delta"] - (ref - clean).mean().item()) <= 1e-6


@pytest.mark.parametrize("method", METHODS)
def test_fast_table_equals_naive_loop(tiny_model, windows, task, method):
    mask = HeadMask.from_heads([(0, 1)], n_layers=2, n_heads=4)
    heads = [(layer, h) for layer in range(2) for h in range(4) if (layer, h) != (0, 1)]
    for data in (windows, task):
        base = baseline_pass(tiny_model, data, method=method, mask=mask, resid_layers=[0, 1], batch_size=2)
        naive = naive_single_head_values(tiny_model, data, heads, base, mask=mask, batch_size=2)
        fast = torch.cat(
            [
                single_head_values(tiny_model, data, 0, [0, 2, 3], base, mask=mask, batch_size=2),
                single_head_values(tiny_model, data, 1, [0, 1, 2, 3], base, mask=mask, batch_size=2),
            ]
        )
        assert_close(fast, naive, "reference", msg=f"{method} {data.metric}")


def test_prefix_reuse_check_and_off_switch(tiny_model, windows):
    assert check_start(tiny_model, windows.tokens[:1], 1)
    on = run_ablation(tiny_model, windows, AblationConfig(attribution=False, n_bootstrap=0))
    off = run_ablation(tiny_model, windows, AblationConfig(attribution=False, n_bootstrap=0, prefix_reuse=False, heads_per_forward=1))
    assert off.info["prefix_reuse"] is False and off.info["heads_per_forward"] == 1
    assert_close(torch.tensor(on.table["value"].to_numpy()), torch.tensor(off.table["value"].to_numpy()), "reference")
    # the block list is intact afterwards
    assert len(tiny_model.bridge.blocks) == tiny_model.n_layers


def test_mean_and_resample_references(tiny_model, windows, task):
    base = baseline_pass(tiny_model, windows, method="mean")
    ref = base.reference
    assert ref.aligned and ref.mean[0].shape == (24, 4, 16)
    # mean ablation with per-position means: position 0 is BOS in every window, so its mean is BOS's z
    rep = ref.replacement(0, [0, 1], 24, dtype=torch.float32, device=torch.device("cpu"))
    assert rep is not None and rep.shape == (2, 24, 4, 16) and torch.equal(rep[0], rep[1])
    base_t = baseline_pass(tiny_model, task, method="mean")
    assert not base_t.reference.aligned and base_t.reference.mean[1].shape == (1, 4, 16)
    rs = baseline_pass(tiny_model, task, method="resample", seed=3).reference
    assert rs.source is not None
    assert all(int(rs.source[i]) != i for i in range(len(task)))
    again = baseline_pass(tiny_model, task, method="resample", seed=3).reference.source
    assert again is not None and torch.equal(rs.source, again)
    # the shortest prompt takes z from a longer one; the longest (unique) falls back to the set mean beyond its source
    out = rs.replacement(0, [0, 1, 2], int(task.lengths.max()), dtype=torch.float32, device=torch.device("cpu"))
    assert out is not None and torch.isfinite(out).all()
    with pytest.raises(InputError, match="at least 2"):
        baseline_pass(
            tiny_model,
            text_eval_set(tiny_model.tokenizer, eval_text(), n_windows=1, window=20, prepend_bos=True, n_ctx=128),
            method="resample",
        )


def test_set_ablation_and_mask_agree(tiny_model, windows):
    mask = HeadMask.from_heads([(0, 2), (1, 3)], n_layers=2, n_heads=4)
    a = ablated_values(tiny_model, windows, [(0, 2), (1, 3)])
    b = ablated_values(tiny_model, windows, [], mask=mask)
    assert torch.equal(a, b)
    result = run_ablation(tiny_model, windows, AblationConfig(attribution=False, n_bootstrap=0), mask=mask)
    assert len(result.table) == 6 and (0, 2) not in set(zip(result.table["layer"], result.table["head"], strict=True))
    assert_close(result.masked_value, a.double().mean(), "exact")
    assert result.unablated_value != result.masked_value


def test_table_columns_ci_and_determinism(tiny_model, windows):
    cfg = AblationConfig(method="zero", seed=1, n_bootstrap=200)
    a = run_ablation(tiny_model, windows, cfg).table
    b = run_ablation(tiny_model, windows, cfg).table
    assert list(a.columns) == ["layer", "head", "method", "metric", "value", "delta", "ci_low", "ci_high", "n", "attribution"]
    assert a.equals(b)
    assert (a["ci_low"] <= a["delta"] + 1e-12).all() and (a["delta"] <= a["ci_high"] + 1e-12).all()
    assert (a["n"] == 3).all() and set(a["metric"]) == {"loss"}


def test_bootstrap_ci_properties():
    rng = np.random.default_rng(0)
    diffs = rng.normal(1.0, 0.5, size=(3, 50))
    lo, hi = bootstrap_mean_ci(diffs.T, n_resamples=2000, level=0.95, seed=0)
    assert (lo < diffs.mean(1)).all() and (diffs.mean(1) < hi).all()
    lo2, hi2 = bootstrap_mean_ci(diffs[1:2].T, n_resamples=2000, level=0.95, seed=0)
    assert lo2[0] == lo[1] and hi2[0] == hi[1]  # a row's interval does not depend on the other rows
    # standard error of the mean ~ 0.5 / sqrt(50) = 0.07: the 95% interval is about 4 of them wide
    assert 0.15 < (hi - lo).mean() < 0.4
    # one semantics: no interval from fewer than two items, or from no resamples
    assert np.isnan(bootstrap_mean_ci(diffs[:, :1].T, seed=0)[0]).all()
    assert np.isnan(bootstrap_mean_ci(diffs.T, n_resamples=0)[1]).all()
    assert np.isnan(spearman([1, 2, np.nan], [3, np.nan, 4])) and np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_attribution_and_importance_definitions(tiny_model, windows):
    est = attribution_estimates(tiny_model, windows)
    exact = run_ablation(tiny_model, windows, AblationConfig(attribution=False, n_bootstrap=0)).table
    rho = spearman(est.flatten().numpy(), exact["delta"].to_numpy())
    assert rho > 0.8  # random weights: ablations are small, so first order is close
    raw = head_importance(tiny_model, windows, normalise=False)
    imp = head_importance(tiny_model, windows)
    assert_close(imp, normalise_per_layer(raw), "exact")
    assert_close(imp.pow(2).sum(-1), torch.ones(2), "float32")
    mask = HeadMask.from_heads([(1, 0)], n_layers=2, n_heads=4)
    masked = head_importance(tiny_model, windows, mask=mask)
    assert torch.isnan(masked[1, 0]) and torch.isfinite(masked[0]).all()
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_logit_diff_values_match_a_manual_computation(tiny_model, task):
    base = baseline_pass(tiny_model, task)
    with torch.no_grad():
        for i in range(len(task)):
            n = int(task.lengths[i])
            logits = tiny_model.bridge(task.tokens[i : i + 1, :n], return_type="logits")[0, -1]
            expect = logits[task.correct[i]] - logits[task.incorrect[i]]
            assert_close(base.values[i], expect, "float32")


def test_planted_induction_head_matters_most_and_attribution_ranks_it_first(planted_model):
    from headlens.analyses.synthetic.planted import PLANTED_ROLES

    assert PLANTED_ROLES["1.0"] == "induction" and not set(NO_ROLE) & set(PLANTED_ROLES)
    data = repeated_tokens_eval_set(n=4, T=12, seed=0, vocab_size=int(planted_model.bridge.cfg.d_vocab), bos_id=planted_model.bos_id)
    result = run_ablation(planted_model, data, AblationConfig(method="zero", n_bootstrap=200))
    t = result.table.assign(name=lambda d: d["layer"].astype(str) + "." + d["head"].astype(str)).set_index("name")
    no_role_max = t.loc[list(NO_ROLE), "delta"].max()
    assert t.loc["1.0", "delta"] > 1.0 > 100 * no_role_max
    assert t.loc["1.0", "ci_low"] > t.loc[list(NO_ROLE), "ci_high"].max()
    assert t["attribution"].idxmax() == "1.0"


def test_eval_set_errors(tiny_model, gpt2_tokenizer):
    with pytest.raises(InputError, match="empty"):
        text_eval_set(gpt2_tokenizer, "  \n", n_windows=2, window=16, prepend_bos=True, n_ctx=128)
    with pytest.raises(StimulusError, match="tokens"):
        text_eval_set(gpt2_tokenizer, "A short text.", n_windows=2, window=16, prepend_bos=True, n_ctx=128)
    with pytest.raises(InputError, match="context"):
        text_eval_set(gpt2_tokenizer, eval_text(), n_windows=2, window=200, prepend_bos=True, n_ctx=128)
    with pytest.raises(InputError, match="not one"):
        task_eval_set(
            gpt2_tokenizer, [TaskItem(prompt="Hello", correct=" Maryanne-Louise", incorrect=" John")], prepend_bos=True, n_ctx=128
        )
    with pytest.raises(InputError, match="unknown ablation method"):
        AblationConfig(method="noise")


def test_mask_round_trip_and_validation(tmp_path):
    mask = HeadMask.from_heads([(1, 2), (0, 3), (1, 2)], n_layers=2, n_heads=4, model="m", info={"fraction_removed": 0.25})
    assert mask.removed == ((0, 3), (1, 2)) and mask.fraction == 0.25
    path = write_json(tmp_path / "m.json", mask.to_json())
    back = read_mask(path, n_layers=2, n_heads=4)
    assert back == mask and back.to_tensor().sum() == 2
    assert back.heads == back.removed and back.by_layer() == {0: [3], 1: [2]}
    back.check(2, 4)  # the spelling classify --mask uses
    with pytest.raises(InputError, match="2 layers x 4 heads"):
        back.check(3, 4)
    obj = json.loads(path.read_text())
    assert obj["format"] == "headlens.head_mask" and obj["removed"] == ["0.3", "1.2"]
    cases = {
        "not json": ("{", "not valid JSON"),
        "format": (json.dumps({"removed": []}), "not a headlens head mask"),
        "bad head": (json.dumps({**obj, "removed": ["1-2"]}), "LAYER.HEAD"),
        "missing head": (json.dumps({**obj, "removed": ["0.7", "5.1"]}), "do not exist"),
    }
    for name, (text, needle) in cases.items():
        p = tmp_path / f"{name}.json"
        p.write_text(text)
        with pytest.raises(InputError, match=needle):
            read_mask(p, n_layers=2, n_heads=4)
    other = tmp_path / "other.json"
    write_json(other, HeadMask.from_heads([(0, 0)], n_layers=3, n_heads=4).to_json())
    with pytest.raises(InputError, match="3 layers x 4 heads"):
        read_mask(other, n_layers=2, n_heads=4)
    with pytest.raises(InputError, match="does not exist"):
        read_mask(tmp_path / "nope.json")
