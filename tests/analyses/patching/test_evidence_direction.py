"""Every role's test states the direction it predicts (issue 28 item 1): an effect in the other
direction is "not supported", and the reason says so in words.

Two planted checkpoints with one head's weights changed by construction (attention patterns, and
so the census roles, unchanged):

* the sink head 0.1's output, when it attends to the first token (BOS), writes a large boost of a
  token the text never holds: the sink hurts every prediction, so removing it LOWERS the loss
  (the issue's demo model with random layer-1 output weights did the same: -0.042 nats, called
  "supported");
* head 1.1 (referent) copies the name it attends to into the token slot, so the model prefers the
  pronoun's antecedent; head 1.2 gets 1.1's attention and the opposite copy (a third of its size):
  patching it from the clean sentence moves the preference AWAY from the antecedent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headlens.analyses.measure.verdicts import (
    AS_PREDICTED,
    MIN_ITEMS,
    NO_FINDING,
    NOT_DISTINGUISHABLE,
    OPPOSITE,
    TOO_SMALL,
    predicted_verdict,
)
from headlens.analyses.patching.evidence import MIN_EFFECT, MIN_LOSS, NOT_SUPPORTED, SUPPORTED, role_evidence
from headlens.analyses.patching.evidence_rules import induction_checks, judge
from headlens.analyses.synthetic.planted import BOS_ID

D_MODEL, D_HEAD = 256, 64  # the planted checkpoint's shape (PlantedSpec defaults, 4 heads)
#: A token the built-in evaluation text does not hold (" Magikarp"-like rarity): the harmful sink boosts it.
RARE = 30212


def _table(rows):
    return pd.DataFrame([(l, h, f"{l}.{h}", r) for l, h, r in rows], columns=["layer", "head", "name", "role"])


def _variant(planted_checkpoint: Path, folder: Path, change) -> Path:
    import torch
    from transformers import AutoTokenizer, GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(planted_checkpoint)
    with torch.no_grad():
        change(model)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(planted_checkpoint).save_pretrained(folder)
    return folder


def _harmful_sink(model) -> None:
    """Head 0.1 reads the BOS token's direction (1 at position 0, about 0 elsewhere) and writes a
    3-unit boost of :data:`RARE`: attending to the first token costs every prediction."""
    attn, wte = model.transformer.h[0].attn, model.transformer.wte.weight
    v = slice(2 * D_MODEL + D_HEAD, 2 * D_MODEL + 2 * D_HEAD)
    attn.c_attn.weight[:, v] = 0
    attn.c_attn.weight[:, v.start] = wte[BOS_ID] / wte[BOS_ID].norm() / (D_MODEL / 2) ** 0.5  # LayerNorm scales x_0 by sqrt(d/2)
    attn.c_proj.weight[D_HEAD : 2 * D_HEAD] = 0
    attn.c_proj.weight[D_HEAD] = 3 * wte[RARE] / wte[RARE].norm()


def _opposed_referent(model) -> None:
    """1.1 copies the attended name (head 1.0's copy map); 1.2 = 1.1's attention, minus a third of that copy."""
    attn = model.transformer.h[1].attn
    copy = attn.c_proj.weight[0:D_HEAD].clone()
    attn.c_proj.weight[D_HEAD : 2 * D_HEAD] = copy
    for part in range(3):  # q | k | v columns of 1.1 -> 1.2
        attn.c_attn.weight[:, part * D_MODEL + 2 * D_HEAD : part * D_MODEL + 3 * D_HEAD] = attn.c_attn.weight[
            :, part * D_MODEL + D_HEAD : part * D_MODEL + 2 * D_HEAD
        ]
    attn.c_proj.weight[2 * D_HEAD : 3 * D_HEAD] = -copy / 3


@pytest.fixture(scope="module")
def harmful_sink_model(planted_checkpoint, tmp_path_factory):
    from headlens.probes.loading import load_model

    return load_model(model=str(_variant(planted_checkpoint, tmp_path_factory.mktemp("sink"), _harmful_sink)), device="cpu")


@pytest.fixture(scope="module")
def opposed_referent_model(planted_checkpoint, tmp_path_factory):
    from headlens.probes.loading import load_model

    return load_model(model=str(_variant(planted_checkpoint, tmp_path_factory.mktemp("ref"), _opposed_referent)), device="cpu")


def test_a_sink_whose_removal_lowers_the_loss_is_not_supported(harmful_sink_model):
    ev = role_evidence(harmful_sink_model, _table([(0, 1, "sink")]), n=MIN_ITEMS)
    row = ev.iloc[0]
    assert row.figure_high < -MIN_LOSS, row.detail  # the construction: removal lowers the loss, interval below 0
    assert row.evidence == NOT_SUPPORTED and "removing it lowers the loss" in row.detail, row.detail


def test_a_head_that_pushes_against_the_antecedent_is_not_a_referent_head(opposed_referent_model):
    ev = role_evidence(opposed_referent_model, _table([(1, 1, "referent"), (1, 2, "referent")]), n=MIN_ITEMS)
    right, wrong = ev.iloc[0], ev.iloc[1]
    assert right["evidence"] == SUPPORTED and float(right["figure_low"]) > MIN_EFFECT, right["detail"]
    assert float(wrong["figure_high"]) < -MIN_EFFECT, wrong["detail"]  # the construction: the opposite copy, interval below 0
    assert wrong["evidence"] == NOT_SUPPORTED and "away from the antecedent" in str(wrong["detail"]), wrong["detail"]


@pytest.mark.parametrize(
    "estimate, low, high, predicts, bar, bar_on, kind",
    [
        (0.5, 0.3, 0.7, 1, 0.1, "estimate", AS_PREDICTED),
        (-0.5, -0.7, -0.3, 1, 0.1, "estimate", OPPOSITE),  # |effect| is large, the sign is wrong
        (-0.005, -0.008, -0.002, 1, 0.1, "estimate", OPPOSITE),  # wrong way, however small
        (0.05, 0.02, 0.08, 1, 0.1, "estimate", TOO_SMALL),
        (0.15, 0.05, 0.25, 1, 0.1, "low", TOO_SMALL),  # the bar on the interval's low end
        (0.25, 0.15, 0.35, 1, 0.1, "low", AS_PREDICTED),
        (0.5, -0.1, 1.1, 1, 0.1, "estimate", NOT_DISTINGUISHABLE),
        (-0.5, -0.7, -0.3, -1, 0.1, "estimate", AS_PREDICTED),  # a test that predicts a fall
        (0.5, 0.3, 0.7, -1, 0.1, "estimate", OPPOSITE),
        (-0.15, -0.25, -0.05, -1, 0.1, "low", TOO_SMALL),  # predicts a fall: the bar is on the high end
        (0.5, np.nan, np.nan, 1, 0.1, "estimate", NO_FINDING),
    ],
)
def test_predicted_verdict_is_direction_aware(estimate, low, high, predicts, bar, bar_on, kind):
    got = predicted_verdict(estimate, low, high, predicts=predicts, bar=bar, bar_on=bar_on, n_items=MIN_ITEMS)
    assert got.kind == kind and got.holds == (kind == AS_PREDICTED)


def test_predicted_verdict_needs_the_items_and_no_smoke():
    assert predicted_verdict(0.5, 0.3, 0.7, bar=0.1, n_items=MIN_ITEMS - 1).kind == NO_FINDING
    assert predicted_verdict(0.5, 0.3, 0.7, bar=0.1, n_items=MIN_ITEMS, smoke=True).kind == NO_FINDING
    with pytest.raises(ValueError, match="predicts"):
        predicted_verdict(0.5, 0.3, 0.7, predicts=0)


@pytest.mark.parametrize(
    "role, figure, low, high, said",
    [
        ("induction", -0.151, -0.202, -0.099, "raises the loss on the first copy more"),  # the random-output demo, head 1.3
        ("sink", -0.042, -0.060, -0.025, "removing it lowers the loss"),  # the figure for 1.3 sink
        ("referent", -0.37, -0.52, -0.23, "away from the antecedent"),
        ("previous_token", -0.3, -0.4, -0.2, "lowers the induction logit difference"),
        ("duplicate_token", -4.0, -4.2, -3.9, "reads the neighbour"),
    ],
)
def test_every_role_calls_the_opposite_direction_not_supported(role, figure, low, high, said):
    verdict, why = judge(role, figure, low, high, n_items=32)
    assert verdict == NOT_SUPPORTED and said in why
    verdict, why = judge(role, -figure, -high, -low, n_items=32)  # the same size in the predicted direction
    assert verdict == SUPPORTED and why == ""


@pytest.mark.parametrize(
    "m1, m2, low2, high2, knock, said",
    [
        (0.0, -0.05, -0.08, -0.02, (0.3, 0.2, 0.4), "lowers the loss on the second copy"),
        (0.0, 0.005, 0.002, 0.008, (0.3, 0.2, 0.4), "too small (below the"),
        (0.0, 0.05, -0.01, 0.11, (0.3, 0.2, 0.4), "+0.050 nats [-0.010, +0.110]: not distinguishable from 0"),  # the point clears the bar
        (0.0, 0.05, np.nan, np.nan, (0.3, 0.2, 0.4), "no interval"),
        (0.4, 0.6, 0.5, 0.7, (0.3, 0.2, 0.4), "not specific to repeats"),
        # the reviewer's random-output demo, head 1.3: the excess came from the first copy getting better
        (-0.296, 0.026, 0.004, 0.048, (0.3, 0.2, 0.4), "less than 2x the first copy's fall (-0.296)"),
        (-0.009, 1.21, 1.1, 1.3, (0.9, 0.8, 1.0), ""),  # the demo's head 1.0: a first copy slightly better does not hide a real rise
        # an upstream head: its ablation passes, masking its induction attention moves nothing
        (0.0, 1.0, 0.9, 1.1, (0.001, -0.002, 0.004), "moves the loss by +0.001 nats [-0.002, +0.004]: the effect does not go through"),
        (0.0, 1.0, 0.9, 1.1, (-0.2, -0.3, -0.1), "moves the loss by -0.200 nats"),
        (0.0, 1.0, 0.9, 1.1, (0.005, 0.002, 0.008), "raises the loss by only +0.005 nats (below the 0.01"),
        (0.0, 1.0, 0.9, 1.1, (0.2, np.nan, np.nan), "gives no interval"),
        (0.0, 1.0, 0.9, 1.1, None, ""),  # the knockout not computed: not checked here
        (0.0, 1.0, 0.9, 1.1, (0.3, 0.2, 0.4), ""),
    ],
)
def test_induction_checks_say_which_way_it_fails(m1, m2, low2, high2, knock, said):
    got = induction_checks(m1, m2, knock, m2_low=low2, m2_high=high2)
    assert (said in got) if said else got == "", got


def _random_layer1_output(model) -> None:
    """The issue's construction: layer 1's output weights random, of the same norm (seed 1)."""
    import torch

    w = model.transformer.h[1].attn.c_proj.weight
    torch.manual_seed(1)
    r = torch.randn_like(w)
    w.copy_(r * w.norm() / r.norm())


@pytest.mark.slow
def test_an_induction_excess_from_the_first_copy_getting_better_is_not_support(tmp_path):
    from headlens.analyses.demo import MODEL_DIR
    from headlens.probes.loading import load_model

    model = load_model(model=str(_variant(MODEL_DIR, tmp_path / "rand", _random_layer1_output)), device="cpu")
    row = role_evidence(model, _table([(1, 3, "induction")]), n=32).iloc[0]
    assert row.figure_low > 0, row.detail  # the construction: the excess is a finding (0.322 [0.255, 0.394]) ...
    assert "-0.296 on the first" in row.detail and "+0.026 nats on the second" in row.detail, row.detail  # ... from the first copy
    # was "supported": the second-copy rise is judged on its own interval (here it includes 0)
    assert row.evidence == NOT_SUPPORTED and "the second-copy rise is +0.026 nats [" in row.detail, row.detail
    assert "not distinguishable from 0" in row.detail, row.detail


def test_every_tested_role_has_one_rule_with_its_direction_in_the_manifest():
    from headlens.analyses.patching.evidence_rules import ROLE_RULES, UNITS, evidence_rule

    assert set(ROLE_RULES) == set(UNITS)
    predicted = evidence_rule()["predicted"]
    for role, rule in ROLE_RULES.items():
        assert rule.predicts and rule.opposite and predicted[role]["predicts"] == rule.predicts


def test_the_printed_rule_states_the_induction_knockout_not_a_direct_share():
    """The rule paragraph of the report page and summary (and the manifest's prediction) say what decides an
    induction verdict now: the knockout of the head's induction attention, not its direct logit share."""
    from headlens.analyses.patching.evidence_rules import ROLE_RULES
    from headlens.reports.render.evidence_text import evidence_rule_text

    text = evidence_rule_text()
    assert "masking only its attention from each second-copy token to the token after the earlier occurrence" in text
    assert "logit difference itself" not in text
    assert "token after the earlier occurrence" in ROLE_RULES["induction"].predicts
