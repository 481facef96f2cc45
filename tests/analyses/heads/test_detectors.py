"""Detectors: exact on hand-made patterns, equal to a naive loop reference, and to TransformerLens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import torch

from headlens.analyses.heads.census import CensusConfig, build_stimuli, run_census
from headlens.analyses.heads.detectors import BatchContext, get_detectors, registry
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.probes.capture import capture
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import InputError
from tests.helpers import assert_close

if TYPE_CHECKING:
    from transformer_lens.head_detector import HeadName


def uniform_pattern(b: int, h: int, n: int) -> torch.Tensor:
    causal = torch.ones(n, n).tril()
    return (causal / causal.sum(-1, keepdim=True)).expand(b, h, n, n).clone()


def shifted_pattern(n: int, shift: int) -> torch.Tensor:
    """Each query i attends fully to i - shift (to 0 when i < shift)."""
    p = torch.zeros(n, n)
    for i in range(n):
        p[i, max(i - shift, 0)] = 1.0
    return p


def test_registry_lists_the_six_detectors():
    assert set(registry()) == {"previous_token", "next_token", "duplicate_token", "induction", "sink", "referent"}
    with pytest.raises(InputError, match="unknown detector 'inductoin'"):
        get_detectors(["inductoin"])


def test_uniform_head_scores_its_baseline_exactly():
    n, T = 21, 10
    ctx = BatchContext(
        lengths=torch.tensor([n, n - 3]),
        offset=1,
        seq_len=T,
        pronoun=torch.tensor([7, 5]),
        antecedent=torch.tensor([2, 3]),
        distractor=torch.tensor([4, 1]),
    )
    pat = uniform_pattern(2, 3, n)
    for det in registry().values():
        out = det.compute(pat, ctx)
        assert out.score.shape == (2, 3)
        if det.causal_rule:  # next_token: every target is masked on causal attention
            assert out.score.isnan().all() and out.baseline.isnan().all(), det.name
            continue
        assert_close(out.score, out.baseline[:, None].expand(2, 3), "float32", det.name)


def test_perfect_heads_score_one():
    T, o = 10, 1
    n = o + 2 * T
    ctx = BatchContext(lengths=torch.tensor([n]), offset=o, seq_len=T)
    prev = shifted_pattern(n, 1)[None, None]
    dup = shifted_pattern(n, T)[None, None]
    ind = shifted_pattern(n, T - 1)[None, None]
    sink = torch.zeros(n, n)
    sink[:, 0] = 1
    reg = registry()
    assert reg["previous_token"].compute(prev, ctx).score.item() == 1.0
    assert reg["duplicate_token"].compute(dup, ctx).score.item() == 1.0
    assert reg["induction"].compute(ind, ctx).score.item() == 1.0
    assert reg["sink"].compute(sink[None, None], ctx).score.item() == 1.0
    # a previous-token head is no induction head, and vice versa
    assert reg["induction"].compute(prev, ctx).score.item() == 0.0
    assert reg["previous_token"].compute(ind, ctx).score.item() < 0.5


def test_padding_never_counts():
    """A padded prompt scores the same as the same prompt alone."""
    n_real, width, T = 11, 15, 5
    pat = torch.rand(1, 2, width, width).tril()
    pat = pat / pat.sum(-1, keepdim=True)
    garbage = pat.clone()
    garbage[..., n_real:, :] = 7.0  # padded rows hold anything
    for det in registry().values():
        ctx_full = BatchContext(
            lengths=torch.tensor([n_real]),
            offset=1,
            seq_len=T,
            pronoun=torch.tensor([6]),
            antecedent=torch.tensor([2]),
            distractor=torch.tensor([4]),
        )
        a = det.compute(pat[..., :n_real, :n_real], ctx_full).score
        b = det.compute(garbage, ctx_full).score
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, equal_nan=True, msg=det.name)


def naive_scores(pattern: torch.Tensor, n: int, kind: str, offset: int, T: int | None, pos: dict | None) -> dict[str, list[float]]:
    """Reference written with plain loops over positions, per head, for one prompt."""
    H = pattern.shape[0]
    out: dict[str, list[float]] = {}
    for h in range(H):
        A = pattern[h].double()
        if kind == "natural":
            out.setdefault("previous_token", []).append(sum(A[i, i - 1].item() for i in range(1, n)) / (n - 1))
            out.setdefault("sink", []).append(sum(A[i, 0].item() for i in range(n)) / n)
        elif kind == "repeated":
            assert T is not None
            qs = range(offset + T, offset + 2 * T)
            out.setdefault("duplicate_token", []).append(sum(A[i, i - T].item() for i in qs) / T)
            out.setdefault("induction", []).append(sum(A[i, i - T + 1].item() for i in qs) / T)
        else:
            assert pos is not None
            out.setdefault("referent", []).append(A[pos["pronoun"], pos["antecedent"]].item())
    return out


@pytest.mark.parametrize("prepend_bos", [True, False])
def test_census_equals_naive_reference_prompt_by_prompt(tiny_model, prepend_bos):
    config = CensusConfig(n_prompts=6, seq_len=12, window=20, prepend_bos=prepend_bos, batch_size=4, n_bootstrap=50)
    result = run_census(tiny_model, config)
    stimuli = build_stimuli(tiny_model, config, {"repeated", "natural", "referent"})
    for kind, stim in stimuli.items():
        cap = capture(tiny_model, stim.batch, CaptureConfig(what=("pattern",), batch_size=3))
        for i in range(len(stim.batch)):
            n = int(stim.batch.lengths[i])
            pos = {k: int(v[i]) for k, v in stim.positions.items()}
            for layer in range(tiny_model.n_layers):
                ref = naive_scores(cap.get(layer, "pattern")[i, :, :n, :n], n, kind, int(prepend_bos), stim.seq_len, pos)
                for det, values in ref.items():
                    assert_close(
                        result.per_prompt[det][i, layer], torch.tensor(values), "reference", f"{kind} {det} prompt {i} layer {layer}"
                    )
    # the table's score is the mean of the per-prompt scores
    table = result.scores
    for det, arr in result.per_prompt.items():
        got = table[table.detector == det].sort_values(["layer", "head"])["score"].to_numpy()
        assert np.allclose(got, arr.mean(0).reshape(-1), equal_nan=True)
    # next_token: every target is masked on a causal model: not run unless asked for (tests/analyses/heads/test_census_next_token.py)
    assert "next_token" not in result.per_prompt and not result.detector_notes


class _FixedTokens:
    """Lets TransformerLens' detect_head run on our exact tokens (it tokenizes strings itself)."""

    def __init__(self, bridge, tokens):
        self.bridge, self.tokens, self.cfg = bridge, tokens, bridge.cfg

    def to_tokens(self, seq):
        return self.tokens

    def run_with_cache(self, *args, **kwargs):
        return self.bridge.run_with_cache(*args, **kwargs)


