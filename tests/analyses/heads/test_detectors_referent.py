"""The referent role rule: a sign test over minimal pairs (Holm over heads), the antecedent -
distractor interval, held-out accuracy; on the planted checkpoint, a positional head, synthetic
outcomes and the real all-MiniLM-L6-v2 (checked against plain Hugging Face attention)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch

from headlens.analyses.heads.census import CensusConfig, build_stimuli, run_census
from headlens.analyses.heads.classify import classify_heads, heads_with_role
from headlens.analyses.heads.detectors import BatchContext
from headlens.analyses.heads.detectors.referent import (
    DETECTOR,
    MIN_PAIR_ACCURACY,
    REFERENT_COLUMNS,
    binomial_tail,
    chosen_on_selection,
    holm,
    referent_passes,
    referent_statistics,
    split_frames,
)
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.stimuli import fit_referent_items, locate_tokens, referent_items

ALPHA = DETECTOR.threshold


def _roles(classified, role: str = "referent") -> set[str]:
    return heads_with_role(classified.roles, role)


def _scores_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Scores-table rows for the referent detector built from a referent table (as the census
    does, but with the table's own interval over pairs as ``ci_low``)."""
    rows = table.rename(columns={"antecedent": "score"}).assign(detector="referent", ci_high=np.nan, n=table["n_units"])
    return rows[["layer", "head", "detector", "score", "baseline", "ci_low", "ci_high", "n", "accuracy", *REFERENT_COLUMNS]]


# ----------------------------------------------------------------------------- the test itself


def _tail_by_fractions(k: int, n: int) -> Fraction:
    """P(X >= k), X ~ Bin(n, 1/2), by the recurrence C(n, j+1) = C(n, j) (n - j) / (j + 1)."""
    term, total = Fraction(1, 2**n), Fraction(0)
    for j in range(n + 1):
        if j >= k:
            total += term
        term = term * (n - j) / (j + 1)
    return total


def test_binomial_tail_is_exact():
    for n in range(0, 41):
        for k in range(-1, n + 2):
            assert binomial_tail(k, n) == pytest.approx(float(_tail_by_fractions(max(k, 0), n)), rel=1e-12, abs=0)
    assert binomial_tail(10, 10) == 2.0**-10 and binomial_tail(0, 0) == 1.0 and binomial_tail(1, 0) == 0.0
    assert binomial_tail(300, 300) == 2.0**-300  # tiny tails stay exact, not 0


def test_holm_adjusts_step_down_and_skips_nan():
    p = np.array([0.01, 0.04, np.nan, 0.03, 0.2])
    m = 4
    # by hand: sorted 0.01, 0.03, 0.04, 0.2 -> 4*0.01, max(., 3*0.03), max(., 2*0.04), max(., 1*0.2)
    expected = np.array([m * 0.01, (m - 1) * 0.03, np.nan, max((m - 1) * 0.03, (m - 2) * 0.04), 0.2])
    np.testing.assert_allclose(holm(p), expected, equal_nan=True)
    assert holm(np.array([0.5, 0.6])).tolist() == [1.0, 1.0]  # capped at 1, monotone
    assert np.isnan(holm(np.array([np.nan]))).all()
    np.testing.assert_allclose(holm(np.array([[0.001, 0.5], [0.2, 0.01]])), [[0.004, 0.5], [0.4, 0.03]])


