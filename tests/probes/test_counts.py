"""Every count a run takes is bounded before any work, in one line with exit 2 (issue 28 item 5):
``--n-pairs 1000000000`` was a 43-line numpy traceback (induction) or a run growing past 3.8 GB
(names); a task file of one pair exited 0 with an all-NaN table while ``--n-pairs 1`` was refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

import headlens
from headlens.analyses.patching.pairs import MIN_PAIRS, check_pairs
from headlens.probes.counts import MAX_COUNT, check_count, memory_budget
from headlens.probes.errors import InputError
from headlens.reports.cli.main import cli

HUGE = "1000000000"


def _one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output, result.output
    errors = [line for line in lines if line.startswith("headlens: error:")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["patch", "--builtin", "induction", "--n-pairs", HUGE], "--n-pairs 1000000000: at most 1,000,000"),
        (["patch", "--builtin", "names", "--n-pairs", HUGE], "--n-pairs 1000000000: at most 1,000,000"),
        (["patch", "--builtin", "referent", "--n-pairs", HUGE], "--n-pairs 1000000000: at most 1,000,000"),
        (["patch", "--builtin", "induction", "--n-pairs", "1"], "--n-pairs must be at least 2"),
        (["patch", "--n-resamples", HUGE], "--n-resamples 1000000000: at most"),
        (["classify", "--n-prompts", HUGE], "--n-prompts 1000000000: at most"),
        (["ablate", "--bootstrap", HUGE], "--n-bootstrap 1000000000: at most"),  # --n-bootstrap: --bootstrap's other name
        (["prune", "--random-seeds", HUGE], "--random-seeds 1000000000: at most"),
    ],
)
def test_a_count_past_what_a_run_can_hold_is_one_line_and_exit_2(tiny_checkpoint, tmp_path, runner, args, words):
    out = tmp_path / ("never.csv" if args[0] == "ablate" else "never")
    result = runner.invoke(cli, [*args, "--model", str(tiny_checkpoint), "--out", str(out), "-q"])
    assert result.exit_code == 2, result.output
    assert words in _one_error_line(result)
    assert not out.exists()


def test_a_task_file_of_one_pair_is_refused_by_the_rule_of_n_pairs_1(tiny_checkpoint, tmp_path, runner):
    task = tmp_path / "one.jsonl"
    row = {"clean": "When Mary and John went to the store, John gave a drink to", "correct": " Mary", "incorrect": " John"}
    task.write_text(json.dumps({**row, "corrupt": row["clean"].replace(", John", ", Tom")}) + "\n")
    out = tmp_path / "never"
    result = runner.invoke(cli, ["patch", "--model", str(tiny_checkpoint), "--task", str(task), "--out", str(out), "-q"])
    assert result.exit_code == 2, result.output
    line = _one_error_line(result)
    assert f"task file {task} holds 1 pair; at least {MIN_PAIRS} needed" in line
    assert not out.exists()
    # the same rule, in the same words after the subject, as n_pairs=1
    with pytest.raises(InputError) as err:
        check_pairs(1)
    assert str(err.value).startswith("n_pairs must be at least 2 (an effect's interval over pairs needs two)")
    assert line.endswith("(an effect's interval over pairs needs two)")


def test_the_library_refuses_before_the_model_loads():
    cases: list[dict[str, Any]] = [{"n_pairs": 10**9}, {"n_pairs": 1}, {"n_pairs": True}]
    for kwargs in cases:
        with pytest.raises(InputError, match="n_pairs"):
            headlens.patch("no-such-model-folder", builtin="induction", **kwargs)


def test_check_count_bounds_memory_and_names_the_parameter():
    assert check_count("n", 5) == 5
    with pytest.raises(InputError, match=r"^n_windows=1000: needs about .* GiB of memory.*; at most \d"):
        check_count("n_windows", 1000, bytes_each=memory_budget())
    with pytest.raises(InputError, match=f"at most {MAX_COUNT:,}"):
        check_count("n_prompts", MAX_COUNT + 1)
    with pytest.raises(InputError, match="must be a whole number"):
        check_count("n_prompts", 2.0)
