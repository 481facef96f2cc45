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


def test_a_folder_swapped_in_has_a_normal_mode_and_a_failed_one_leaves_the_old(tmp_path):
    from headlens.probes.outputs import atomic_dir

    target = tmp_path / "run"
    old = os.umask(0o027)
    try:
        with atomic_dir(target) as tmp:
            (tmp / "a.csv").write_text("1")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o750  # 0o777 less the umask, not mkdtemp's 0o700
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "b.csv").write_text("half")
            raise RuntimeError("killed")
    assert sorted(p.name for p in target.iterdir()) == ["a.csv"] and os.listdir(tmp_path) == ["run"]
    with atomic_dir(target) as tmp:  # a complete new folder replaces the old one
        (tmp / "c.csv").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["c.csv"]
