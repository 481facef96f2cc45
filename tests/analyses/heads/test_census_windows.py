"""Sliding-window layers in the head statistics (census detectors, sink statistics).

Tiny random Mistral (window 16 on both layers), Gemma2 (window 16 on layer 0) and GPT-Neo
(window 16 on its local layer 1): the census's scores and baselines equal a plain reference
built from Hugging Face's own eager attention patterns (``output_attentions=True``) with the
window rule written out below, including NaN where a target lies outside the window, and
the full-attention layers of the same models keep the full-causal definitions.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from headlens.analyses.heads.census import CensusConfig, build_stimuli, run_census
from headlens.analyses.heads.classify import classify_heads, roles_of
from headlens.analyses.heads.detectors import BatchContext, registry
from headlens.analyses.heads.detectors.base import mean_attention_at
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.sinks.reductions import excess_received, value_norm_share
from headlens.analyses.sinks.stream import stream_sink_stats
from headlens.probes.attention import attention_spec
from headlens.reports.render.census_summary import census_summary

WINDOW_FAMILIES = ("mistral", "gemma2", "gpt_neo")
TOL: dict[str, Any] = {"atol": 2e-5, "rtol": 1e-4}


# ----------------------------------------------------------------------------- the reference


def hf_windows(config) -> list[int | None]:
    """Each layer's window read straight from the Hugging Face config (not from headlens)."""
    if config.model_type == "gpt_neo":
        return [config.window_size if t == "local" else None for t in config.attention_layers]
    if config.model_type == "gemma2":
        return [config.sliding_window if t == "sliding_attention" else None for t in config.layer_types]
    return [config.sliding_window] * config.num_hidden_layers  # mistral: every layer


def sees(i: int, j: int, w: int | None) -> bool:
    """Query i sees key j: causal, and inside the window (i - w < j) when there is one."""
    return j <= i and (w is None or j > i - w)


def uniform(i: int, w: int | None) -> float:
    """A uniform head's weight on each key query i sees."""
    return 1.0 / (i + 1) if w is None else 1.0 / min(i + 1, w)


def mean_over(A: torch.Tensor, pairs: list[tuple[int, int]], w: int | None) -> tuple[float, float]:
    """Mean of A[q, k] and of the uniform weight over the pairs whose key q sees; NaN when none."""
    kept = [(q, k) for q, k in pairs if sees(q, k, w)]
    if not kept:
        return math.nan, math.nan
    return sum(A[q, k].item() for q, k in kept) / len(kept), sum(uniform(q, w) for q, _ in kept) / len(kept)


def reference(
    A: torch.Tensor, n: int, w: int | None, kind: str, offset: int, T: int | None, pos: dict
) -> dict[str, tuple[float, float, float]]:
    """Per detector: (score, baseline, accuracy) of one head on one prompt, in plain loops."""
    out = {}
    if kind == "natural":
        out["previous_token"] = (*mean_over(A, [(i, i - 1) for i in range(1, n)], w), math.nan)
        out["sink"] = (*mean_over(A, [(i, 0) for i in range(n)], w), math.nan)
    elif kind == "repeated":
        assert T is not None
        qs = range(offset + T, offset + 2 * T)
        out["duplicate_token"] = (*mean_over(A, [(i, i - T) for i in qs], w), math.nan)
        out["induction"] = (*mean_over(A, [(i, i - T + 1) for i in qs], w), math.nan)
    else:
        p, a, d = pos["pronoun"], pos["antecedent"], pos["distractor"]
        score, base = mean_over(A, [(p, a)], w)
        acc = float(A[p, a] > A[p, d]) if sees(p, a, w) and sees(p, d, w) else math.nan
        out["referent"] = (score, base, acc)
    return out


@pytest.fixture(scope="module")
def hf_model(family_checkpoint, hf_eager):
    """``hf_model(family)``: the session's plain transformers model of that family."""
    return lambda family: hf_eager(family_checkpoint(family))


