"""The demo's held-out text is read once per process (analyses/measure/python_docs.py,
analyses/measure/texts.py): later calls give the same text without reading the standard library
again, and no caller can change what the next one gets; the reader's pruned walk lists the files
``rglob`` lists."""

from __future__ import annotations

import dataclasses

import pytest

from headlens.analyses.measure import python_docs, texts
from headlens.analyses.measure.python_docs import _SKIP_DIRS, _python_files, heldout_documents, heldout_text


def test_the_heldout_text_is_read_once_and_comes_back_the_same(monkeypatch):
    first = texts.demo_text("heldout")
    docs = heldout_documents()

    def no_reading(*args, **kwargs):
        raise AssertionError("the standard library was read again")

    monkeypatch.setattr(python_docs, "_python_files", no_reading)
    monkeypatch.setattr(python_docs, "stdlib_docstring_documents", no_reading)
    assert texts.demo_text("heldout") == first == heldout_text() == "<|endoftext|>".join(d.text for d in docs)
    assert heldout_documents() == docs


def test_a_caller_cannot_change_the_cached_documents():
    docs = heldout_documents()
    again = heldout_documents()
    assert docs == again and docs is not again  # a new list each call
    docs.clear()
    assert heldout_documents() == again
    with pytest.raises(dataclasses.FrozenInstanceError):
        again[0].text = "changed"  # type: ignore[misc]


def test_the_pruned_walk_lists_what_rglob_lists(tmp_path):
    for rel in ("a.py", ".py", ".hidden/h.py", "pkg/b/q.py", "pkg/tests.py", "pkg/README", "test/x/z.py", "deep/site-packages/s.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (tmp_path / "folder.py").mkdir()  # a folder whose name matches, listed (and then not parsable)
    (tmp_path / "folder.py" / "inner.py").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "pkg", target_is_directory=True)  # not entered
    (tmp_path / "linked.py").symlink_to(tmp_path / "a.py")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "nothing")
    rglob = sorted(p for p in tmp_path.rglob("*.py") if not _SKIP_DIRS.intersection(p.relative_to(tmp_path).parts))
    assert _python_files(tmp_path) == rglob
    names = {p.relative_to(tmp_path).as_posix() for p in rglob}
    assert {"a.py", ".py", "folder.py", "folder.py/inner.py", "linked.py", "dangling.py", "pkg/tests.py"} <= names
    assert not {"test/x/z.py", "deep/site-packages/s.py", "link/tests.py"} & names
