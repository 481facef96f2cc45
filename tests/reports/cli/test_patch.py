# pyright: reportArgumentType=false, reportCallIssue=false
# (these tests pass strings, lists and single values where the signatures declare tuples: the studies coerce them)
"""``headlens patch``: files, one-line errors with their exit codes, --path on the planted checkpoint."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models


@pytest.fixture()
def tiny_loaded(tiny_checkpoint, tiny_model):
    """``-m TINY`` gets the session's tiny model (a load is half a second of CPU) in the tests that
    check what the command writes or refuses, not how it loads (the first test loads it for real; a missing folder is still
    loaded, and refused, for real)."""
    with session_models({str(tiny_checkpoint): tiny_model}):
        yield


def test_patch_writes_table_heatmap_and_manifest(tiny_checkpoint, tmp_path, runner):
    out = tmp_path / "out"
    args = ["patch", "--model", str(tiny_checkpoint), "--n-pairs", "4", "--n-resamples", "50", "--attribution", "-q", "--out", str(out)]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "patching.csv")
    assert {
        "layer",
        "head",
        "denoising",
        "denoising_low",
        "denoising_high",
        "noising",
        "noising_low",
        "noising_high",
        "attribution",
    } <= set(table.columns)
    assert len(table) == 2 * 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["patching"]["task"]["task"] == "induction" and "agreement_with_exact" in manifest["attribution"]
    assert "not exact" in res.output
    again = runner.invoke(cli, args)
    assert again.exit_code == 4 and "--overwrite" in again.output


def test_patch_path_on_the_planted_checkpoint(planted_checkpoint, tmp_path, runner):
    out = tmp_path / "path"
    res = runner.invoke(
        cli,
        [
            "patch",
            "--model",
            str(planted_checkpoint),
            "--n-pairs",
            "6",
            "--n-resamples",
            "50",
            "--path",
            "--receivers",
            "1.0,1.1",
            "-q",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    edges = pd.read_csv(out / "path_patching.csv", dtype={"sender": str, "receiver": str})
    best = edges.iloc[edges["effect"].abs().to_numpy().argmax()]
    assert (best["sender"], best["receiver"], best["receiver_input"]) == ("0.0", "1.0", "k")
    assert (out / "heatmap_path.png").exists()


def test_patch_bad_input_is_one_line_exit_2(tiny_checkpoint, tmp_path, runner, tiny_loaded):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"clean": "a b", "corrupt": "a b c", "correct": " x", "incorrect": " y"}\n' * 2)  # two pairs: one is refused as too few
    cases = [
        (["--task", str(bad)], "same token length"),
        (["--path", "--receivers", "9.0"], "out of range"),
        (["--path"], "--receivers"),
        (["--task", str(bad), "--builtin", "names"], "not both"),
    ]
    for i, (extra, words) in enumerate(cases):
        res = runner.invoke(
            cli, ["patch", "--model", str(tiny_checkpoint), "--n-pairs", "4", "-q", "--out", str(tmp_path / f"o{i}"), *extra]
        )
        assert res.exit_code == 2, (extra, res.output)
        assert words in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_receivers_alone_runs_path_patching_in_the_cli_as_in_the_library(tiny_checkpoint, tmp_path, runner, tiny_loaded):
    # issue 28 review item 9: the CLI refused --receivers without --path ("--receivers is for --path")
    # while headlens.patch(receivers=...) ran path patching: one rule, receivers imply path patching
    import headlens

    out = tmp_path / "recv"
    args = ["patch", "-m", str(tiny_checkpoint), "--n-pairs", "4", "--n-resamples", "20", "--receivers", "1.0", "-q", "--out", str(out)]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    cli_edges = pd.read_csv(out / "path_patching.csv", dtype={"sender": str, "receiver": str})
    lib = headlens.patch(str(tiny_checkpoint), builtin="induction", n_pairs=4, n_resamples=20, receivers="1.0", device="cpu")
    assert lib.path_patching is not None and set(cli_edges["receiver"]) == {"1.0"}
    assert cli_edges["effect"].to_numpy() == pytest.approx(lib.path_patching["effect"].to_numpy(), abs=1e-6, nan_ok=True)
