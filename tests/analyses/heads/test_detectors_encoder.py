"""Detectors and sink statistics on a bidirectional encoder (all-MiniLM-L6-v2), and next-token on
causal models.

On MiniLM every number is checked against an independent computation: plain indexing into the
``output_attentions`` of ``transformers.AutoModel.from_pretrained(minilm_dir,
attn_implementation="eager")`` on the same ids (each prompt alone, unpadded), with the
encoder's rules written out below (framing ``[CLS] text [SEP]``, uniform baseline ``1/n``,
framing tokens neither queries nor targets of the positional detectors).

Facts measured on MiniLM with the default settings (89 evaluation-text windows of 64 tokens,
[CLS] and [SEP] included; uniform baseline 1/64 = 0.016).  The tests below check the same
statements on 3-4 windows against the independent computation, not against these numbers:

* strongest previous-token head 0.2, score 0.9996 (95% CI 0.9996-0.9997); next 2.11 (0.39);
* strongest next-token head 1.8, score 0.689 (CI 0.683-0.694); next 2.8 (0.31), 4.9 (0.27);
* the sink sits on position 0 ([CLS]) in every layer: mean share over heads 0.06 (layer 0),
  0.33-0.37 (layers 1-4), 0.21 (layer 5); strongest head 1.11 at 0.72, then 1.9 (0.59) and
  4.5 (0.54).  [SEP] gets about its uniform share (layer means 0.009-0.019 against 0.016, at
  most 0.05 in head 2.7); punctuation (",", ".", ":" ...) gets at most its uniform share on
  average (0.09-0.13 against 0.13), one head above it (3.11: 0.30).  Unlike BERT-base
  (Clark et al. 2019) MiniLM does not sink on [SEP] or punctuation, and without [CLS] it sinks
  just as much on whatever token stands first: a positional sink.
"""

from __future__ import annotations

import json
import string
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from headlens.analyses.heads.census import CensusConfig, build_stimuli, run_census
from headlens.analyses.heads.classify import classify_heads, heads_with_role
from headlens.analyses.heads.detectors import BatchContext, registry
from headlens.analyses.heads.detectors.base import mean_attention_at
from headlens.analyses.sinks.batches import census_batch
from headlens.analyses.sinks.config import SinkConfig
from headlens.analyses.sinks.content import variant_batches
from headlens.analyses.sinks.seed import seed_measurement
from headlens.analyses.sinks.study import run_sinks
from headlens.probes.errors import InputError

TOL: dict[str, Any] = {"atol": 2e-5, "rtol": 1e-4}
POSITIONAL = ("previous_token", "next_token", "duplicate_token", "induction")


# ----------------------------------------------------------------------------- the reference


@pytest.fixture(scope="module")
def hf_minilm(minilm_dir):
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()


def hf_patterns(hf, ids: torch.Tensor) -> torch.Tensor:
    """``[layer, head, q, k]`` float64 attention of one unpadded prompt."""
    with torch.no_grad():
        out = hf(input_ids=ids[None], output_attentions=True)
    return torch.stack([a[0].double() for a in out.attentions])


def mean_pairs(P: torch.Tensor, pairs: list[tuple[int, int]]) -> np.ndarray:
    """``[layer, head]``: mean of ``P[..., q, k]`` over the (query, key) pairs."""
    q = torch.tensor([p[0] for p in pairs])
    k = torch.tensor([p[1] for p in pairs])
    return P[..., q, k].mean(-1).numpy()


def reference(P: torch.Tensor, n: int, kind: str, T: int | None) -> dict[str, tuple[np.ndarray, float]]:
    """Per detector: (score ``[layer, head]``, baseline) on one ``[CLS] text [SEP]`` prompt of n tokens."""
    text = range(1, n - 1)  # neither [CLS] (0) nor [SEP] (n - 1)
    out = {}
    if kind == "natural":
        out["previous_token"] = (mean_pairs(P, [(i, i - 1) for i in text if i - 1 in text]), 1 / n)
        out["next_token"] = (mean_pairs(P, [(i, i + 1) for i in text if i + 1 in text]), 1 / n)
        out["sink"] = (mean_pairs(P, [(i, 0) for i in range(n)]), 1 / n)  # every query, [CLS] and [SEP] too
    else:
        assert T is not None, "a repeated-token batch has a half length T"
        qs = range(1 + T, 1 + 2 * T)
        out["duplicate_token"] = (mean_pairs(P, [(i, i - T) for i in qs]), 1 / n)
        out["induction"] = (mean_pairs(P, [(i, i - T + 1) for i in qs]), 1 / n)
    return out


