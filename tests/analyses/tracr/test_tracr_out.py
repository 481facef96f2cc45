"""``headlens tracr-model --out EMPTY`` (issue 46 item 15): an empty folder was refused (exit 4,
'exists; pass --overwrite') where every other command writes into it, and Hugging Face's own
progress bars ('Writing model shards', 'Loading weights') leaked onto stderr beside the one-line
messages."""

from __future__ import annotations

import pytest

from headlens.reports.cli.main import cli


def test_tracr_model_writes_into_an_empty_folder_with_no_hub_bars(tmp_path):
    pytest.importorskip("tracr", reason="tracr-pypi is not installed (pip install 'headlens[circuits-bench]')")
    from click.testing import CliRunner

    runner = CliRunner()  # stderr apart: the bars went there
    out = tmp_path / "volume"
    out.mkdir()
    result = runner.invoke(cli, ["tracr-model", "hist", "--max-seq-len", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output + result.stderr
    assert (out / "ground_truth.json").is_file() and (out / "config.json").is_file()
    assert "Loading weights" not in result.stderr and "Writing model shards" not in result.stderr, result.stderr
    assert "it/s" not in result.stderr, result.stderr
    again = runner.invoke(cli, ["tracr-model", "hist", "--max-seq-len", "3", "--out", str(out)])
    assert again.exit_code == 4 and "--overwrite" in again.stderr  # a folder holding files is still refused
