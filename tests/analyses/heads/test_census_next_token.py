"""The next-token detector measures nothing on causal attention: a default census of a causal
model leaves it out (no all-NaN table, no note); asked for by name it still runs (NaN, with its
note); encoders keep it by default."""

from __future__ import annotations

from typing import Any

import numpy as np

from headlens.analyses.heads.census import CensusConfig, run_census

SMALL: dict[str, Any] = {"n_prompts": 3, "window": 24, "seq_len": 8, "n_bootstrap": 20}


def test_default_census_of_a_causal_model_leaves_next_token_out(tiny_model):
    result = run_census(tiny_model, CensusConfig(**SMALL))
    assert "next_token" not in set(result.scores["detector"]) and "next_token" not in result.per_prompt
    assert result.detector_notes == {}
    assert not any("next_token" in note for info in result.stimuli.values() for note in info.get("notes", ()))
    assert {"previous_token", "induction", "duplicate_token", "sink"} <= set(result.scores["detector"])


def test_next_token_asked_for_still_runs_on_a_causal_model(tiny_model):
    result = run_census(tiny_model, CensusConfig(**SMALL, detectors=("previous_token", "next_token")))
    nxt = result.scores[result.scores["detector"] == "next_token"]
    assert len(nxt) == tiny_model.n_layers * tiny_model.n_heads and nxt["score"].isna().all()
    assert "not measurable on causal attention" in result.detector_notes["next_token"]


def test_default_census_of_an_encoder_keeps_next_token(family_model):
    result = run_census(family_model("bert"), CensusConfig(**SMALL))
    nxt = result.scores[result.scores["detector"] == "next_token"]
    assert len(nxt) > 0 and np.isfinite(nxt["score"]).all()
    assert "next_token" not in result.detector_notes


def test_detect_cli_prints_no_next_token_note_on_a_causal_model(tiny_checkpoint, runner, tmp_path):
    from headlens.reports.cli.main import cli

    out = tmp_path / "scores.csv"
    r = runner.invoke(
        cli, ["detect", "-m", str(tiny_checkpoint), "--n-prompts", "3", "--window", "24", "--seq-len", "8", "-q", "--out", str(out)]
    )
    assert r.exit_code == 0, r.stderr
    assert "next_token" not in r.stderr and "next_token" not in out.read_text()
    r = runner.invoke(
        cli,
        [
            "detect",
            "-m",
            str(tiny_checkpoint),
            "--detectors",
            "next_token,sink",
            "--n-prompts",
            "3",
            "--window",
            "24",
            "--seq-len",
            "8",
            "-q",
            "--out",
            str(tmp_path / "asked.csv"),
        ],
    )
    assert r.exit_code == 0, r.stderr
    assert "note: next_token" in r.stderr  # asked for: it runs and says why it is NaN


def test_summary_rule_lists_only_the_thresholds_of_detectors_that_ran(tiny_model):
    from headlens.analyses.heads.classify import classify_heads
    from headlens.reports.render.census_summary import census_summary

    result = run_census(tiny_model, CensusConfig(**SMALL))
    thresholds = {"previous_token": 0.5, "next_token": 0.5, "induction": 0.3}
    text = census_summary(
        result.scores,
        classify_heads(result.scores),
        model="tiny",
        prepend_bos=True,
        thresholds=thresholds,
        baseline_factor=2.0,
        stimuli=result.stimuli,
    )
    rule = next(line for line in text.splitlines() if "Thresholds:" in line)
    assert "previous_token=0.5" in rule and "induction=0.3" in rule and "next_token" not in rule