def _synthetic(outcomes: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """Per head, per pair ``(first item correct, second item correct)`` -> attention arrays
    ``[item, 1, head]`` (antecedent 0.6 / distractor 0.1 when correct, 0.3 / 0.35 when not)."""
    n_pairs, n_heads = len(outcomes[0]), len(outcomes)
    ante = np.zeros((2 * n_pairs, 1, n_heads))
    dist = np.zeros_like(ante)
    for h, pairs in enumerate(outcomes):
        for i, pair in enumerate(pairs):
            for j, correct in enumerate(pair):
                ante[2 * i + j, 0, h], dist[2 * i + j, 0, h] = (0.6, 0.1) if correct else (0.3, 0.35)
    units = [f"f{i % 8}.{i}" for i in range(n_pairs) for _ in range(2)]
    frames = [f"f{i % 8}" for i in range(n_pairs) for _ in range(2)]
    return ante, dist, units, frames


def test_multiple_comparison_correction_is_applied():
    """A head whose raw p clears 0.05 but not after Holm over 40 heads gets no role."""
    n_pairs, n_heads = 30, 40
    rng = np.random.default_rng(0)
    strong = [(1, 1)] * 28 + [(1, 0), (0, 0)]  # 28 wins, 1 tie, 1 loss
    borderline = [(1, 1)] * 16 + [(0, 0)] * 7 + [(1, 0)] * 7  # 16 wins, 7 losses: P(X >= 16 | 23) = 0.047
    outcomes = [strong, borderline] + [[tuple(rng.integers(0, 2, 2)) for _ in range(n_pairs)] for _ in range(n_heads - 2)]
    ante, dist, units, frames = _synthetic(outcomes)
    acc = (ante > dist).astype(float)
    baseline = np.full((2 * n_pairs, 1), 0.05)
    table, _ = referent_statistics(ante, dist, acc, baseline, units, frames, n_bootstrap=200, seed=0)
    raw = table["p_raw"].to_numpy()
    assert raw[0] == pytest.approx(binomial_tail(28, 29)) and raw[1] == pytest.approx(binomial_tail(16, 23))
    assert raw[1] < ALPHA  # significant on its own ...
    np.testing.assert_allclose(table["p_value"], holm(raw))
    assert table["p_value"].iloc[1] > ALPHA  # ... but not among 40 heads
    assert table["p_value"].iloc[0] == pytest.approx(n_heads * raw[0])  # the smallest p: Bonferroni's factor
    # every other criterion holds for the borderline head: only the correction keeps its role away
    assert table["pair_accuracy"].iloc[1] == pytest.approx(16 / 30) and 16 / 30 > MIN_PAIR_ACCURACY
    uncorrected = _scores_rows(table).assign(p_value=raw)
    assert referent_passes(uncorrected).iloc[:2].tolist() == [True, True]
    roles = classify_heads(_scores_rows(table))
    assert _roles(roles) == {"0.0"}
    # alone (one head tested) the borderline head's p is its raw p
    alone, _ = referent_statistics(ante[:, :, 1:2], dist[:, :, 1:2], acc[:, :, 1:2], baseline, units, frames, n_bootstrap=50)
    assert alone["p_value"].iloc[0] == pytest.approx(raw[1])
    # a stricter level through the threshold: the strong head's corrected p is ~1e-7
    assert _roles(classify_heads(_scores_rows(table), {"referent": 1e-9})) == set()


def test_pairs_are_the_unit_and_ties_drop_out():
    # head 0: right in both items of every pair; head 1: right in exactly one of each pair (position);
    # head 2: the reverse of head 0 (an anti-referent head)
    ante, dist, units, frames = _synthetic([[(1, 1)] * 10, [(1, 0), (0, 1)] * 5, [(0, 0)] * 10])
    table, split = referent_statistics(ante, dist, (ante > dist).astype(float), np.full((20, 1), 0.05), units, frames, n_bootstrap=100)
    assert table[["wins", "losses", "ties"]].values.tolist() == [[10, 0, 0], [0, 0, 10], [0, 10, 0]]
    assert table["accuracy"].tolist() == [1.0, 0.5, 0.0]
    assert table["p_raw"].tolist() == [pytest.approx(2.0**-10), 1.0, 1.0]
    assert _roles(classify_heads(_scores_rows(table))) == {"0.0"}
    assert sorted(split["selection"] + split["heldout"]) == sorted(set(frames))


def test_split_frames_is_seeded_disjoint_and_stratified():
    frames = [f"g{i}" for i in range(9)] + [f"n{i}" for i in range(6)]
    kinds = ["gender"] * 9 + ["number"] * 6
    sel, held = split_frames(frames, kinds)
    assert split_frames(frames, kinds) == (sel, held) and not set(sel) & set(held)
    assert sorted(sel + held) == sorted(frames)
    assert sum(f.startswith("g") for f in sel) == 5 and sum(f.startswith("n") for f in sel) == 3
    assert split_frames(frames, kinds, seed=1) != (sel, held)


# ----------------------------------------------------------------------------- a positional head


def _pattern(located, n_heads: int = 3) -> tuple[torch.Tensor, BatchContext]:
    """Attention patterns ``[item, head, q, k]``: uniform everywhere, and at the pronoun row all
    mass on the first candidate (head 0), the nearest candidate (head 1) or the antecedent (2)."""
    width = max(len(x.token_ids) for x in located)
    pat = torch.zeros(len(located), n_heads, width, width)
    for b, x in enumerate(located):
        n = len(x.token_ids)
        pat[b, :, :n, :n] = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]
        first, nearest = min(x.antecedent, x.distractor), max(x.antecedent, x.distractor)
        for h, key in enumerate((first, nearest, x.antecedent)):
            pat[b, h, x.pronoun] = 0.0
            pat[b, h, x.pronoun, key] = 1.0
    ctx = BatchContext(
        lengths=torch.tensor([len(x.token_ids) for x in located]), offset=1,
        pronoun=torch.tensor([x.pronoun for x in located]), antecedent=torch.tensor([x.antecedent for x in located]),
        distractor=torch.tensor([x.distractor for x in located]),
    )  # fmt: skip
    return pat, ctx


