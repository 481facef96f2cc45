"""``--out`` a symlink to an empty folder or a dangling symlink (issue 46 item 11): the command
wrote its result into a temporary sibling, then ``rmtree`` on the link (or ``rename`` onto it)
raised: a traceback, exit 1, and the finished result was removed.  Now the folder it names gets
the files and the link stays."""

from __future__ import annotations

import os

import pytest

from headlens.reports.cli.main import cli


@pytest.mark.parametrize("dangling", [False, True])
def test_composition_writes_through_a_symlinked_out(tiny_checkpoint, tmp_path, runner, dangling):
    target = tmp_path / "volume"
    if not dangling:
        target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    args = ["composition", "--model", str(tiny_checkpoint), "--n-baseline", "20", "--n-tokens", "50", "--out", str(link), "-q"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert link.is_symlink() and "manifest.json" in os.listdir(target)
    assert sorted(os.listdir(tmp_path)) == ["out", "volume"]  # no temporary folder left beside it


def test_a_table_command_writes_through_a_dangling_symlinked_folder(tiny_checkpoint, tmp_path, runner):
    """``detect --out LINK/scores.csv`` writes file by file (atomic_write): the folder a dangling link names is
    made (``Path.mkdir`` on the link raised FileExistsError: exit 4 after the census, the scores lost)."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "later" / "volume")
    table = str(link / "scores.csv")
    args = ["detect", "--model", str(tiny_checkpoint), "--n-prompts", "2", "--detectors", "previous_token", "--out", table, "-q"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and any(name.endswith(".csv") for name in os.listdir(tmp_path / "later" / "volume"))