def is_punctuation(tokenizer, token_id: int) -> bool:
    """Independent of headlens: the WordPiece string is made of ASCII punctuation only."""
    s = tokenizer.convert_ids_to_tokens(int(token_id))
    return s not in tokenizer.all_special_tokens and bool(s) and all(c in string.punctuation for c in s)


def reference_targets(hf, tokenizer, batch) -> dict[str, np.ndarray]:
    """Per group: per sequence ``[seq, layer, head]`` share and ``[seq]`` uniform share (NaN: no key
    of the group), plus ``alpha`` ``[seq, layer, head]``; bidirectional, framing ``[CLS] ... [SEP]``."""
    out: dict[str, list] = {g: [] for g in ("first", "suffix", "punctuation", "first_u", "suffix_u", "punctuation_u", "alpha")}
    for b in range(len(batch)):
        n = int(batch.lengths[b])
        ids = batch.tokens[b, :n]
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        P = hf_patterns(hf, ids)  # [L, H, n, n]
        groups = {"first": [0], "suffix": [n - 1], "punctuation": [j for j in range(1, n - 1) if is_punctuation(tokenizer, ids[j])]}
        for g, keys in groups.items():
            if keys:
                out[g].append(P[..., keys].sum(-1).mean(-1).numpy())  # every query sees every key
                out[g + "_u"].append(len(keys) / n)
            else:
                out[g].append(np.full(P.shape[:2], np.nan))
                out[g + "_u"].append(np.nan)
        out["alpha"].append(P[..., 0].mean(-1).numpy())
    return {k: np.array(v) for k, v in out.items()}


# ----------------------------------------------------------------------------- census on MiniLM


def test_minilm_census_equals_hugging_face_reference(minilm_model, hf_minilm):
    config = CensusConfig(
        n_prompts=3,
        window=32,
        seq_len=12,
        n_bootstrap=100,
        detectors=("previous_token", "next_token", "sink", "duplicate_token", "induction"),
    )
    result = run_census(minilm_model, config)
    stimuli = build_stimuli(minilm_model, config, {"natural", "repeated"})
    tok = minilm_model.tokenizer
    L, H = minilm_model.n_layers, minilm_model.n_heads
    ref: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for kind, stim in stimuli.items():
        assert stim.n_prefix == 1 and stim.n_suffix == 1
        for i in range(len(stim.batch)):
            n = int(stim.batch.lengths[i])
            ids = stim.batch.tokens[i, :n]
            assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id  # framed by the model
            P = hf_patterns(hf_minilm, ids)
            for det, (s, base) in reference(P, n, kind, stim.seq_len).items():
                score, baseline = ref.setdefault(det, (np.full((len(stim.batch), L, H), np.nan), np.full((len(stim.batch), L), np.nan)))
                score[i], baseline[i] = s, base
    table = result.scores
    for det, (score, baseline) in ref.items():
        torch.testing.assert_close(
            torch.from_numpy(result.per_prompt[det]), torch.from_numpy(score), **TOL, msg=lambda m, det=det: f"{det}: {m}"
        )
        rows = table[table.detector == det].sort_values(["layer", "head"])
        assert np.allclose(rows["score"], score.mean(0).reshape(-1), **TOL)
        assert np.allclose(rows["baseline"], np.repeat(baseline.mean(0), H), atol=1e-7, rtol=1e-6)
        assert (rows["n"] == len(score)).all()
    # bidirectional baselines: 1/n over the real keys (not 1/(i+1))
    nat = table[table.detector.isin(["previous_token", "next_token", "sink"])]
    assert np.allclose(nat["baseline"], 1 / 32)
    rep = table[table.detector.isin(["duplicate_token", "induction"])]
    assert np.allclose(rep["baseline"], 1 / (2 * 12 + 2))
    # the facts: strongest previous-token and next-token heads, the same in both computations
    for det in ("previous_token", "next_token"):
        want = ref[det][0].mean(0)
        layer, head = np.unravel_index(np.argmax(want), want.shape)
        rows = table[table.detector == det]
        best = rows.loc[rows["score"].idxmax()]
        assert (int(best["layer"]), int(best["head"])) == (layer, head), det
        assert best["score"] == pytest.approx(want[layer, head], abs=2e-5)
        # a head this far above threshold and baseline gets the role
        roles = classify_heads(table)
        name = f"{layer}.{head}"
        has_role = name in heads_with_role(roles.roles, det)
        assert has_role == bool(best["score"] >= registry()[det].threshold and best["ci_low"] >= 2 * best["baseline"])
    assert ref["previous_token"][0].mean(0).max() > 0.9 and ref["next_token"][0].mean(0).max() > 0.5  # both roles exist
    notes = " ".join(result.stimuli["natural"]["notes"])
    assert "bidirectional attention" in notes and "[CLS] and [SEP]" in notes and "next_token" not in result.detector_notes


