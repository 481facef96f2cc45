"""``headlens.sinks``: the manifest, summary and findings say which text the losses were measured on."""

from __future__ import annotations

import pytest

from headlens.analyses.measure.texts import choose_text
from headlens.analyses.stimuli import eval_text
from headlens.reports.api.sinks import SinksResult, sinks

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


@pytest.fixture(scope="module")
def result(demo_model):
    return sinks(demo_model, **SMALL)


def test_manifest_records_the_text(demo_model, result):
    rule = choose_text(demo_model).describe()
    assert result.manifest["sinks"]["text"] == rule
    assert set(rule) >= {"name", "why", "sha256", "n_chars"}
    assert result.manifest["config"]["sinks"]["text"] is None


def test_summary_and_findings_name_the_text(demo_model, result):
    label = choose_text(demo_model).label
    assert f"Stimuli: windows of the {label}" in result.summary
    assert f"Losses (sink removal, windowed attention) measured on the {label}" in result.summary
    assert "Definitions: docs/studies/sinks.md" in result.summary and "study.py" not in result.summary
    found = result.findings()
    assert any(label in line for line in found.lines)
    assert any("windowed attention (BOS) rests on 1 sequence of 64 tokens, with no interval" in w for w in found.warnings)


def test_findings_read_back_from_the_folder(result, tmp_path):
    result.save(tmp_path / "s")
    back = SinksResult.from_folder(tmp_path / "s")
    assert back.findings() == result.findings()


def test_a_given_text_is_recorded_by_digest_not_copied(demo_model):
    given = sinks(demo_model, **SMALL, text=eval_text())
    assert given.manifest["config"]["sinks"]["text"] == "given (see sinks.text)"
    assert given.manifest["sinks"]["text"]["name"] == "text"
    assert given.manifest["sinks"]["text"]["n_chars"] == len(eval_text())
