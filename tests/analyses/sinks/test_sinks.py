"""Attention-sink investigations: the reductions on synthetic patterns, and the planted model.

The planted checkpoint (``headlens.analyses.synthetic.planted``) has exactly one sink head, 0.1, which puts >= 0.9 of
every query's attention on position 0 by position alone; its other heads have known, non-sink
roles.  These tests check that the census reports that head and only that head, that a zeroed
sink value vector gives a zero value-norm share, and that sink removal changes the loss exactly
as a forward pass written out by hand in plain torch predicts.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from headlens.analyses.sinks.batches import census_batch
from headlens.analyses.sinks.config import SinkConfig
from headlens.analyses.sinks.intervene import mean_loss, removal_hooks, window_allowed
from headlens.analyses.sinks.reductions import excess_received, head_output_weights, value_norm_share
from headlens.analyses.sinks.seed import seed_measurement
from headlens.analyses.sinks.stream import stream_sink_stats
from headlens.analyses.sinks.study import run_sinks
from headlens.probes.errors import InputError
from headlens.reports.render.sinks_tables import summary_markdown
from tests.helpers import assert_close

SINK = (0, 1)


# ----------------------------------------------------------------------------- synthetic


def _random_pattern(b: int, h: int, n: int, lengths: list[int], seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(b, h, n, n, generator=gen)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    p = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    for i, length in enumerate(lengths):  # padding rows and columns as the capture zeroes them
        p[i, :, length:, :] = 0
        p[i, :, :, length:] = 0
    return p


def test_value_norm_share_matches_a_loop():
    lengths = [6, 4]
    p = _random_pattern(2, 3, 6, lengths)
    vn = torch.rand(2, 3, 6, generator=torch.Generator().manual_seed(1)) + 0.1
    share, attn, n_q = value_norm_share(p, vn, torch.tensor(lengths))
    for b, n in enumerate(lengths):
        for h in range(3):
            s = sum(p[b, h, i, 0] * vn[b, h, 0] / sum(p[b, h, i, j] * vn[b, h, j] for j in range(i + 1)) for i in range(1, n))
            a = sum(p[b, h, i, 0] for i in range(1, n))
            assert_close(share[b, h], s, "reference")
            assert_close(attn[b, h], a, "reference")
        assert n_q[b] == n - 1
    vn[:, 1, 0] = 0.0  # a zero sink value vector: exactly no share, whatever the attention
    share, attn, _ = value_norm_share(p, vn, torch.tensor(lengths))
    assert torch.equal(share[:, 1], torch.zeros(2)) and (attn[:, 1] > 0).all()


def test_excess_received_matches_a_loop():
    lengths = [5, 3]
    p = _random_pattern(2, 2, 5, lengths, seed=3)
    excess, n_q = excess_received(p, torch.tensor(lengths))
    for b, n in enumerate(lengths):
        for h in range(2):
            for j in range(5):
                want = sum(p[b, h, i, j] - 1 / (i + 1) for i in range(j, n)) if j < n else 0.0
                assert_close(excess[b, h, j], want, "reference")
        assert n_q[b].tolist() == [max(n - j, 0) for j in range(5)]
    uniform = torch.tril(torch.ones(4, 4)) / torch.arange(1, 5)[:, None]
    excess, _ = excess_received(uniform[None, None], torch.tensor([4]))
    assert_close(excess, torch.zeros_like(excess), "reference")


def test_window_allowed():
    allowed = window_allowed(6, window=2, keep_first=1)
    assert allowed[5].tolist() == [True, False, False, False, True, True]
    assert allowed[1].tolist() == [True, True, False, False, False, False]
    assert window_allowed(4, window=4, keep_first=0).equal(torch.ones(4, 4, dtype=torch.bool).tril())


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"eps": 0.0}, "eps must"),
        ({"eps": 1.0}, "eps must"),
        ({"eps": 1.5}, "eps must"),
        ({"eps": -0.2}, "eps must"),
        ({"keep_first": (2, -1)}, "keep_first must"),
        ({"attn_windows": (0,)}, "attn_windows must"),
        ({"window": 1}, "window must"),
        ({"skip": ("census",)}, "cannot skip"),
        ({"bos": ()}, "bos"),
    ],
)
def test_config_rejects_bad_input(kwargs, needle):
    with pytest.raises(InputError) as err:
        SinkConfig(**kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- planted model


PROGRESS: list[tuple[str, int, int]] = []


@pytest.fixture(scope="module")
def planted_report(planted_model):
    config = SinkConfig(n_prompts=3, batch_size=2, skip=("windowed", "secondary"))
    return run_sinks(planted_model, config, progress=lambda stage, done, total: PROGRESS.append((stage, done, total)))


def test_progress_per_stage(planted_report):
    stages = list(dict.fromkeys(stage for stage, _, _ in PROGRESS))
    assert stages == ["census, no BOS", "census, BOS", "first-token variants", "sink removal, no BOS", "sink removal, BOS"]
    for stage in stages:
        calls = [(d, t) for s, d, t in PROGRESS if s == stage]
        assert [d for d, _ in calls] == list(range(1, len(calls) + 1)) and {t for _, t in calls} == {len(calls)}
    assert len([1 for s, _, _ in PROGRESS if s == "first-token variants"]) == 7 * 2  # 7 variants x 2 batches


def test_planted_sink_head_is_the_only_one_reported(planted_report):
    census = planted_report["census"]
    for bos in (False, True):
        assert planted_report.sink_heads(bos) == [SINK]
        sub = census[census["bos"] == bos].set_index(["layer", "head"])
        assert sub.loc[SINK, "alpha_mean"] >= 0.9 and sub.loc[SINK, "sink_rate"] == 1.0
        others = sub.drop(index=[SINK])
        assert (others["alpha_mean"] < 0.3).all() and (others["sink_rate"] == 0).all()
        assert_close(sub["uniform_alpha"].iloc[0], sum(1 / (i + 1) for i in range(64)) / 64, "float32")
    rates = planted_report["sink_rates"].set_index("bos")
    assert rates["sink_rate"].tolist() == [1 / 8, 1 / 8] and rates["uniform_sink_rate"].tolist() == [0.0, 0.0]
    assert rates["n_sink_heads"].tolist() == [1, 1] and rates["n_sequences"].tolist() == [3, 3]
    by_layer = planted_report["sink_rate_by_layer"]
    assert by_layer[by_layer["layer"] == 0]["sink_rate"].tolist() == [0.25, 0.25]
    assert by_layer[by_layer["layer"] == 1]["sink_rate"].tolist() == [0.0, 0.0]


def test_planted_sink_is_positional(planted_report):
    verdicts = planted_report["content_verdicts"].set_index(["layer", "head"])["verdict"]
    assert verdicts[SINK] == "position"
    assert set(verdicts.drop(index=[SINK])) == {"none"}
    content = planted_report["content"]
    assert set(content["variant"]) == {"bos", "frequent", "punctuation", "newline", "random", "text", "bos_second"}
    sink_rows = content[(content["layer"] == 0) & (content["head"] == 1)]
    assert (sink_rows["alpha_first"] >= 0.9).all()
    # BOS moved to position 1 does not pull the planted (positional) sink with it
    assert float(sink_rows.loc[sink_rows["variant"] == "bos_second", "alpha_second"].iloc[0]) < 0.01


def test_planted_value_norm_and_removal_tables(planted_report):
    vn = planted_report["value_norm"].set_index(["bos", "layer", "head"])
    for bos in (False, True):
        assert vn.loc[(bos, *SINK), "attn_share"] >= 0.9
        assert vn.loc[(bos, *SINK), "value_norm_share"] >= 0.9  # its value at position 0 is not special
    removal = planted_report["removal"]
    assert list(removal[removal["bos"]]["removed"]) == ["none", "all heads", "0.1"]


def _hand_loss(folder, tokens: torch.Tensor, remove_sink: tuple[int, int] | None) -> float:
    """GPT-2 forward in plain torch from the checkpoint's weights; sink removal as A'[i,j] = A[i,j] / (1 - A[i,0])."""
    import json

    from safetensors.torch import load_file

    sd = {k: v.double() for k, v in load_file(str(folder / "model.safetensors")).items()}
    cfg = json.loads((folder / "config.json").read_text())
    d, n_head = cfg["n_embd"], cfg["n_head"]
    dh = d // n_head
    b, n = tokens.shape
    ln = lambda x, p: F.layer_norm(x, (d,), sd[p + ".weight"], sd[p + ".bias"], eps=cfg["layer_norm_epsilon"])  # noqa: E731
    x = sd["transformer.wte.weight"][tokens] + sd["transformer.wpe.weight"][:n]
    for layer in range(cfg["n_layer"]):
        pre = f"transformer.h.{layer}."
        qkv = ln(x, pre + "ln_1") @ sd[pre + "attn.c_attn.weight"] + sd[pre + "attn.c_attn.bias"]
        q, k, v = (t.reshape(b, n, n_head, dh).transpose(1, 2) for t in qkv.split(d, dim=-1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        a = scores.softmax(-1)
        if remove_sink is not None and remove_sink[0] == layer:
            h = remove_sink[1]
            row = a[:, h, 1:, :].clone()
            a[:, h, 1:, :] = torch.cat([torch.zeros_like(row[..., :1]), row[..., 1:] / (1 - row[..., :1])], dim=-1)
        z = (a @ v).transpose(1, 2).reshape(b, n, d)
        x = x + z @ sd[pre + "attn.c_proj.weight"] + sd[pre + "attn.c_proj.bias"]
        hidden = F.gelu(ln(x, pre + "ln_2") @ sd[pre + "mlp.c_fc.weight"] + sd[pre + "mlp.c_fc.bias"], approximate="tanh")
        x = x + hidden @ sd[pre + "mlp.c_proj.weight"] + sd[pre + "mlp.c_proj.bias"]
    logits = ln(x, "transformer.ln_f") @ sd["transformer.wte.weight"].T
    return float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)))


def test_sink_removal_changes_the_loss_as_a_hand_computation_predicts(planted_model, planted_checkpoint, planted_report):
    config = SinkConfig(n_prompts=3, bos=(True,))  # the same sequences as ``planted_report``
    batch = census_batch(planted_model, config, True)
    base, n_tok = mean_loss(planted_model, batch, batch_size=8)
    removed, _ = mean_loss(planted_model, batch, removal_hooks({0: [1]}), batch_size=8)
    assert n_tok == 3 * 63
    hand_base = _hand_loss(planted_checkpoint, batch.tokens, None)
    hand_removed = _hand_loss(planted_checkpoint, batch.tokens, SINK)
    assert abs(hand_removed - hand_base) > 1e-4  # the change is real, not rounding
    assert_close(base, hand_base, "float32")
    assert_close(removed, hand_removed, "float32")
    assert_close(removed - base, hand_removed - hand_base, "float32")
    # the report's removal row is the same computation
    row = planted_report["removal"].query("bos and removed == '0.1'").iloc[0]
    assert_close(row["delta_loss"], hand_removed - hand_base, "float32")


def _zero_sink_value_checkpoint(planted_checkpoint, folder):
    """The planted model with head 0.1's value map projected off ln_1(x) at position 0 for BOS: v_0 = 0."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(str(planted_checkpoint))
    tr: Any = hf.transformer  # GPT-2's submodules, reached by name
    d, dh = hf.config.n_embd, hf.config.n_embd // hf.config.n_head
    with torch.no_grad():
        x0 = (tr.wte.weight[hf.config.bos_token_id] + tr.wpe.weight[0]).double()
        u = F.layer_norm(x0, (d,), tr.h[0].ln_1.weight.double(), tr.h[0].ln_1.bias.double(), eps=hf.config.layer_norm_epsilon)
        cols = slice(2 * d + SINK[1] * dh, 2 * d + (SINK[1] + 1) * dh)
        w = tr.h[0].attn.c_attn.weight[:, cols].double()
        w = w - torch.outer(u, u @ w) / (u @ u)
        tr.h[0].attn.c_attn.weight[:, cols] = w.float()
        tr.h[0].attn.c_attn.bias[cols] = 0.0
    hf.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(planted_checkpoint)).save_pretrained(folder)
    return folder