def test_minilm_sink_targets_equal_hugging_face_reference(minilm_model, hf_minilm):
    """alpha, [CLS] / [SEP] / punctuation shares, their baselines and where each layer sinks."""
    config = SinkConfig(n_prompts=4, window=64, bos=(True,), skip=("content", "secondary", "value_norm", "removal", "windowed"))
    report = run_sinks(minilm_model, config)
    batch = census_batch(minilm_model, config, True)
    ref = reference_targets(hf_minilm, minilm_model.tokenizer, batch)
    census = report["census"].sort_values(["layer", "head"])
    L, H = minilm_model.n_layers, minilm_model.n_heads
    assert np.allclose(census["alpha_mean"], ref["alpha"].mean(0).reshape(-1), **TOL)
    assert np.allclose(census["uniform_alpha"], 1 / 64)
    heads = report["sink_targets"].sort_values(["layer", "head"])
    layers = report["sink_targets_by_layer"].sort_values("layer")
    excess = {}
    for g in ("first", "suffix", "punctuation"):
        share = np.nanmean(ref[g], axis=0)  # over the sequences that have the group
        uniform = np.nanmean(ref[g + "_u"])
        assert np.allclose(heads[g], share.reshape(-1), **TOL), g
        assert np.allclose(heads[f"{g}_uniform"], uniform, atol=1e-7), g
        assert np.allclose(layers[f"{g}_mean"], share.mean(1), **TOL), g
        assert np.allclose(layers[f"{g}_max"], share.max(1), **TOL), g
        assert layers[f"{g}_max_head"].tolist() == share.argmax(1).tolist(), g
        excess[g] = share.mean(1) - uniform
    assert np.allclose(heads["first"], census["alpha_mean"], **TOL)  # the first group is Gu et al.'s alpha
    # the facts: where each layer's sink sits, as the reference says
    want = [max(excess, key=lambda g: excess[g][layer]) for layer in range(L)]
    want = [g if excess[g][layer] > 0 else "none" for layer, g in enumerate(want)]
    assert layers["sink_on"].tolist() == want
    assert len(heads) == L * H and report.info["sink_targets"]["BOS"]["first"] == "[CLS]"
    assert report.info["sink_targets"]["BOS"]["suffix"] == ["[SEP]"] and "." in report.info["sink_targets"]["BOS"]["punctuation"]


def test_minilm_sinks_on_padded_prompts_are_masked(minilm_model, hf_minilm):
    """Prompts of different lengths share a padded batch; nothing attends to the padding."""
    prompts = ("The cat sat on the mat, and it purred.", "Dogs bark.", "Rain fell all night; by morning the river had risen, slowly.")
    config = SinkConfig(prompts=prompts, window=64, bos=(True,), skip=("content", "secondary", "removal", "windowed"))
    report = run_sinks(minilm_model, config)
    batch = census_batch(minilm_model, config, True)
    assert len(set(batch.lengths.tolist())) == 3  # padded
    ref = reference_targets(hf_minilm, minilm_model.tokenizer, batch)
    census = report["census"].sort_values(["layer", "head"])
    assert np.allclose(census["alpha_mean"], ref["alpha"].mean(0).reshape(-1), **TOL)
    assert np.allclose(census["uniform_alpha"], np.mean([1 / int(n) for n in batch.lengths]))
    heads = report["sink_targets"].sort_values(["layer", "head"])
    for g in ("first", "suffix", "punctuation"):
        assert np.allclose(heads[g], np.nanmean(ref[g], axis=0).reshape(-1), **TOL), g
    vn = report["value_norm"]
    assert vn["attn_share"].notna().all() and (vn["value_norm_share"].between(0, 1)).all()
    # the seed measurement: the last text token (before [SEP]) against the first, 1/n uniform
    seed = seed_measurement(minilm_model, "Apple raised its price target")
    first = seed.iloc[0]
    assert first.first_token == "[CLS]" and first.last_token == "target" and first.uniform == pytest.approx(1 / first.n_tokens)