def test_positional_head_scores_exactly_half_and_gets_no_role(gpt2_tokenizer):
    items = referent_items(120, seed=3)
    located = fit_referent_items(items, gpt2_tokenizer, wrap=([gpt2_tokenizer.bos_token_id], [])).located
    pat, ctx = _pattern(located)
    out = DETECTOR.compute(pat, ctx)
    acc = out.extra["accuracy"].numpy()
    assert acc[:, 0].mean() == 0.5 and acc[:, 1].mean() == 0.5 and acc[:, 2].mean() == 1.0
    # within each pair the positional heads are right exactly once
    assert (acc[0::2, :2] + acc[1::2, :2] == 1).all()
    table, _ = referent_statistics(
        out.score.numpy()[:, None], out.extra["distractor"].numpy()[:, None], acc[:, None], out.baseline.numpy()[:, None],
        [x.pair for x in located], [x.frame for x in located], [x.kind for x in located], n_bootstrap=200,
    )  # fmt: skip
    assert table["ties"].tolist()[:2] == [60, 60] and table["p_raw"].tolist()[:2] == [1.0, 1.0]
    assert table["diff"].tolist()[:2] == [0.0, 0.0] and table["pair_accuracy"].tolist() == [0.0, 0.0, 1.0]
    assert table["heldout_accuracy"].tolist() == [0.5, 0.5, 1.0]
    assert _roles(classify_heads(_scores_rows(table))) == {"0.2"}


# ----------------------------------------------------------------------------- planted checkpoint


@pytest.fixture(scope="module")
def planted_census(planted_model):
    return run_census(planted_model, CensusConfig(detectors=("referent",), n_prompts=100, n_bootstrap=300))


def test_planted_referent_head_gets_the_role_and_no_other(planted_census):
    result = planted_census
    roles = classify_heads(result.scores)
    assert _roles(roles) == {"1.1"}
    table = result.referent.set_index(["layer", "head"])
    head = table.loc[(1, 1)]
    assert head["accuracy"] == 1.0 and head["pair_accuracy"] == 1.0 and head["heldout_accuracy"] == 1.0
    assert head["wins"] == head["n_units"] == 50 and head["p_value"] <= 8 * 2.0**-50
    others = table.drop(index=(1, 1))
    assert (others["p_value"] > ALPHA).all() and (others["pair_accuracy"] <= MIN_PAIR_ACCURACY).all()
    assert list(chosen_on_selection(result.referent)["name"]) == ["1.1"]
    # the scores table carries the referent columns, equal to the referent table
    rows = result.scores[result.scores["detector"] == "referent"]
    for col in REFERENT_COLUMNS:
        np.testing.assert_allclose(rows[col].to_numpy(), result.referent[col].to_numpy(), equal_nan=True)
    info = result.stimuli["referent"]
    assert info["referent_items"]["dropped"] == 0 and info["referent_items"]["pairs"] == 50
    assert set(info["referent_split"]["selection"]).isdisjoint(info["referent_split"]["heldout"])


# ----------------------------------------------------------------------------- all-MiniLM-L6-v2


@pytest.fixture(scope="module")
def minilm_census(minilm_model):
    config = CensusConfig(detectors=("referent",), n_prompts=100, n_bootstrap=1000, batch_size=16)
    return config, run_census(minilm_model, config)


