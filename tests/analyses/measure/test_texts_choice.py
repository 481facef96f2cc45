"""A model that carries its own held-out text (the demo) is measured on it by default: ablation,
pruning, the report's stages and the sink evidence, through the one rule
(:func:`headlens.analyses.measure.texts.choose_text`); any other model on the built-in text.
The manifest says which text and why (issue 28 items 2 and 9)."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest

import headlens
from headlens.analyses.demo import MODEL_DIR
from headlens.analyses.measure.texts import BUILTIN_TEXT, HELDOUT_TEXT, choose_text
from headlens.analyses.patching.evidence import role_evidence
from headlens.probes.errors import InputError
from headlens.reports.cli.main import cli

pytestmark = pytest.mark.skipif(not (MODEL_DIR / "model.safetensors").is_file(), reason="the demo checkpoint is not shipped in this tree")

#: The demo's loss on its own held-out text (the card: 4.55 nats over every window) and on the
#: built-in English text (9.8), which it never saw: a default on the held-out text lands well below this.
IN_DOMAIN_MAX = 6.0
OUT_OF_DOMAIN_MIN = 8.5
#: Small runs: what is measured on is under test, not the statistics.
FAST = {"n_bootstrap": 20, "attribution": False, "n_windows": 4, "window": 64}


@pytest.fixture(scope="module")
def demo(demo_model):
    return demo_model  # loaded once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def default_ablation(demo):
    """``headlens.ablate(demo, **FAST)`` at its default text: run once, read by two tests."""
    return headlens.ablate(demo, **FAST)


def test_ablate_on_the_demo_defaults_to_its_held_out_text_and_says_so(demo, default_ablation):
    result = default_ablation
    assert result.unablated_value < IN_DOMAIN_MAX
    info = result.info
    assert info["data"]["text"] == HELDOUT_TEXT
    assert info["text"]["name"] == "heldout" and info["text"]["why"].startswith("default: the model carries its own held-out text")
    assert HELDOUT_TEXT in result.basis
    out_of_domain = headlens.ablate(demo, text="builtin", **FAST)
    assert out_of_domain.unablated_value > OUT_OF_DOMAIN_MIN
    assert out_of_domain.info["text"]["name"] == "builtin" and out_of_domain.info["text"]["why"] == "asked for (text='builtin')"


def test_text_heldout_and_demo_text_are_the_text_demo_heldout_writes(demo, default_ablation):
    text = headlens.demo_text("heldout")
    assert text.count("<|endoftext|>") > 10 and len(text) > 100_000  # its documents, joined as `headlens demo heldout` writes them
    asked = headlens.ablate(demo, text="heldout", **FAST)
    default = default_ablation
    assert asked.unablated_value == default.unablated_value
    assert asked.info["text"]["why"] == "asked for (text='heldout')"
    assert asked.info["text"]["sha256"] == hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    with pytest.raises(InputError, match="split="):
        headlens.demo_text("train")


def test_prune_on_the_demo_defaults_to_its_held_out_text(demo):
    result = headlens.prune(demo, step=0.5, random_seeds=1, n_windows=2, window=64)
    assert result.info["data"]["text"] == HELDOUT_TEXT and result.info["text"]["name"] == "heldout"
    assert result.unablated_value < IN_DOMAIN_MAX


def test_a_model_without_its_own_text_gets_the_built_in_text_recorded(tiny_model):
    result = headlens.ablate(tiny_model, **{**FAST, "n_windows": 2, "window": 16})
    assert result.info["data"]["text"] == BUILTIN_TEXT
    assert result.info["text"]["name"] == "builtin"
    assert result.info["text"]["why"] == "default: the model carries no held-out text of its own"
    with pytest.raises(InputError, match="carries no held-out text of its own") as err:
        headlens.ablate(tiny_model, text="heldout", **{**FAST, "n_windows": 2, "window": 16})
    assert "\n" not in str(err.value)


def test_the_sink_evidence_runs_on_the_demo_s_held_out_text(demo, tiny_model):
    roles = pd.DataFrame({"layer": [1], "head": [3], "name": ["1.3"], "role": ["sink"]})
    row = role_evidence(demo, roles, n=10, smoke=True).iloc[0]
    assert HELDOUT_TEXT in row["test"] and "default: the model carries its own held-out text" in row["test"]
    tiny = role_evidence(tiny_model, roles.assign(layer=0, head=1, name="0.1"), n=10, smoke=True).iloc[0]
    assert BUILTIN_TEXT in tiny["test"]
    assert choose_text(tiny_model).name == "builtin" and choose_text(demo).name == "heldout"


def test_the_report_on_the_demo_measures_on_its_held_out_text(demo, runner, tmp_path):
    out = tmp_path / "report"
    skip = "census,evidence,sinks,ablation_mean,pruning,examples,design"
    res = runner.invoke(cli, ["report", "--model", "demo", "--quick", "--skip", skip, "-q", "--out", str(out)])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    record = manifest["report"]["eval_text"]
    assert record["source"] == "default" and record["name"] == "heldout" and record["label"] == HELDOUT_TEXT
    info = json.loads((out / "ablation_zero" / "stage.json").read_text())["info"]
    assert info["data"]["text"] == HELDOUT_TEXT and info["text"]["name"] == "heldout"
    assert info["unablated_value"] < IN_DOMAIN_MAX
