"""Atomic outputs: the new file replaces the old in one step and gets a normal file's mode."""

from __future__ import annotations

import os
import stat

import pytest

from headlens.probes.outputs import atomic_write, write_text


def test_a_written_file_has_the_mode_open_would_give(tmp_path):
    old = os.umask(0o027)
    try:
        path = write_text(tmp_path / "out" / "table.csv", "a,b\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0o666 less the umask, not mkstemp's 0o600
    assert os.listdir(path.parent) == ["table.csv"]  # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = write_text(tmp_path / "x.txt", "old")

    def boom(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["x.txt"]
