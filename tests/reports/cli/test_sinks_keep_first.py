"""``headlens sinks --keep-first`` beyond the windowed run's sequences: one line, exit 2, nothing written."""

from __future__ import annotations

from headlens.reports.cli.main import cli


def test_keep_first_beyond_the_context_is_refused(runner, planted_checkpoint, tmp_path):
    out = tmp_path / "sinks"
    args = ["sinks", "--model", str(planted_checkpoint), "--out", str(out), "--long-tokens", "32", "--keep-first", "999", "-q"]
    res = runner.invoke(cli, args)
    assert res.exit_code == 2, res.output
    error = [line for line in res.output.splitlines() if line.strip()]
    assert len(error) == 1 and "--keep-first 999 is beyond the 32-token sequences" in error[0] and "keep_first" not in error[0]
    assert not out.exists() or not any(out.iterdir())