@pytest.mark.parametrize("prepend_bos", [True, False])
def test_agrees_with_transformer_lens_detect_head(tiny_model, prepend_bos):
    """TL "mul" score = sum(A * D) / sum(A) = (1/N) sum over rows with a target of A[i, t(i)],
    since each row of A sums to 1 and (with distinct tokens per copy) each row of D has at most
    one 1.  Ours averages over the |R| rows that have a target, so ours = TL * N / |R|.
    """
    from transformer_lens.head_detector import detect_head

    config = CensusConfig(
        n_prompts=4,
        seq_len=10,
        window=24,
        prepend_bos=prepend_bos,
        detectors=("previous_token", "duplicate_token", "induction"),
        n_bootstrap=20,
    )
    result = run_census(tiny_model, config)
    stimuli = build_stimuli(tiny_model, config, {"repeated", "natural"})
    cases: list[tuple[str, HeadName, str]] = [
        ("previous_token", "previous_token_head", "natural"),
        ("duplicate_token", "duplicate_token_head", "repeated"),
        ("induction", "induction_head", "repeated"),
    ]
    for det, tl_name, kind in cases:
        stim = stimuli[kind]
        for i in range(len(stim.batch)):
            n = int(stim.batch.lengths[i])
            tokens = stim.batch.tokens[i : i + 1, :n]
            fixed: Any = _FixedTokens(tiny_model.bridge, tokens)  # stands in for the model detect_head takes
            tl = detect_head(fixed, "unused", tl_name, exclude_bos=False, exclude_current_token=False)
            rows_with_target = n - 1 if det == "previous_token" else config.seq_len
            converted = tl.double() * n / rows_with_target
            assert_close(result.per_prompt[det][i], converted, "float32", f"{det} prompt {i}")


def test_bootstrap_interval():
    rng = np.random.default_rng(1)
    values = rng.normal(0.5, 0.1, size=(200, 3))
    low, high = bootstrap_mean_ci(values, seed=0)
    mean = values.mean(0)
    assert np.all(low < mean) and np.all(mean < high)
    se = values.std(0, ddof=1) / np.sqrt(200)
    assert np.allclose(high - low, 2 * 1.96 * se, rtol=0.2)
    assert np.array_equal(bootstrap_mean_ci(values, seed=0)[0], low)
    const_low, const_high = bootstrap_mean_ci(np.full((10, 2), 0.25))
    assert np.allclose(const_low, 0.25) and np.allclose(const_high, 0.25)


def test_census_input_errors(tiny_model):
    with pytest.raises(InputError, match="n_prompts must"):
        run_census(tiny_model, CensusConfig(n_prompts=0))
    with pytest.raises(InputError, match="context is 128"):
        run_census(tiny_model, CensusConfig(seq_len=80, detectors=("induction",)))
    with pytest.raises(InputError, match="larger than the model's context"):
        run_census(tiny_model, CensusConfig(window=500, detectors=("sink",)))


def test_detectors_reduce_over_query_blocks_like_the_whole_pattern():
    """Every detector's partial sums over blocks of queries (any block size, dividing n or not)
    add up to the whole-pattern result: the streaming and eager census share this code."""
    import torch

    from headlens.analyses.heads.detectors import BatchContext, registry
    from headlens.probes.engine import add_sums
    from tests.helpers import assert_close

    g = torch.Generator().manual_seed(0)
    b, h, n, T = 3, 2, 23, 10
    pat = torch.rand(b, h, n, n, generator=g).tril()
    pat = pat / pat.sum(-1, keepdim=True)
    lengths = torch.tensor([23, 21, 18])
    ctx = BatchContext(
        lengths=lengths,
        offset=1,
        seq_len=T,
        pronoun=torch.tensor([9, 20, 5]),
        antecedent=torch.tensor([2, 4, 1]),
        distractor=torch.tensor([5, 7, 3]),
        window=16,
    )
    for det in registry().values():
        whole = det.compute(pat, ctx)
        for block in (1, 4, 7, 23, 40):
            sums = None
            for q0 in range(0, n, block):
                sums = add_sums(sums, det.partial(pat[:, :, q0 : q0 + block], ctx, q0))
            assert sums is not None
            out = det.finish(sums, ctx)
            for got, want in [
                (out.score, whole.score),
                (out.baseline, whole.baseline),
                *[(out.extra[k], whole.extra[k]) for k in whole.extra],
            ]:
                assert torch.equal(got.isnan(), want.isnan()), det.name
                assert_close(got.nan_to_num(), want.nan_to_num(), "float32", msg=f"{det.name} block {block}")
