"""``headlens circuit`` and ``headlens composition``: the files they write, and bad input as one line,
exit 2 and nothing written."""

from __future__ import annotations

import json

import click
import pytest

from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models


@pytest.fixture()
def demo_loaded(demo_model):
    """``-m demo`` gets the session's demo model (a load is a second of CPU) in the tests that check
    what ``circuit`` and ``composition`` write or refuse, not how they load (the first test loads it
    for real)."""
    with session_models({"demo": demo_model}):
        yield


def _run(runner, args):
    return runner.invoke(cli, args, catch_exceptions=False)


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("headlens: error: ")
    return lines[0]


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_circuit_writes_its_files(runner, tmp_path):
    out = tmp_path / "c"
    args = ["circuit", "-m", "demo", "--device", "cpu", "--method", "eap", "--n-pairs", "8", "--n-bootstrap", "50", "--confirm", "4"]
    result = _run(runner, [*args, "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("circuit: ")
    assert "EAP ESTIMATE" in result.stdout and "wrote edges.csv" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "against_exact.csv",
        "circuit.png",
        "circuit.svg",
        "edges.csv",
        "faithfulness.csv",
        "manifest.json",
    ]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"][0] == "headlens" and manifest["circuit"]["summary"]["method"] == "eap"
    assert manifest["config"]["circuit"]["confirm"] == 4 and manifest["config"]["circuit"]["method"] == "eap"


def test_composition_writes_its_files(runner, tmp_path, demo_loaded):
    out = tmp_path / "k"
    result = _run(runner, ["composition", "-m", "demo", "--device", "cpu", "--modes", "k", "--n-baseline", "20", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("K-composition: ")
    assert {"composition.csv", "baseline.csv", "copying.csv", "composition_k.png", "manifest.json"} == {
        p.name for p in out.iterdir() if p.suffix != ".svg"
    }


@pytest.mark.parametrize(
    ("extra", "word"),
    [
        (["--steps", "0"], "--steps"),
        (["--method", "eap-ig", "--steps", "1"], "--steps"),
        (["--method", "acdc"], "--method"),
        (["--top-n", "1000000"], "--top-n 1000000"),
        (["--n-pairs", "1000000000"], "--n-pairs 1000000000"),
        (["--threshold", "0"], "--threshold"),
    ],
)
def test_circuit_bad_input_one_line(runner, tmp_path, extra, word, demo_loaded):
    out = tmp_path / "never"
    result = _run(runner, ["circuit", "-m", "demo", "--device", "cpu", *extra, "--out", str(out), "-q"])
    assert result.exit_code == 2
    assert word in _one_error_line(result)
    assert not out.exists() or not any(out.iterdir())


def test_circuit_task_file_of_unequal_pairs(runner, tmp_path, demo_loaded):
    task = tmp_path / "t.jsonl"
    good = {"clean": "When Mary and John went", "corrupt": "When Mary and Tom went", "correct": " Mary", "incorrect": " John"}
    bad = {**good, "corrupt": "When Mary and John and Tom went"}  # a longer corrupt side
    task.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    out = tmp_path / "never"
    result = _run(runner, ["circuit", "-m", "demo", "--device", "cpu", "--task", str(task), "--out", str(out), "-q"])
    assert result.exit_code == 2
    assert "same token length" in _one_error_line(result)
    assert not out.exists() or not any(out.iterdir())


def test_circuit_family_that_cannot_be_patched(runner, tmp_path, family_checkpoint):
    out = tmp_path / "never"
    result = _run(runner, ["circuit", "-m", str(family_checkpoint("bert")), "--device", "cpu", "--n-pairs", "4", "--out", str(out), "-q"])
    assert result.exit_code == 2
    assert "edge scores need" in _one_error_line(result)
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("family", ["gptj", "gemma2"])
def test_circuit_runs_on_split_and_normed_families(runner, tmp_path, family_checkpoint, family):
    """GPT-J (q/k/v split by headlens' own hooks, parallel block) and Gemma 2 (post-attention norm, its note in the manifest)."""
    out = tmp_path / family
    args = ["circuit", "-m", str(family_checkpoint(family)), "--device", "cpu", "--method", "eap", "--n-pairs", "4"]
    result = _run(runner, [*args, "--n-bootstrap", "20", "--confirm", "2", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["circuit"]["summary"]["graph"]["head_sum_norm"] is (family == "gemma2")
    assert any("post-attention norm" in n for n in manifest["circuit"]["notes"]) is (family == "gemma2")


def test_circuit_keeps_an_existing_folder(runner, tmp_path, demo_loaded):
    out = tmp_path / "full"
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    result = _run(runner, ["circuit", "-m", "demo", "--device", "cpu", "--out", str(out), "-q"])
    assert result.exit_code == 4
    _one_error_line(result)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


@pytest.mark.parametrize(("extra", "word"), [(["--modes", "k,x"], "--modes"), (["--n-baseline", "1"], "--n-baseline")])
def test_composition_bad_input_one_line(runner, tmp_path, extra, word, demo_loaded):
    out = tmp_path / "never"
    result = _run(runner, ["composition", "-m", "demo", *extra, "--out", str(out), "-q"])
    assert result.exit_code == 2
    assert word in _one_error_line(result)
    assert not out.exists()


def test_circuit_reads_pairs_with_patch_options():
    """--task, --builtin, --n-pairs and --no-bos of both commands come from PairSource's fields: the
    same flags, defaults, types and help (--n-pairs' help states the circuit's own cap)."""
    from headlens.reports.cli.circuit import circuit_cmd
    from headlens.reports.cli.patch import patch_cmd

    ours = {p.name: p for p in circuit_cmd.params}
    theirs = {p.name: p for p in patch_cmd.params}
    for name in ("task", "builtin", "n_pairs", "prepend_bos"):
        a, b = ours[name], theirs[name]
        assert isinstance(a, click.Option) and isinstance(b, click.Option), name
        assert (a.opts, a.default, a.type.to_info_dict(), a.is_flag) == (b.opts, b.default, b.type.to_info_dict(), b.is_flag), name
        assert (a.help == b.help) is (name != "n_pairs"), name


def test_circuit_help_states_its_own_bounds(runner):
    """--n-pairs says the circuit's cap (not patch's 1,000,000); --steps' range and text agree."""
    from headlens.reports.api.circuit import MAX_PAIRS
    from headlens.reports.cli import circuit as cli_circuit

    assert cli_circuit.MAX_PAIRS == MAX_PAIRS

    result = _run(runner, ["circuit", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert f"at most {MAX_PAIRS:,}" in text and "1,000,000" not in text
    steps = text[text.index("--steps") : text.index("--top-n")]
    assert "at least 2" in steps and "x>=2" in steps and "x>=1" not in steps


def test_circuit_n_pairs_over_the_cap_in_the_count_rules_words(runner, tmp_path, demo_loaded):
    out = tmp_path / "never"
    result = _run(runner, ["circuit", "-m", "demo", "--device", "cpu", "--n-pairs", "5000", "--out", str(out), "-q"])
    assert result.exit_code == 2
    assert "--n-pairs 5000: at most 4,096" in _one_error_line(result)
    assert not out.exists() or not any(out.iterdir())
