"""detect and classify through CliRunner: outputs, formats, bad input."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models

SMALL = ["--n-prompts", "4", "--seq-len", "10", "--window", "24", "-q"]


@pytest.fixture()
def tiny_loaded(tiny_checkpoint, tiny_model):
    """``-m TINY`` gets the session's tiny model (a load is half a second of CPU) in the tests that
    check what the command writes or refuses, not how it loads (classify loads it for real; a missing folder is still
    loaded, and refused, for real)."""
    with session_models({str(tiny_checkpoint): tiny_model}):
        yield


@pytest.mark.parametrize("ext", ["csv", "json", "parquet"])
def test_detect_writes_table_by_extension(runner, tiny_checkpoint, tmp_path, ext, tiny_loaded):
    out = tmp_path / f"scores.{ext}"
    res = runner.invoke(cli, ["detect", "-m", str(tiny_checkpoint), "--detectors", "sink,induction", *SMALL, "--out", str(out)])
    assert res.exit_code == 0, res.output
    df = {"csv": pd.read_csv, "json": pd.read_json, "parquet": pd.read_parquet}[ext](out)
    assert list(df.columns) == ["layer", "head", "detector", "score", "baseline", "ci_low", "ci_high", "n", "accuracy"]
    assert len(df) == 2 * 8 and set(df.detector) == {"sink", "induction"}
    assert (df.ci_low <= df.score).all() and (df.score <= df.ci_high).all() and (df.n == 4).all()
    manifest = json.loads((tmp_path / "scores.manifest.json").read_text())
    assert manifest["config"]["census"]["n_prompts"] == 4 and manifest["prepend_bos"] is True
    assert "repeated" in manifest["stimuli"]


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_classify_writes_everything(runner, tiny_checkpoint, tmp_path):
    out = tmp_path / "census"
    res = runner.invoke(cli, ["classify", "-m", str(tiny_checkpoint), *SMALL, "--threshold", "induction=0.4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    names = {p.name for p in out.iterdir()}
    assert {"scores.csv", "roles.csv", "heads.csv", "summary.md", "manifest.json"} <= names
    for det in ["previous_token", "duplicate_token", "induction", "sink", "referent"]:
        assert f"heatmap_{det}.png" in names and f"heatmap_{det}.svg" in names
    roles = pd.read_csv(out / "roles.csv", keep_default_na=False, dtype={"name": str})  # the long table
    assert list(roles.columns) == ["layer", "head", "name", "role"]
    assert len(roles) == 0, "a random tiny model has no head with a role"
    heads = pd.read_csv(out / "heads.csv", keep_default_na=False, dtype={"name": str})  # "1.10" must not become 1.1
    assert list(heads.columns) == ["layer", "head", "name", "roles", "strongest_detector", "strongest_score"]
    assert len(heads) == 8 and list(heads.name) == [f"{l}.{h}" for l in range(2) for h in range(4)]
    assert (heads.roles == "").all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["thresholds"]["induction"] == 0.4


def test_bad_input(runner, tiny_checkpoint, tmp_path, tiny_loaded):
    m = ["-m", str(tiny_checkpoint)]
    bad_span = tmp_path / "bad_span.jsonl"
    bad_span.write_text(
        json.dumps({"text": "John met Mary and she left.", "pronoun": [18, 40], "antecedent": [8, 13], "distractor": [0, 4]}) + "\n"
    )
    multi = tmp_path / "multi.jsonl"
    text = " Bartholomew met Mary and she left."
    multi.write_text(
        json.dumps(
            {
                "text": text,
                "pronoun": [text.index(" she"), text.index(" she") + 4],
                "antecedent": [text.index(" Mary"), text.index(" Mary") + 5],
                "distractor": [0, 12],
            }
        )
        + "\n"
    )
    cases = [
        (["detect", *m, "--detectors", "induction,nope", "--out", str(tmp_path / "a.csv")], "unknown detector 'nope'"),
        (["detect", *m, "--n-prompts", "0", "--out", str(tmp_path / "a.csv")], "--n-prompts must be at least 1"),
        (["detect", *m, "--out", str(tmp_path / "a.txt")], ".csv, .parquet or .json"),
        (["classify", *m, "--threshold", "induction:0.4", "--out", str(tmp_path / "c")], "malformed threshold"),
        (["classify", *m, "--threshold", "inductive=0.4", "--out", str(tmp_path / "c")], "unknown detector 'inductive'"),
        (["classify", *m, "--threshold", "induction=1.5", "--out", str(tmp_path / "c")], "must be in (0, 1]"),
        (["detect", *m, "--referent-file", str(bad_span), "--detectors", "referent", "--out", str(tmp_path / "a.csv")], "line 1"),
        (["detect", *m, "--referent-file", str(multi), "--detectors", "referent", "--out", str(tmp_path / "a.csv")], "single tokens"),
    ]
    for args, needle in cases:
        res = runner.invoke(cli, args)
        assert res.exit_code == 2, (args, res.output)
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("headlens: error:") and needle in lines[0], (args, res.output)
        assert not (tmp_path / "a.csv").exists() and not (tmp_path / "c").exists()
