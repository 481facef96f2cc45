"""Which text the sinks study cuts its windows from (the one rule, ``choose_text``), and the
settings refused before any forward pass."""

from __future__ import annotations

import hashlib

import pytest

from headlens.analyses.measure.texts import choose_text, demo_text
from headlens.analyses.sinks.config import SinkConfig
from headlens.analyses.sinks.study import run_sinks
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import InputError

#: A small, fast study: two BOS-prefixed census windows, one long sequence, losses only.
SMALL = {
    "n_prompts": 2,
    "window": 32,
    "bos": (True,),
    "long_tokens": 64,
    "attn_windows": (8,),
    "keep_first": (1,),
    "n_long": 1,
    "skip": ("content", "secondary", "value_norm"),
}


def _losses(run):
    removal = run["removal"]
    windowed = run["windowed"]
    return float(removal[removal["removed"] == "none"]["loss"].iloc[0]), float(windowed[windowed["full_attention"]]["loss"].iloc[0])


@pytest.fixture(scope="module")
def default_run(demo_model):
    return run_sinks(demo_model, SinkConfig(**SMALL))


def test_default_text_is_the_rules_choice(demo_model, default_run):
    rule = choose_text(demo_model)
    assert rule.name == "heldout"  # the demo model carries its own held-out text
    assert default_run.info["text"] == rule.describe()
    assert default_run.info["text"]["sha256"] == hashlib.sha256(demo_text("heldout").encode()).hexdigest()[:16]
    assert default_run.info["stimuli"] == f"windows of the {rule.label}"
    # the losses are those of the held-out text asked for by name, not of the built-in text
    named = run_sinks(demo_model, SinkConfig(**SMALL, text="heldout"))
    assert _losses(named) == _losses(default_run)


def test_explicit_text_wins(demo_model, default_run):
    builtin = run_sinks(demo_model, SinkConfig(**SMALL, text="builtin"))
    assert builtin.info["text"]["name"] == "builtin"
    assert builtin.info["text"]["n_chars"] == len(eval_text())
    removal, windowed = _losses(builtin)
    held_removal, held_windowed = _losses(default_run)
    assert removal != held_removal and windowed != held_windowed
    # the demo model predicts its own held-out text far better than the built-in English text
    assert held_removal < removal - 1.0
    given = run_sinks(demo_model, SinkConfig(**SMALL, text=eval_text()))
    assert given.info["text"]["name"] == "text" and _losses(given) == (removal, windowed)


def test_windowed_records_its_sequence_count(default_run):
    assert default_run.info["n_long_sequences"] == {"BOS": 1}


@pytest.mark.parametrize("keep", [64, 999])
def test_keep_first_beyond_the_long_sequences_is_refused(demo_model, keep):
    with pytest.raises(InputError, match=rf"keep_first={keep} is beyond the 64-token sequences") as err:
        run_sinks(demo_model, SinkConfig(**{**SMALL, "keep_first": (keep,)}))
    assert "\n" not in str(err.value)


def test_keep_first_inside_the_long_sequences_passes_the_check(demo_model):
    from headlens.analyses.sinks.study import _check_against_model

    _check_against_model(demo_model, SinkConfig(**{**SMALL, "keep_first": (63,)}))  # 63 of 64 tokens: a setting, not a no-op
    # skipped windowed attention has no long sequences to exceed
    _check_against_model(demo_model, SinkConfig(**{**SMALL, "keep_first": (999,), "skip": ("windowed",)}))


def test_empty_text_is_refused():
    with pytest.raises(InputError, match="text= is empty"):
        SinkConfig(text="  ")
