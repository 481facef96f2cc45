"""Pairs in memory and task errors before loading (issue 46 items 9 and 15).

``headlens.patch(m, task=[{...}])`` and ``headlens.circuit(..., task=...)`` raised a raw pathlib
TypeError: they took only a file's path.  A setting has one name in the command and the library:
``patch --path`` had no ``path=``.  Every task-file error came after the model loaded (8-21 s), and
a 20 MB task line was tokenised whole (66 s, 3.3 GB) before the context check."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

import headlens
from headlens.probes.errors import InputError
from headlens.reports.cli.main import cli

#: A model name that does not exist: a check after loading would fail on it instead.
NO_MODEL = "no-such-model-here"
NAMES = (" Mary", " John", " Tom", " Anna", " Paul", " Kate")
PAIRS = [
    {"clean": f"When{a} and{b} went to the store,{b} gave a drink to", "corrupt": f"When{a} and{b} went to the store,{c} gave a drink to",
     "correct": a, "incorrect": b}
    for a, b, c in zip(NAMES, NAMES[1:] + NAMES[:1], NAMES[2:] + NAMES[:2], strict=True)
]  # fmt: skip


def _file(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_patch_takes_the_pairs_as_a_list_or_a_dataframe_as_from_a_file(tiny_model, tmp_path):
    small = {"n_resamples": 20, "directions": ("denoising",)}
    from_file = headlens.patch(tiny_model, task=_file(tmp_path / "t.jsonl", PAIRS), **small)
    from_list = headlens.patch(tiny_model, task=PAIRS, **small)
    from_frame = headlens.patch(tiny_model, task=pd.DataFrame(PAIRS), **small)
    for got in (from_list, from_frame):
        pd.testing.assert_frame_equal(got.table, from_file.table)
        assert got.manifest["task_file"] is None
    assert from_file.manifest["task_file"] == str(tmp_path / "t.jsonl")


def test_circuit_takes_the_pairs_in_memory_as_from_a_file(tiny_model, tmp_path, monkeypatch):
    """The pairs circuit scores (run_circuit stubbed: what it is handed) are the file's, token for token."""
    from headlens.reports.api import circuit as circuit_api

    class Handed(Exception):
        pass

    seen = []

    def stub(model, pairs, config, **kwargs):
        seen.append(pairs)
        raise Handed

    monkeypatch.setattr(circuit_api, "run_circuit", stub)
    for task in (_file(tmp_path / "t.jsonl", PAIRS), PAIRS, pd.DataFrame(PAIRS)):
        with pytest.raises(Handed):
            headlens.circuit(tiny_model, task=task)
    assert len({p.fingerprint() for p in seen}) == 1 and len(seen[0]) == len(PAIRS)
    assert seen[1].source["kind"] == "pairs" and seen[0].source == {"kind": "file", "task": str(tmp_path / "t.jsonl")}


@pytest.mark.parametrize(
    ("task", "words"),
    [
        ([PAIRS[0], {**PAIRS[1], "correct": ""}], 'task[1]: needs a non-empty string field "correct"'),
        ([PAIRS[0], "a text"], "task[1]: each pair must be an object"),
        ([PAIRS[0]], "task= holds 1 pair; at least 2 needed"),
        (PAIRS[0], "task= takes a JSONL file's path or the pairs"),
        (42, "got int"),
    ],
)
@pytest.mark.parametrize("study", [headlens.patch, headlens.circuit], ids=["patch", "circuit"])
def test_bad_pairs_in_memory_are_one_line_before_loading(study, task, words):
    with pytest.raises(InputError) as info:
        study(NO_MODEL, task=task)  # a check after loading would fail on the model instead
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_task_file_error_comes_before_the_model_loads(tmp_path, runner):
    bad = _file(tmp_path / "bad.jsonl", [PAIRS[0], {**PAIRS[1], "incorrect": PAIRS[1]["correct"]}])
    with pytest.raises(InputError, match=r"bad.jsonl:2: correct and incorrect are the same text"):
        headlens.patch(NO_MODEL, task=bad)
    for command in ("patch", "circuit"):
        out = tmp_path / f"never-{command}"
        result = runner.invoke(cli, [command, "--model", NO_MODEL, "--task", bad, "--out", str(out), "-q"])
        assert result.exit_code == 2, result.output  # was 3: the model's load failed first
        assert "bad.jsonl:2: correct and incorrect are the same text" in result.output and not out.exists()


def test_a_huge_task_line_is_refused_before_it_is_tokenised(tiny_model, tmp_path):
    huge = {**PAIRS[1], "clean": "word " * 4_000_000, "corrupt": "word " * 4_000_000}  # 20 MB
    task = _file(tmp_path / "huge.jsonl", [PAIRS[0], huge])
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"huge.jsonl:2: clean is 20,000,000 characters, more than the model's context of 128 tokens"):
        headlens.patch(tiny_model, task=task)
    assert time.perf_counter() - start < 10  # was 66 s and 3.3 GB at tokenising it


def test_path_is_one_setting_in_the_library_and_the_command(tiny_model):
    with pytest.raises(InputError, match=r"^path=True needs receivers="):
        headlens.patch(NO_MODEL, path=True)
    with_path = headlens.patch(tiny_model, task=PAIRS, path=True, receivers=((1, 0),), n_resamples=0, directions=("denoising",))
    assert "path_patching" in with_path.tables
    from headlens.reports.cli.patch import patch_cmd

    flags = {opt for p in patch_cmd.params for opt in p.opts}
    assert "--path" in flags  # generated from PatchExtras.path, the field path= is