def test_value_norm_share_is_zero_when_the_sink_value_vector_is_zero(planted_model):
    """v_0 of head 0.1 set to zero (a hook on hook_v, attached before the census's own): share exactly 0."""
    from headlens.probes.hooks import attached

    batch = census_batch(planted_model, SinkConfig(n_prompts=4, bos=(True,)), True)

    def zero_sink_value(v, hook=None):
        v = v.clone()
        v[:, 0, SINK[1], :] = 0.0
        return v

    base = stream_sink_stats(planted_model, batch, eps=0.3, value_norm=True, batch_size=8)
    with attached(planted_model.bridge, [(f"blocks.{SINK[0]}.attn.hook_v", zero_sink_value)]):
        stats = stream_sink_stats(planted_model, batch, eps=0.3, value_norm=True, batch_size=8)
    vn, base_vn = stats.value_norm, base.value_norm
    assert vn is not None and base_vn is not None
    share = vn.share_sum / vn.queries
    attn = vn.attn_sum / vn.queries
    assert attn[SINK] >= 0.9 and base_vn.share_sum[SINK] / base_vn.queries >= 0.9
    assert share[SINK] == 0.0 and vn.sink_norm_sum[SINK] == 0.0
    # every other head is untouched (0.1 writes to a slot nothing reads, so layer 1 is unchanged too)
    others = torch.ones_like(share, dtype=torch.bool)
    others[SINK] = False
    assert_close(share[others], (base_vn.share_sum / base_vn.queries)[others], "float32")