def test_first_token_variants_skip_what_the_tokenizer_cannot_express(minilm_model):
    tok = minilm_model.tokenizer
    body = torch.randint(2000, 3000, (2, 6))
    skipped: dict[str, str] = {}
    variants = variant_batches(
        body, tok, tok.cls_token_id, vocab_size=len(tok), seed=0, suffix=[tok.sep_token_id], skipped=skipped, avoid_special=True
    )
    assert "newline" not in variants and "no token" in skipped["newline"]
    assert set(variants) == {"bos", "frequent", "punctuation", "random", "text", "bos_second"}
    for name, b in variants.items():
        assert (b.tokens[:, -1] == tok.sep_token_id).all(), name  # every variant ends with [SEP]
    assert not set(variants["random"].tokens[:, 0].tolist()) & set(tok.all_special_ids)
    with pytest.raises(InputError, match="no token"):
        variant_batches(body, tok, tok.cls_token_id, vocab_size=len(tok), seed=0)


# ----------------------------------------------------------------------------- detectors by hand


def test_uniform_bidirectional_head_scores_its_baseline_and_frame_is_excluded():
    n, T = 2 * 6 + 2, 6  # [CLS] x1..x6 x1..x6 [SEP]
    width = n + 3  # padded
    pat = torch.zeros(2, 3, width, width)
    lengths = torch.tensor([n, n - 4])
    for b, m in enumerate(lengths.tolist()):
        pat[b, :, :m, :m] = 1.0 / m
    ctx = BatchContext(lengths=lengths, offset=1, seq_len=T, causal=False, suffix=1, exclude_frame=True)
    reg = registry()
    for name in (*POSITIONAL, "sink"):
        out = reg[name].compute(pat, ctx)
        torch.testing.assert_close(out.score, out.baseline[:, None].expand(2, 3), msg=name)
        torch.testing.assert_close(out.baseline, 1.0 / lengths.float(), msg=name)
    # a perfect next-token head scores 1 on the text; [CLS] and [SEP] are never queries or targets
    nxt = torch.zeros(1, 1, n, n)
    for i in range(n):
        nxt[0, 0, i, min(i + 1, n - 1)] = 1.0
    one = BatchContext(lengths=torch.tensor([n]), offset=1, seq_len=T, causal=False, suffix=1, exclude_frame=True)
    assert reg["next_token"].compute(nxt, one).score.item() == 1.0
    q = torch.tensor([[n - 2]])  # the last text token's next token is [SEP]: left out above
    assert mean_attention_at(nxt, q, q + 1, torch.ones(1, 1, dtype=torch.bool), causal=False, lengths=torch.tensor([n]))[0].item() == 1.0
    # on causal attention the same targets are masked: NaN, never 0
    causal = BatchContext(lengths=torch.tensor([n]), offset=1, seq_len=T)
    out = reg["next_token"].compute(nxt.tril(), causal)
    assert out.score.isnan().all() and out.baseline.isnan().all()


def test_bidirectional_sink_statistics_match_loops():
    from headlens.analyses.measure.attention_stats import sink_alpha, uniform_sink_alpha
    from headlens.analyses.sinks.reductions import excess_received, value_norm_share

    torch.manual_seed(0)
    lengths = [7, 5]
    width = 7
    pat = torch.zeros(2, 3, width, width)
    for b, n in enumerate(lengths):
        pat[b, :, :n, :n] = torch.rand(3, n, n).softmax(-1)  # every query sees every real key
    pat[1, :, 5:, :] = 9.0  # padded queries hold anything
    vn = torch.rand(2, 3, width)
    lt = torch.tensor(lengths)
    alpha = sink_alpha(pat, lt, key=0, causal=False)
    excess, n_q = excess_received(pat, lt, causal=False)
    share, attn, nq = value_norm_share(pat, vn, lt, causal=False)
    for b, n in enumerate(lengths):
        A = pat[b, :, :n, :n].double()
        assert torch.allclose(alpha[b].double(), A[:, :, 0].mean(-1), atol=1e-6)
        assert uniform_sink_alpha(lt, causal=False)[b].item() == pytest.approx(1 / n)
        for j in range(n):
            assert torch.allclose(excess[b, :, j].double(), (A[:, :, j] - 1 / n).sum(-1), atol=1e-5)
            assert n_q[b, j] == n
        assert (excess[b, :, n:] == 0).all()
        v = vn[b, :, :n].double()
        s = (A[:, :, 0] * v[:, :1]) / (A * v[:, None, :]).sum(-1)  # [head, q]
        assert torch.allclose(share[b].double(), s.sum(-1), atol=1e-5) and torch.allclose(attn[b].double(), A[:, :, 0].sum(-1), atol=1e-5)
        assert nq[b] == n  # every query, query 0 included


# ----------------------------------------------------------------------------- causal models


