"""MODEL_CARD.md: the facts (analyses/demo/card.py) rendered through the shipped Jinja2 template
(analyses/demo/model_card.md.j2) by reports/runs/demo_card.py, on the shipped demo folder's log and a
census made up here (no census is run)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from headlens.analyses.demo import MODEL_DIR
from headlens.analyses.demo.card import DETECTORS, card_facts, template_text
from headlens.reports.runs.demo_card import render_model_card


def _census(best_sink: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = []
    for layer in range(2):
        for head in range(4):
            for i, det in enumerate(DETECTORS):
                score = 0.1 * (layer * 4 + head) / 8 + 0.01 * i
                if det == "sink" and (layer, head) == (0, 1):
                    score = best_sink
                rows.append(
                    {
                        "layer": layer,
                        "head": head,
                        "detector": det,
                        "score": score,
                        "ci_low": score - 0.05,
                        "ci_high": score + 0.05,
                        "baseline": 0.02,
                        "n": 100,
                    }
                )
    roles = pd.DataFrame(
        [
            {"layer": 0, "head": 1, "name": "0.1", "role": "sink"},
            {"layer": 1, "head": 0, "name": "1.0", "role": "induction"},
            {"layer": 1, "head": 0, "name": "1.0", "role": "duplicate_token"},
        ]
    )
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

    import headlens.reports.runs.demo_card as demo_card

    monkeypatch.setattr(demo_card, "template_text", lambda: template_text() + "{{ not_a_fact }}\n")
    with pytest.raises(jinja2.UndefinedError, match="not_a_fact"):
        demo_card.render_model_card(MODEL_DIR, {})


# ----------------------------------------------------------------------------- which loss (issue 20 item 4)


def _text_losses(facts):
    final, seq = facts["final"], facts["recipe"]["seq_len"]
    return [
        {
            "what": "`report --quick`",
            "n_windows": 2,
            "window": 32,
            "loss": 4.6746,
            "window_sd": 2.68,
            "basis": "2 windows x 32 tokens (BOS + 31 text tokens; 62 predictions) of the text",
        },
        {
            "what": "all of it",
            "n_windows": final["heldout_windows"],
            "window": seq,
            "loss": 4.5552,
            "window_sd": 0.96,
            "basis": "every window",
        },
    ]


def test_card_gives_one_canonical_loss_and_explains_the_others():
    facts = card_facts(MODEL_DIR, {})
    final, rec = facts["final"], facts["recipe"]
    text = render_model_card(MODEL_DIR, {}, _text_losses(facts))
    seq = rec["seq_len"]
    basis = (
        f"{final['heldout_windows']} windows x {seq} tokens (BOS + {seq - 1} text tokens; {final['heldout_targets']:,} predictions)"
        " of the held-out split, every window of its token stream"
    )
    assert f"**The demo's held-out loss is {final['heldout_loss']:.3f}** nats per token: {basis}" in text
    assert "| `report --quick` | 2 windows x 32 tokens (BOS + 31 text tokens; 62 predictions) of the text | 4.675 | 2.68 |" in text
    assert f"Every window of the text gives 4.555, not\n{final['heldout_loss']:.3f}: the text file lacks" in text
    assert "a standard deviation of 0.96 nats" in text
    curve = f"held-out loss on {rec['eval_windows']} windows x {seq} tokens (BOS + {seq - 1} text tokens"
    assert curve in text
    plain = render_model_card(MODEL_DIR, {})
    assert "Why other commands print other numbers" not in plain and "\n\n\n" not in plain and "{{" not in plain


def test_command_windows_are_the_commands_defaults():
    from headlens.analyses.demo.replay import read_log
    from headlens.reports.cli.ablate import ablate_cmd
    from headlens.reports.runs.demo_card import command_windows
    from headlens.reports.runs.report.settings import ReportSettings
    from headlens.reports.runs.sweep.plan import SweepConfig

    summary, _ = read_log(MODEL_DIR)
    rows = {(n, w): what for what, n, w in command_windows(summary)}
    d: dict[str, Any] = {p.name: p.default for p in ablate_cmd.params}
    assert "`ablate`" in rows[(d["n_windows"], d["window"])] and "`gqa`" in rows[(d["n_windows"], d["window"])]
    q = ReportSettings(quick=True).eval_data(summary["recipe"]["n_ctx"])
    assert "`report --quick`" in rows[(q["n_windows"], q["window"])]
    assert "`sweep`" in rows[(SweepConfig().loss_windows, SweepConfig().loss_window)]
    assert rows[(summary["final"]["heldout_windows"], summary["recipe"]["seq_len"])].startswith("all of it")


def test_heldout_text_losses_equal_ablate_on_the_heldout_file(runner, tmp_path):
    """The card's per-command losses are what `ablate --text-file` (demo heldout's file) reports as unablated."""
    import json

    from headlens.analyses.demo.card import heldout_text_losses
    from headlens.reports.cli.main import cli

    text_file = tmp_path / "heldout.txt"
    assert runner.invoke(cli, ["demo", "heldout", "--out", str(text_file)]).exit_code == 0
    out = tmp_path / "abl.csv"
    r = runner.invoke(
        cli,
        [
            "ablate",
            "-m",
            "demo",
            "--text-file",
            str(text_file),
            "--n-windows",
            "2",
            "--window",
            "32",
            "--layers",
            "0",
            "--no-attribution",
            "--bootstrap",
            "0",
            "-q",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.stderr
    unablated = json.loads(out.with_name("abl.manifest.json").read_text())["ablation"]["unablated_value"]
    (row,) = heldout_text_losses(MODEL_DIR, [("x", 2, 32)])
    assert abs(row["loss"] - unablated) < 1e-9
    assert "2 windows x 32 tokens (BOS + 31 text tokens; 62 predictions)" in r.stdout and row["basis"].startswith(
        "2 windows x 32 tokens (BOS + 31 text tokens; 62 predictions)"
    )