@pytest.fixture(scope="module")
def minilm_reference(minilm_dir):
    """The same items, located independently with the Hugging Face tokenizer, and the attention
    of a plain ``AutoModel`` (eager) from each pronoun to its two candidates, per head."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(minilm_dir))
    hf = AutoModel.from_pretrained(str(minilm_dir), attn_implementation="eager").eval()
    pool = referent_items(seed=0)
    single = [all(len(tok.tokenize(getattr(i, f + "_text"))) == 1 for f in ("pronoun", "antecedent", "distractor")) for i in pool]
    by_pair: dict[str, bool] = {}
    for item, ok in zip(pool, single, strict=True):
        by_pair[item.pair] = by_pair.get(item.pair, True) and ok
    kept = [i for i in pool if by_pair[i.pair]][:100]
    located = locate_tokens(kept, tok, wrap=([tok.cls_token_id], [tok.sep_token_id]))
    n_layers, n_heads = hf.config.num_hidden_layers, hf.config.num_attention_heads
    ante = torch.zeros(len(located), n_layers, n_heads, dtype=torch.float64)
    dist = torch.zeros_like(ante)
    by_length: dict[int, list[int]] = {}
    for i, x in enumerate(located):
        by_length.setdefault(len(x.token_ids), []).append(i)
    with torch.inference_mode():
        for rows in by_length.values():  # sentences of one length together: no padding at all
            att = hf(input_ids=torch.tensor([located[i].token_ids for i in rows]), output_attentions=True).attentions
            a = torch.stack(att, 1)  # [item, layer, head, q, k]
            for b, i in enumerate(rows):
                x = located[i]
                ante[i] = a[b, :, :, x.pronoun, x.antecedent]
                dist[i] = a[b, :, :, x.pronoun, x.distractor]
    dropped = [i for i in pool if not by_pair[i.pair]]
    return located, ante.numpy(), dist.numpy(), dropped


def test_minilm_items_fit_the_wordpiece_tokenizer(minilm_model, minilm_census, minilm_reference):
    config, result = minilm_census
    located, _, _, dropped = minilm_reference
    stim = build_stimuli(minilm_model, config, {"referent"})["referent"]
    assert [tuple(stim.batch.tokens[i, : int(stim.batch.lengths[i])].tolist()) for i in range(len(located))] == [
        x.token_ids for x in located
    ]
    for key in ("pronoun", "antecedent", "distractor"):
        assert stim.positions[key].tolist() == [getattr(x, key) for x in located]
    info = result.stimuli["referent"]["referent_items"]
    assert info["dropped"] == len(dropped) > 0 and info["used"] == 100
    assert set(info["dropped_words"]) <= {w for i in dropped for w in (i.antecedent_text, i.distractor_text, i.pronoun_text)}
    assert "left out" in result.stimuli["referent"]["source"]


def test_minilm_referent_heads_match_plain_hugging_face(minilm_census, minilm_reference):
    config, result = minilm_census
    located, ante, dist, _ = minilm_reference
    n, L, H = ante.shape
    table = result.referent.set_index(["layer", "head"])
    # per-sentence attention: the census (TransformerBridge, batched and padded) equals plain HF
    torch.testing.assert_close(torch.from_numpy(result.per_prompt["referent"]), torch.from_numpy(ante), atol=2e-5, rtol=1e-4)
    # accuracy per head, independently (near-ties, |a - d| < 1e-5, may go either way)
    correct = ante > dist
    near = np.abs(ante - dist) < 1e-5
    acc_hf = correct.mean(0)
    acc = table["accuracy"].to_numpy().reshape(L, H)
    assert (np.abs(acc - acc_hf) <= near.mean(0) + 1e-12).all()
    # the rule, recomputed from the Hugging Face attention: sign test over pairs, Holm by hand
    pairs = [x.pair for x in located]
    assert all(pairs[i] == pairs[i + 1] for i in range(0, n, 2))
    sign = np.sign(ante - dist)
    pair_sum = sign[0::2] + sign[1::2]  # [pair, layer, head]
    wins, losses = (pair_sum > 0).sum(0), (pair_sum < 0).sum(0)
    p_raw = np.vectorize(lambda w, lo: float(_tail_by_fractions(int(w), int(w + lo))))(wins, losses)
    order = np.argsort(p_raw, axis=None, kind="stable")
    adjusted = np.empty(L * H)
    running = 0.0
    for rank, idx in enumerate(order):
        running = max(running, min(1.0, (L * H - rank) * p_raw.ravel()[idx]))
        adjusted[idx] = running
    adjusted = adjusted.reshape(L, H)
    np.testing.assert_allclose(table["p_value"].to_numpy().reshape(L, H), adjusted, rtol=1e-6, atol=1e-12)
    pair_acc = wins / (n // 2)
    diff_low, _ = bootstrap_mean_ci((ante - dist)[0::2] / 2 + (ante - dist)[1::2] / 2, n_resamples=config.n_bootstrap, seed=config.seed)
    ci_low, _ = bootstrap_mean_ci(ante, n_resamples=config.n_bootstrap, seed=config.seed)
    baseline = np.mean([1.0 / len(x.token_ids) for x in located])  # bidirectional: 1/n real keys
    expected = {
        f"{layer}.{head}"
        for layer in range(L)
        for head in range(H)
        if adjusted[layer, head] <= ALPHA
        and pair_acc[layer, head] > MIN_PAIR_ACCURACY
        and diff_low[layer, head] > 0
        and ci_low[layer, head] >= 2 * baseline
    }
    roles = classify_heads(result.scores)
    assert _roles(roles) == expected and expected, (expected, _roles(roles))
    # held-out accuracy: heads chosen on half the frames, accuracy on the other half
    split = result.stimuli["referent"]["referent_split"]
    held = np.array([x.frame in set(split["heldout"]) for x in located])
    assert held.any() and not held.all()
    heldout_hf = correct[held].mean(0)
    np.testing.assert_allclose(table["heldout_accuracy"].to_numpy().reshape(L, H), heldout_hf, atol=near[held].mean(0).max() + 1e-12)
    chosen = chosen_on_selection(result.referent)
    print("\nMiniLM referent heads:", sorted(expected))
    print(
        table.loc[
            [tuple(map(int, h.split("."))) for h in sorted(expected)],
            ["accuracy", "pair_accuracy", "p_value", "antecedent", "distractor", "heldout_accuracy"],
        ].to_string()
    )
    print("chosen on the selection frames -> held-out accuracy:\n" + chosen.to_string())
    assert len(chosen) and (chosen["heldout_n"] == held.sum()).all()


def test_referent_passes_needs_every_criterion():
    row = {"p_value": 0.001, "pair_accuracy": 0.9, "diff_ci_low": 0.1, "ci_low": 0.3, "baseline": 0.05}
    frame = pd.DataFrame([row, {**row, "p_value": 0.2}, {**row, "pair_accuracy": 0.5}, {**row, "diff_ci_low": 0.0},
                          {**row, "ci_low": 0.09}, {**row, "p_value": math.nan}])  # fmt: skip
    assert referent_passes(frame).tolist() == [True, False, False, False, False, False]
    assert not referent_passes(frame.drop(columns="pair_accuracy")).any()


def test_min_referent_prompts_is_the_fewest_pairs_a_perfect_head_passes_with():
    from headlens.analyses.heads.detectors.referent import min_referent_prompts

    for n_heads in (1, 8, 72, 144, 1024):
        k = min_referent_prompts(n_heads) // 2
        assert min(1.0, n_heads * binomial_tail(k, k)) <= ALPHA < n_heads * binomial_tail(k - 1, k - 1) or k == 1


def test_items_without_pairs_are_units_of_their_own(planted_model, tmp_path):
    """A user's file without ``pair``/``frame``: every sentence is a unit and a frame of its own."""
    from dataclasses import replace

    from headlens.analyses.stimuli import referent_jsonl
    from headlens.probes.outputs import write_text

    items = [replace(i, pair="", frame="") for i in referent_items(30, seed=5)]
    path = write_text(tmp_path / "mine.jsonl", referent_jsonl(items))
    result = run_census(planted_model, CensusConfig(detectors=("referent",), n_prompts=30, n_bootstrap=100, referent_file=str(path)))
    assert result.referent is not None
    table = result.referent.set_index(["layer", "head"])
    assert (table["n_units"] == 30).all() and table.loc[(1, 1), "wins"] == 30
    assert table.loc[(1, 1), "p_value"] == pytest.approx(8 * 2.0**-30)
    assert _roles(classify_heads(result.scores)) == {"1.1"}
    split = result.stimuli["referent"]["referent_split"]
    assert split["selection"] == split["heldout"] == []  # no named frames; the halves are by sentence
    assert table.loc[(1, 1), "heldout_accuracy"] == 1.0 and 0 < table.loc[(1, 1), "heldout_n"] < 30