def test_value_norm_share_with_the_sink_value_projected_out_of_the_weights(planted_checkpoint, tmp_path):
    """The same through the weights: W_V of 0.1 projected off ln_1(x) at position 0 (BOS).

    In exact arithmetic v_0 = 0; in float32 it is ~1e-7 of the other values' norm.  The share
    stays small but not zero, because the planted sink leaves only ~e^-12 attention per other key.
    """
    from headlens.probes.loading import load_model

    folder = _zero_sink_value_checkpoint(planted_checkpoint, tmp_path / "zero_v")
    model = load_model(model=str(folder), device="cpu")
    batch = census_batch(model, SinkConfig(n_prompts=4, bos=(True,)), True)
    vn = stream_sink_stats(model, batch, eps=0.3, value_norm=True, batch_size=8).value_norm
    assert vn is not None
    assert vn.attn_sum[SINK] / vn.queries >= 0.9
    assert vn.sink_norm_sum[SINK] / vn.other_norm_sum[SINK] < 1e-5
    assert vn.share_sum[SINK] / vn.queries < 0.01


def test_head_output_weights_are_c_proj_rows_by_head(planted_model):
    w = head_output_weights(planted_model, 1)
    c_proj = planted_model.bridge.original_model.transformer.h[1].attn.c_proj.weight
    assert w.shape == (4, planted_model.d_head, c_proj.shape[1])
    assert_close(w.reshape(-1, c_proj.shape[1]), c_proj, "exact")


