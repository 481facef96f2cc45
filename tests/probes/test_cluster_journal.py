"""The Ray runs' journal (:mod:`headlens.probes.cluster.journal`): a file it refuses is left as it was."""

from __future__ import annotations

import json

import pytest

from headlens.probes.cluster.journal import Journal
from headlens.probes.errors import InputError

SETTINGS = {"method": "exact", "pairs": 4}


def test_a_file_that_is_no_journal_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text("garbage{\n")
    with pytest.raises(InputError, match="is not a journal"):
        Journal(path, SETTINGS)
    assert path.read_text() == "garbage{\n"


def test_a_journal_of_other_settings_is_refused_and_left_as_it_was(tmp_path):
    path = tmp_path / "j.jsonl"
    text = json.dumps({"settings": {**SETTINGS, "pairs": 8}}) + "\n" + '{"key": "a", "res'
    path.write_text(text)
    with pytest.raises(InputError, match="other settings"):
        Journal(path, SETTINGS)
    assert path.read_text() == text


def test_a_journal_s_cut_last_line_is_dropped(tmp_path):
    path = tmp_path / "j.jsonl"
    head = json.dumps({"settings": SETTINGS}) + "\n" + json.dumps({"key": "a", "result": 1}) + "\n"
    path.write_text(head + '{"key": "b", "res')
    assert Journal(path, SETTINGS).done == {"a": 1}
    assert path.read_text() == head
