"""The demo's held-out documents (analyses/measure/python_docs.py): the held-out split reads only the
files of held-out modules, and gives exactly the documents that splitting the whole corpus gives."""

from __future__ import annotations

import json
import platform

import pytest

from headlens.analyses.demo import MODEL_DIR
from headlens.analyses.measure.python_docs import (
    PYDOC_TOPICS,
    STDLIB_DOCSTRINGS,
    Document,
    heldout_documents,
    heldout_text,
    is_heldout,
    stdlib_docstring_documents,
)

DOC = '"""' + "A docstring long enough to count as a document of the demo corpus, eighty characters." + '"""\n'


def test_keep_decides_before_a_file_is_read(tmp_path):
    for rel in ("a.py", "pkg/__init__.py", "pkg/b.py", "pkg/c.py", "tests/t.py", "broken.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DOC + "def f():\n    " + DOC)
    (tmp_path / "broken.py").write_text("def (:\n")
    full = stdlib_docstring_documents(tmp_path)
    assert [d.name for d in full] == ["a", "pkg", "pkg.b", "pkg.c"]  # tests/ skipped, broken.py unparsable
    asked: list[Document] = []

    def keep(doc: Document) -> bool:
        asked.append(doc)
        return doc.name.startswith("pkg")

    assert stdlib_docstring_documents(tmp_path, keep=keep) == [d for d in full if d.name.startswith("pkg")]
    assert {d.text for d in asked} == {""} and "broken" in {d.name for d in asked}  # asked by name, before parsing


def test_the_heldout_split_is_the_one_the_demo_model_was_trained_beside():
    """Counts and characters per source as the shipped model's training summary records them (the
    corpus is read from the Python that runs it: on the training's Python version only).  The text
    itself is checked token for token against the training corpus's held-out stream in
    tests/analyses/demo/test_model.py::test_heldout_text_feeds_the_report."""
    summary = json.loads((MODEL_DIR / "training_summary.json").read_text())
    python = summary["versions"]["python"]
    if python != platform.python_version():
        pytest.skip(f"the demo model's corpus was read from Python {python}")
    held = heldout_documents()
    data = summary["data"]
    for source in (STDLIB_DOCSTRINGS, PYDOC_TOPICS):
        docs = [d for d in held if d.source == source]
        assert len(docs) == data["documents"][f"heldout:{source}"]
        assert sum(len(d.text) for d in docs) == data["characters"][f"heldout:{source}"]
    assert all(is_heldout(d) for d in held)
    assert heldout_text() == "<|endoftext|>".join(d.text for d in held)
