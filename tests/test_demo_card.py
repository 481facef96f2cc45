"""MODEL_CARD.md: the facts (analyses/demo/card.py) rendered through the shipped Jinja2 template
(analyses/demo/model_card.md.j2) by reports/demo_card.py, on the shipped demo folder's log and a
census made up here (no census is run)."""

from __future__ import annotations

import pandas as pd
import pytest

from headlens.analyses.demo import MODEL_DIR
from headlens.analyses.demo.card import DETECTORS, card_facts, template_text
from headlens.reports.demo_card import render_model_card


def _census(best_sink: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = []
    for layer in range(2):
        for head in range(4):
            for i, det in enumerate(DETECTORS):
                score = 0.1 * (layer * 4 + head) / 8 + 0.01 * i
                if det == "sink" and (layer, head) == (0, 1):
                    score = best_sink
                rows.append({"layer": layer, "head": head, "detector": det, "score": score, "ci_low": score - 0.05, "ci_high": score + 0.05, "baseline": 0.02, "n": 100})
    roles = pd.DataFrame([{"layer": 0, "head": 1, "name": "0.1", "role": "sink"}, {"layer": 1, "head": 0, "name": "1.0", "role": "induction"}, {"layer": 1, "head": 0, "name": "1.0", "role": "duplicate_token"}])
    return pd.DataFrame(rows), roles


def test_card_renders_every_fact_from_the_template():
    text = render_model_card(MODEL_DIR, {"bos": _census(0.9), "no_bos": _census(0.2)})
    facts = card_facts(MODEL_DIR, {})
    assert text.startswith("# headlens demo model\n") and text.endswith("differ slightly.\n")
    assert "{{" not in text and "{%" not in text and "\n\n\n" not in text
    assert f"--seed {facts['recipe']['seed']}` ({facts['summary']['steps']} steps, {facts['summary']['tokens']:,} tokens)" in text
    assert f"token streams fingerprint `{facts['data']['fingerprint']}`" in text
    assert text.index("### With BOS (the default)") < text.index("### Without BOS (`--no-bos`)") < text.index("## Reproduce")
    lines = text.splitlines()
    with_bos = lines[lines.index("### With BOS (the default)") :]
    row_01 = next(line for line in with_bos if line.startswith("| 0.1 |"))
    row_10 = next(line for line in with_bos if line.startswith("| 1.0 |"))
    row_12 = next(line for line in with_bos if line.startswith("| 1.2 |"))
    assert "**0.900**" in row_01 and row_01.count("**") == 2  # only the role's cell is bold
    assert row_10.startswith("| 1.0 | duplicate_token;induction |") and row_10.count("**") == 4
    assert row_12.startswith("| 1.2 | - |") and "**" not in row_12
    assert "- `sink`: 0.1 = 0.900 [0.850, 0.950], baseline 0.020, n = 100" in text
    assert "1 of 8 heads exceed 0.3 with BOS (best 0.900); 0 of 8 heads exceed 0.3 without BOS (best 0.200)." in text


def test_card_without_a_census_says_so():
    text = render_model_card(MODEL_DIR, {})
    assert "### With BOS" not in text and "### Without BOS" not in text
    assert "(Gu et al.'s alpha, threshold eps = 0.3), no census was run." in text


def test_a_fact_missing_from_the_template_is_an_error(monkeypatch):
    import jinja2

    import headlens.reports.demo_card as demo_card

    monkeypatch.setattr(demo_card, "template_text", lambda: template_text() + "{{ not_a_fact }}\n")
    with pytest.raises(jinja2.UndefinedError, match="not_a_fact"):
        demo_card.render_model_card(MODEL_DIR, {})
