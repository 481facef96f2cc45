"""``sinks_loss_notes``: which text the sink losses were measured on, few windowed sequences, a loss near chance."""

from __future__ import annotations

import math

import pandas as pd

from headlens.reports.render.sinks_tables import FEW_SEQUENCES, NEAR_CHANCE, sinks_loss_notes

VOCAB = 50257
TEXT = {"name": "heldout", "label": "demo's held-out text", "why": "default: the model carries its own held-out text"}


def _tables(loss: float) -> dict[str, pd.DataFrame]:
    removal = pd.DataFrame([{"bos": True, "removed": "none", "loss": loss}, {"bos": True, "removed": "all heads", "loss": loss + 0.1}])
    windowed = pd.DataFrame(
        [
            {"bos": True, "window": 256, "keep_first": 0, "full_attention": True, "loss": loss, "seq_tokens": 256},
            {"bos": True, "window": 8, "keep_first": 0, "full_attention": False, "loss": loss + 1, "seq_tokens": 256},
        ]
    )
    return {"removal": removal, "windowed": windowed}


def test_names_the_text():
    lines, _ = sinks_loss_notes(_tables(4.7), {"text": TEXT, "vocab_size": VOCAB})
    assert lines == [
        "losses (sink removal, windowed attention) measured on the demo's held-out text (default: the model carries its own held-out text)"
    ]


def test_near_chance_is_flagged_and_in_domain_is_not():
    assert 9.25 > NEAR_CHANCE * math.log(VOCAB) > 4.7
    _, at_chance = sinks_loss_notes(_tables(9.25), {"text": TEXT, "vocab_size": VOCAB})
    assert any("near chance" in w and "10.82" in w for w in at_chance)
    _, fine = sinks_loss_notes(_tables(4.7), {"text": TEXT, "vocab_size": VOCAB})
    assert not any("near chance" in w for w in fine)


def test_few_windowed_sequences_are_flagged():
    _, few = sinks_loss_notes(_tables(4.7), {"n_long_sequences": {"BOS": 2}})
    assert few == [
        "windowed attention (BOS) rests on 2 sequences of 256 tokens, with no interval:"
        " one measurement, not an estimate (more with --n-long)"
    ]
    _, enough = sinks_loss_notes(_tables(4.7), {"n_long_sequences": {"BOS": FEW_SEQUENCES}})
    assert enough == []


def test_nothing_without_loss_tables():
    assert sinks_loss_notes({}, {"text": TEXT, "vocab_size": VOCAB}) == ([], [])