def test_seed_measurement_on_planted(planted_model):
    table = seed_measurement(planted_model, "Apple raised its price target", prepend_bos=True)
    assert len(table) == 8 and table["n_tokens"].iloc[0] == 6
    top = table.iloc[0]
    assert (top["layer"], top["head"]) == SINK and top["attn_last_to_first"] >= 0.9
    assert_close(table["uniform"], torch.full((8,), 1 / 6, dtype=torch.float64), "exact")
    assert table["attn_last_to_first"].is_monotonic_decreasing
    no_bos = seed_measurement(planted_model, "Apple raised its price target", prepend_bos=False)
    assert no_bos["n_tokens"].iloc[0] == 5 and no_bos["first_token"].iloc[0] == "Apple"


def test_early_stop_leaves_no_hook_and_no_state(planted_model):
    """The census ends each pass with an exception after the last pattern; the model is unchanged after."""
    tokens = census_batch(planted_model, SinkConfig(n_prompts=2, bos=(True,)), True)
    before, _ = mean_loss(planted_model, tokens)
    stream_sink_stats(planted_model, tokens, eps=0.3, secondary=True, value_norm=True)
    after, _ = mean_loss(planted_model, tokens)
    assert before == after
    points = planted_model.bridge.hook_dict
    assert all(not points[f"blocks.{layer}.attn.hook_{w}"].fwd_hooks for layer in range(2) for w in ("v", "pattern", "attn_scores"))


def test_own_prompts_of_different_lengths_padding_never_counts(planted_model):
    prompts = ("Apple raised its price target", "Down by the river bank, the water was calm and the boats were still.", "Hi there")
    config = SinkConfig(prompts=prompts, bos=(False,), skip=("content", "secondary", "removal", "windowed"))
    report = run_sinks(planted_model, config)
    census = report["census"].set_index(["layer", "head"])
    lengths = census_batch(planted_model, config, False).lengths
    assert lengths.tolist() == [5, 16, 2]
    uniform = sum(sum(1 / (i + 1) for i in range(n)) / n for n in lengths.tolist()) / 3
    # head 0.3 attends uniformly: padded keys and queries would pull its alpha away from the baseline
    assert_close(census.loc[(0, 3), "alpha_mean"], uniform, "float32")
    assert_close(census.loc[(0, 3), "uniform_alpha"], uniform, "float32")
    assert census.loc[SINK, "alpha_mean"] >= 0.9 and report.sink_heads(False)[0] == SINK
    # at these lengths a uniform head is above eps too (1/(i+1) averaged over 2 tokens is 0.75): why Gu et al. use 64
    assert uniform > 0.3 and report["sink_rates"]["uniform_alpha"].iloc[0] > 0.3
    assert "uniform attention itself is above eps" in summary_markdown(report, model_name="planted")
    assert set(report["value_norm"]["bos"]) == {False}