def hf_patterns(hf, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Per layer ``[head, q, k]`` float64 patterns of one unpadded prompt."""
    with torch.no_grad():
        out = hf(tokens[None], output_attentions=True)
    return [a[0].double() for a in out.attentions]


def reference_tables(model, hf, config: CensusConfig, kinds: set[str]):
    """detector -> (score [prompt, layer, head], baseline [prompt, layer], accuracy [prompt, layer, head])."""
    windows = hf_windows(hf.config)
    stimuli = build_stimuli(model, config, kinds)
    L, H = model.n_layers, model.n_heads
    ref: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for kind, stim in stimuli.items():
        n_prompts = len(stim.batch)
        for i in range(n_prompts):
            n = int(stim.batch.lengths[i])
            pats = hf_patterns(hf, stim.batch.tokens[i, :n])
            pos = {k: int(v[i]) for k, v in stim.positions.items()}
            for layer, w in enumerate(windows):
                A_all = pats[layer]
                if w is not None:  # the patterns themselves obey the window
                    far = torch.ones(n, n, dtype=torch.bool).tril(-w)
                    assert float(A_all[:, far].sum()) == 0.0  # attention is never negative
                for h in range(H):
                    for det, (s, b, acc) in reference(A_all[h], n, w, kind, int(config.prepend_bos), stim.seq_len, pos).items():
                        if det not in ref:
                            ref[det] = (
                                np.full((n_prompts, L, H), np.nan),
                                np.full((n_prompts, L), np.nan),
                                np.full((n_prompts, L, H), np.nan),
                            )
                        ref[det][0][i, layer, h] = s
                        ref[det][1][i, layer] = b
                        ref[det][2][i, layer, h] = acc
    return ref, windows


@contextlib.contextmanager
def _quiet():
    """No "mean of empty slice" warnings: all-NaN columns are expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def nanmean0(x: np.ndarray) -> np.ndarray:
    with _quiet():
        return np.nanmean(x, axis=0)


def check_census_against_reference(model, hf, config: CensusConfig):
    result = run_census(model, config)
    kinds = {registry()[d].stimulus for d in result.per_prompt}
    ref, windows = reference_tables(model, hf, config, kinds)
    table = result.scores
    for det, (score, base, acc) in ref.items():
        got = result.per_prompt[det]
        torch.testing.assert_close(
            torch.from_numpy(got), torch.from_numpy(score), equal_nan=True, msg=lambda m, det=det: f"{det}: {m}", **TOL
        )
        rows = table[table.detector == det].sort_values(["layer", "head"])
        want_base = nanmean0(base)  # [layer]
        for layer in range(len(windows)):
            r = rows[rows.layer == layer]
            torch.testing.assert_close(
                torch.tensor(r["baseline"].to_numpy()),
                torch.full((len(r),), float(want_base[layer]), dtype=torch.float64),
                equal_nan=True,
                atol=1e-6,
                rtol=1e-6,
            )
            torch.testing.assert_close(
                torch.tensor(r["score"].to_numpy()), torch.from_numpy(nanmean0(score[:, layer])), equal_nan=True, **TOL
            )
            assert r["n"].tolist() == np.isfinite(score[:, layer]).sum(0).tolist()
            if det == "referent":
                torch.testing.assert_close(
                    torch.tensor(r["accuracy"].to_numpy()), torch.from_numpy(nanmean0(acc[:, layer])), equal_nan=True, **TOL
                )
    return result, ref, windows


# ----------------------------------------------------------------------------- census vs Hugging Face


@pytest.mark.parametrize("family", WINDOW_FAMILIES)
def test_census_on_window_layers_equals_hugging_face_reference(family, family_model, hf_model):
    """T = 20 > 16: every induction/duplicate target lies outside the window (NaN, not 0)."""
    model, hf = family_model(family), hf_model(family)
    config = CensusConfig(n_prompts=3, seq_len=20, window=40, batch_size=2, n_bootstrap=50)
    result, _ref, windows = check_census_against_reference(model, hf, config)
    assert any(w is not None for w in windows) and windows == [layer.window for layer in attention_spec(model).layers]
    table = result.scores
    for layer, w in enumerate(windows):
        rep = table[(table.layer == layer) & table.detector.isin(["induction", "duplicate_token"])]
        nat = table[(table.layer == layer) & (table.detector == "previous_token")]
        sink = table[(table.layer == layer) & (table.detector == "sink")]
        if w is None:
            # full causal: every position counts, baseline mean of 1/(i+1), as without windows
            assert rep["score"].notna().all() and (rep["n"] == 3).all()
            T, o = 20, 1
            assert rep["baseline"].iloc[0] == pytest.approx(np.mean([1 / (i + 1) for i in range(o + T, o + 2 * T)]), rel=1e-6)
            assert nat["baseline"].iloc[0] == pytest.approx(np.mean([1 / (i + 1) for i in range(1, 40)]), rel=1e-6)
            assert sink["baseline"].iloc[0] == pytest.approx(np.mean([1 / (i + 1) for i in range(40)]), rel=1e-6)
        else:
            # not measurable: NaN score, baseline and interval, n = 0, never a role
            assert rep[["score", "baseline", "ci_low", "ci_high"]].isna().all().all() and (rep["n"] == 0).all()
            assert nat["baseline"].iloc[0] == pytest.approx(np.mean([1 / min(i + 1, w) for i in range(1, 40)]), rel=1e-6)
            assert sink["baseline"].iloc[0] == pytest.approx(np.mean([1 / (i + 1) for i in range(w)]), rel=1e-6)
            notes = result.notes[result.notes.layer == layer].set_index("detector")
            for det in ("induction", "duplicate_token"):
                assert notes.loc[det, "n_measured"] == 0 and "not measurable" in notes.loc[det, "note"]
                assert f"sliding window of {w} keys" in notes.loc[det, "note"] and "T=20" in notes.loc[det, "note"]
            assert f"i < {w}" in notes.loc["sink", "note"]
    assert set(result.notes.layer) == {layer for layer, w in enumerate(windows) if w is not None}
    # NaN never becomes a role, even with thresholds no score can miss
    roles = classify_heads(table, {"induction": 1e-9, "duplicate_token": 1e-9}, baseline_factor=1.0)
    for (layer, _), has in roles_of(roles.roles).items():
        if windows[layer] is not None:
            assert "induction" not in has and "duplicate_token" not in has
    # the summary carries the notes
    text = census_summary(table, roles, model=family, prepend_bos=True, thresholds={}, baseline_factor=2.0, stimuli=result.stimuli)
    assert "## Sliding windows" in text and "not measurable" in text
    assert "window_notes" in result.stimuli["repeated"]


@pytest.mark.parametrize("family", WINDOW_FAMILIES)
@pytest.mark.parametrize("T", [12, 16])
def test_targets_inside_the_window_are_measured(family, T, family_model, hf_model):
    """T = 12: both targets inside the window; T = 16: i-T+1 inside (15 back), i-T outside (16 back)."""
    model, hf = family_model(family), hf_model(family)
    config = CensusConfig(n_prompts=3, seq_len=T, batch_size=3, n_bootstrap=50, detectors=("induction", "duplicate_token"))
    result, _ref, windows = check_census_against_reference(model, hf, config)
    table = result.scores
    for layer, w in enumerate(windows):
        ind = table[(table.layer == layer) & (table.detector == "induction")]
        dup = table[(table.layer == layer) & (table.detector == "duplicate_token")]
        qs = range(1 + T, 1 + 2 * T)
        assert ind["score"].notna().all() and (ind["n"] == 3).all()
        assert ind["baseline"].iloc[0] == pytest.approx(np.mean([uniform(i, w) for i in qs]), rel=1e-6)
        if w is not None and T >= w:
            assert dup["score"].isna().all() and dup["baseline"].isna().all()
        else:
            assert dup["score"].notna().all()
            assert dup["baseline"].iloc[0] == pytest.approx(np.mean([uniform(i, w) for i in qs]), rel=1e-6)


def test_a_window_as_long_as_the_prompts_changes_nothing_and_is_not_noted(family_model):
    """Prompts of at most 16 tokens: the window of 16 keys hides nothing, so no note, and the
    window layers score what full causal attention would (baseline mean of 1/(i+1))."""
    model = family_model("mistral")
    result = run_census(model, CensusConfig(n_prompts=2, seq_len=7, window=16, n_bootstrap=20, detectors=("induction", "sink")))
    assert result.notes.empty and all("window_notes" not in info for info in result.stimuli.values())
    table = result.scores
    assert table["score"].notna().all()
    ind = table[table.detector == "induction"]["baseline"]
    assert np.allclose(ind, np.mean([1 / (i + 1) for i in range(8, 15)]))
    assert np.allclose(table[table.detector == "sink"]["baseline"], np.mean([1 / (i + 1) for i in range(16)]))


# ----------------------------------------------------------------------------- sink statistics


@pytest.mark.parametrize("family", WINDOW_FAMILIES)
def test_sink_stream_on_window_layers_equals_hugging_face_reference(family, family_model, hf_model):
    from headlens.analyses.sinks.batches import census_batch
    from headlens.analyses.sinks.config import SinkConfig

    model, hf = family_model(family), hf_model(family)
    windows = hf_windows(hf.config)
    batch = census_batch(model, SinkConfig(n_prompts=3, window=40, bos=(True,)), True)
    stats = stream_sink_stats(model, batch, eps=0.3, keys=(0, 1), secondary=True, value_norm=True, batch_size=2)
    assert stats.excess is not None and stats.value_norm is not None
    L, H = model.n_layers, model.n_heads
    alpha = {k: np.zeros((L, H)) for k in (0, 1)}
    base = {k: np.zeros(L) for k in (0, 1)}
    excess = np.zeros((L, H, 40))
    n_q = np.zeros((L, 40))
    attn_share = np.zeros((L, H))
    n_share = np.zeros(L)
    for b in range(len(batch)):
        n = int(batch.lengths[b])
        pats = hf_patterns(hf, batch.tokens[b, :n])
        for layer, w in enumerate(windows):
            A_all = pats[layer]
            for k in (0, 1):
                qs = [i for i in range(k, n) if sees(i, k, w)]
                alpha[k][layer] += [sum(A_all[h, i, k].item() for i in qs) / len(qs) for h in range(H)]
                base[k][layer] += sum(uniform(i, w) for i in qs) / len(qs)
            for j in range(n):
                qs = [i for i in range(j, n) if sees(i, j, w)]
                n_q[layer, j] += len(qs)
                for h in range(H):
                    excess[layer, h, j] += sum(A_all[h, i, j].item() - uniform(i, w) for i in qs)
            qs = [i for i in range(1, n) if sees(i, 0, w)]
            n_share[layer] += len(qs)
            attn_share[layer] += [sum(A_all[h, i, 0].item() for i in qs) for h in range(H)]
    nb = len(batch)
    for k in (0, 1):
        torch.testing.assert_close(stats.alpha.mean(k).double(), torch.from_numpy(alpha[k] / nb), **TOL)
        for layer in range(L):
            assert stats.alpha.uniform_mean(k, layer) == pytest.approx(base[k][layer] / nb, rel=1e-9)
    torch.testing.assert_close(stats.excess.pos_queries_layer(), torch.from_numpy(n_q))
    torch.testing.assert_close(stats.excess.pos_excess.double(), torch.from_numpy(excess), atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(stats.value_norm.queries_layer, torch.from_numpy(n_share))
    torch.testing.assert_close(
        (stats.value_norm.attn_sum / stats.value_norm.queries_layer[:, None]).double(),
        torch.from_numpy(attn_share / n_share[:, None]),
        **TOL,
    )
    assert len(stats.layers.window_notes()) == sum(w is not None for w in windows)
    # the uniform baseline of key 0 on a window layer is the mean of 1/(i+1) over i < window
    for layer, w in enumerate(windows):
        want = np.mean([1 / (i + 1) for i in range(w if w is not None else 40)])
        assert stats.alpha.uniform_mean(0, layer) == pytest.approx(want, rel=1e-9)


# ----------------------------------------------------------------------------- the pieces, on hand-made patterns


def _causal_uniform(n: int, w: int | None) -> torch.Tensor:
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (j <= i) & ((j > i - w) if w is not None else True)
    return allowed.double() / allowed.double().sum(-1, keepdim=True)


def test_uniform_window_head_scores_its_window_baseline():
    """A head uniform over its window scores exactly its baseline, with every detector."""
    n, T, w = 21, 6, 8
    ctx = BatchContext(
        lengths=torch.tensor([n]),
        offset=1,
        seq_len=T,
        pronoun=torch.tensor([12]),
        antecedent=torch.tensor([7]),
        distractor=torch.tensor([9]),
        window=w,
    )
    pat = _causal_uniform(n, w).float()[None, None].expand(1, 2, n, n)
    for det in registry().values():
        out = det.compute(pat, ctx)
        torch.testing.assert_close(out.score, out.baseline[:, None].expand(1, 2), equal_nan=True, msg=det.name)  # next_token: NaN (causal)


def test_mean_attention_at_leaves_out_keys_outside_the_window():
    n, w = 10, 4
    pat = torch.rand(1, 1, n, n)
    q = torch.tensor([[5, 6, 9]])
    k = torch.tensor([[4, 1, 8]])  # 6 -> 1 is 5 keys back: outside
    score, base = mean_attention_at(pat, q, k, torch.ones(1, 3, dtype=torch.bool), window=w)
    assert score.item() == pytest.approx((pat[0, 0, 5, 4] + pat[0, 0, 9, 8]).item() / 2)
    assert base.item() == pytest.approx((1 / 4 + 1 / 4) / 2)
    score, base = mean_attention_at(pat, q[:, 1:2], k[:, 1:2], torch.ones(1, 1, dtype=torch.bool), window=w)
    assert math.isnan(score.item()) and math.isnan(base.item())


def test_excess_and_value_norm_share_on_a_window_layer_match_loops():
    n, w = 9, 3
    torch.manual_seed(0)
    raw = torch.rand(2, 2, n, n)
    pat = raw * _causal_uniform(n, w)[None, None].gt(0)
    pat = pat / pat.sum(-1, keepdim=True)
    lengths = torch.tensor([n, 6])
    ex, nq = excess_received(pat.float(), lengths, window=w)
    for b, m in enumerate(lengths.tolist()):
        for j in range(n):
            qs = [i for i in range(j, m) if sees(i, j, w)]
            assert nq[b, j].item() == len(qs)
            for h in range(2):
                assert ex[b, h, j].item() == pytest.approx(sum(pat[b, h, i, j].item() - uniform(i, w) for i in qs), abs=1e-6)
    # a head uniform over its window receives no excess anywhere
    ex, _ = excess_received(_causal_uniform(n, w).float()[None, None], torch.tensor([n]), window=w)
    assert ex.abs().max().item() < 1e-6
    _, attn, n_q = value_norm_share(pat.float(), torch.ones(2, 2, n), lengths, window=w)
    assert n_q.tolist() == [w - 1, w - 1]
    torch.testing.assert_close(attn, pat[:, :, 1:w, 0].sum(-1).float())


def test_all_nan_cells_stay_nan_and_get_no_role():
    values = np.full((5, 2), np.nan)
    values[:, 1] = 0.5
    with _quiet():
        low, high = bootstrap_mean_ci(values, n_resamples=50)
    assert np.isnan(low[0]) and np.isnan(high[0]) and low[1] == pytest.approx(0.5)
    nan = float("nan")
    scores = pd.DataFrame(
        [
            {
                "layer": 0,
                "head": 0,
                "detector": "induction",
                "score": nan,
                "baseline": nan,
                "ci_low": nan,
                "ci_high": nan,
                "n": 0,
                "accuracy": nan,
            },
            {
                "layer": 0,
                "head": 0,
                "detector": "previous_token",
                "score": 0.2,
                "baseline": 0.1,
                "ci_low": 0.15,
                "ci_high": 0.25,
                "n": 5,
                "accuracy": nan,
            },
        ]
    )
    roles = classify_heads(scores, {"induction": 1e-9})
    assert len(roles.roles) == 0 and roles.heads.loc[0, "strongest_detector"] == "previous_token"