@pytest.mark.parametrize("which", ["tiny", "llama"])
def test_next_token_is_not_measurable_on_causal_models(which, tiny_model, family_model):
    model = tiny_model if which == "tiny" else family_model("llama")
    config = CensusConfig(
        n_prompts=4,
        window=24,
        seq_len=8,
        n_bootstrap=50,
        detectors=("previous_token", "next_token", "sink", "induction", "duplicate_token"),
    )
    result = run_census(model, config)
    table = result.scores
    nxt = table[table.detector == "next_token"]
    assert len(nxt) == model.n_layers * model.n_heads
    assert nxt[["score", "baseline", "ci_low", "ci_high"]].isna().all().all() and (nxt["n"] == 0).all()
    assert "not measurable on causal attention" in result.detector_notes["next_token"]
    assert any("not measurable on causal attention" in n for n in result.stimuli["natural"]["notes"])
    roles = classify_heads(table, {"next_token": 1e-9}, baseline_factor=1.0)
    assert heads_with_role(roles.roles, "next_token") == set()
    assert (roles.heads["strongest_detector"] != "next_token").all()
    # the other detectors are what they were without next_token
    alone = run_census(model, CensusConfig(**{**config.__dict__, "detectors": ("previous_token", "sink", "induction", "duplicate_token")}))
    for det in ("previous_token", "sink", "induction", "duplicate_token"):
        a = table[table.detector == det].reset_index(drop=True)
        b = alone.scores[alone.scores.detector == det].reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b)
    # decoder stimuli are the tokens of earlier versions: BOS + text windows, BOS + repeats
    from headlens.analyses.stimuli import eval_text, random_repeated_tokens, text_windows

    stim = build_stimuli(model, config, {"natural", "repeated"})
    old = text_windows(model.tokenizer, eval_text(), 24, 4, True, model.bos_id)
    assert torch.equal(stim["natural"].batch.tokens, old) and stim["natural"].n_suffix == 0
    seqs = random_repeated_tokens(
        4, 8, 0, min(len(model.tokenizer), int(model.bridge.cfg.d_vocab)), exclude=set(model.tokenizer.all_special_ids), distinct=True
    )
    assert torch.equal(stim["repeated"].batch.tokens, torch.cat([torch.full((4, 1), model.bos_id), seqs], dim=1))


def test_sink_targets_on_a_decoder(tiny_model):
    """No suffix: NaN; the first group is alpha; punctuation beside its causal uniform share."""
    report = run_sinks(tiny_model, SinkConfig(n_prompts=3, window=32, skip=("content", "secondary", "value_norm", "removal", "windowed")))
    heads = report["sink_targets"]
    census = report["census"]
    assert heads["suffix"].isna().all() and heads["suffix_uniform"].isna().all()
    merged = heads.merge(census, on=["bos", "layer", "head"])
    assert np.allclose(merged["first"], merged["alpha_mean"], atol=1e-6)
    assert np.allclose(merged["first_uniform"], merged["uniform_alpha"], atol=1e-6)
    assert heads["punctuation"].notna().all() and (heads["punctuation_uniform"] > 0).all()
    assert "removal" not in report.info.get("skipped", {})


# ----------------------------------------------------------------------------- the CLI


@pytest.mark.slow
def test_cli_classify_and_sinks_on_minilm(minilm_dir, tmp_path, runner):

    from headlens.reports.cli.main import cli

    out = tmp_path / "classify"
    res = runner.invoke(
        cli, ["classify", "-m", str(minilm_dir), "--n-prompts", "3", "--window", "24", "--seq-len", "8", "-q", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    scores = pd.read_csv(out / "scores.csv")
    assert "next_token" in set(scores.detector) and scores[scores.detector == "next_token"]["score"].notna().all()
    summary = (out / "summary.md").read_text()
    assert "[CLS] text [SEP]" in summary and "bidirectional attention" in summary
    sinks = tmp_path / "sinks"
    res = runner.invoke(
        cli,
        ["sinks", "-m", str(minilm_dir), "--n-prompts", "2", "--window", "24", "--skip", "secondary,value_norm", "-q", "--out", str(sinks)],
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((sinks / "manifest.json").read_text())["sinks"]
    assert "newline" in manifest["skipped_variants"] and set(manifest["skipped"]) == {"removal", "windowed"}
    text = (sinks / "summary.md").read_text()
    assert "Variants not run: `newline`" in text and "## Where the sink sits" in text
    targets = pd.read_csv(sinks / "sink_targets_by_layer.csv")
    assert len(targets) == 2 * 6 and set(targets["sink_on"]) <= {"first", "suffix", "punctuation", "none"}
