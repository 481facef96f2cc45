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


def _save_a_result(out):
    """What every study's ``save`` does with a new or empty folder (:meth:`Result.save`)."""
    from headlens.probes.outputs import atomic_dir

    with atomic_dir(out) as tmp:
        (tmp / "table.csv").write_text("a\n1\n")
        (tmp / "manifest.json").write_text("{}")


def test_an_out_that_is_a_symlink_to_an_empty_folder_is_written_through(tmp_path):
    """Issue 46 item 11: ``rmtree`` on the link raised OSError (a traceback, exit 1, the result lost)."""
    target = tmp_path / "volume"
    target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    _save_a_result(link)
    assert link.is_symlink() and sorted(os.listdir(target)) == ["manifest.json", "table.csv"]
    assert sorted(os.listdir(tmp_path)) == ["out", "volume"]  # no temporary folder left


def test_an_out_that_is_a_dangling_symlink_makes_the_folder_it_names(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "later" / "volume")
    _save_a_result(link)
    assert link.is_symlink() and sorted(os.listdir(link)) == ["manifest.json", "table.csv"]
    assert (tmp_path / "later" / "volume" / "table.csv").read_text() == "a\n1\n"


def test_an_out_that_is_a_mount_point_keeps_the_folder_and_gets_each_file_whole(tmp_path, monkeypatch):
    """A container volume cannot be removed or renamed onto: the folder itself stays (same inode),
    the temporary folder is made inside it, and its files are moved in one by one."""
    from headlens.probes import outputs

    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "stale.txt").write_text("old")
    inode = volume.stat().st_ino
    real_ismount = os.path.ismount
    monkeypatch.setattr(outputs.os.path, "ismount", lambda p: os.fspath(p) == os.fspath(volume) or real_ismount(p))
    made = []
    with outputs.atomic_dir(volume) as tmp:
        made.append(tmp)
        (tmp / "table.csv").write_text("a\n1\n")
    assert made[0].parent == volume  # aside, on the volume's own file system
    assert volume.stat().st_ino == inode and sorted(os.listdir(volume)) == ["table.csv"]


def test_a_finished_result_that_cannot_be_moved_into_place_is_kept_and_named(tmp_path, monkeypatch):
    from headlens.probes import outputs
    from headlens.probes.errors import OutputError

    def refuse(tmp, real, *, inside):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(outputs, "_move_into", refuse)
    with pytest.raises(OutputError, match="it is complete in") as info:
        _save_a_result(tmp_path / "out")
    kept = str(info.value).rsplit("it is complete in ", 1)[1]
    assert sorted(os.listdir(kept)) == ["manifest.json", "table.csv"]
