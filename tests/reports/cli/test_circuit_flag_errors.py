"""``headlens circuit``: errors in the CLI's words (flags, not parameter names)."""

from __future__ import annotations

from headlens.reports.cli.main import cli


def test_top_n_with_threshold_names_the_flags(runner, tmp_path):
    res = runner.invoke(
        cli, ["circuit", "--model", "demo", "--builtin", "names", "--top-n", "5", "--threshold", "0.1", "--out", str(tmp_path / "c")]
    )
    assert res.exit_code == 2, res.output
    assert "give --top-n or --threshold, not both" in res.output
    assert "top_n" not in res.output and not (tmp_path / "c").exists()
