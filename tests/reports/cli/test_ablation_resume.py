"""Resumable sweeps: the journal format, an exception mid-sweep, and ``kill -9`` of a real run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

import headlens.analyses.ablation.study as ablation_mod
from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.measure.records import MemoryJournal, RecordJournal
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import InputError, OutputExistsError
from headlens.reports.api.journal import Journal, journal_path
from headlens.reports.cli.main import cli
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.fixture(scope="module")
def windows(tiny_model):
    return text_eval_set(tiny_model.tokenizer, eval_text(), n_windows=3, window=24, prepend_bos=True, n_ctx=tiny_model.n_ctx)


def test_journal_round_trip_torn_line_and_mismatch(tmp_path):
    path = tmp_path / "run.journal.jsonl"
    key = {"model": "m", "config": {"seed": 1, "heads": [[0, 1]]}}
    with Journal(path, "ablate", key, resume=False, overwrite=False) as j:
        j.append([{"kind": "head", "layer": 0, "head": 1, "values": [0.1, 1 / 3]}])
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"journal": "headlens", "kind": "ablate", "key": key}
    # a torn last line (the process died mid-write) is dropped and overwritten on resume
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "head", "layer": 0, "he')
    j = Journal(path, "ablate", key, resume=True, overwrite=False)
    assert j.resumed and j.records == [{"kind": "head", "layer": 0, "head": 1, "values": [0.1, 1 / 3]}]
    with j:
        j.append([{"kind": "head", "layer": 1, "head": 0, "values": [2.0]}])
    assert [json.loads(x)["kind"] for x in path.read_text().splitlines()] == ["ablate", "head", "head"]
    assert path.read_text().endswith("\n")
    with pytest.raises(OutputExistsError, match="--resume"):
        Journal(path, "ablate", key, resume=False, overwrite=False)
    with pytest.raises(InputError, match=r"differs in config\.seed"):
        Journal(path, "ablate", {**key, "config": {"seed": 2, "heads": [[0, 1]]}}, resume=True, overwrite=False)
    fresh = Journal(path, "ablate", key, resume=False, overwrite=True)
    assert fresh.records == [] and not fresh.resumed
    fresh.open()
    fresh.finish()
    assert not path.exists()
    assert journal_path(tmp_path / "t.csv").name == "t.csv.journal.jsonl"


def test_resume_after_an_exception_gives_the_identical_table(tiny_model, windows, tmp_path, monkeypatch):
    cfg = AblationConfig(method="resample", heads=((0, 0), (0, 3), (1, 0), (1, 1), (1, 2)), heads_per_forward=1, seed=4, n_bootstrap=300)
    reference = run_ablation(tiny_model, windows, cfg).table
    key = {"test": 1}
    path = tmp_path / "j.jsonl"
    real = ablation_mod.single_head_values
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("simulated crash mid-sweep")
        return real(*args, **kwargs)

    monkeypatch.setattr(ablation_mod, "single_head_values", flaky)
    with pytest.raises(RuntimeError, match="simulated"), Journal(path, "ablate", key, resume=False, overwrite=False) as j:
        run_ablation(tiny_model, windows, cfg, journal=j)
    heads_done = [json.loads(x) for x in path.read_text().splitlines() if '"kind":"head"' in x]
    assert len(heads_done) == 3
    monkeypatch.setattr(ablation_mod, "single_head_values", real)
    with Journal(path, "ablate", key, resume=True, overwrite=False) as j:
        resumed = run_ablation(tiny_model, windows, cfg, journal=j)
    assert resumed.info["jobs_resumed"] == 3 and resumed.info["jobs"] == 5
    pd.testing.assert_frame_equal(resumed.table, reference, check_exact=True)


def test_the_sweep_takes_any_record_journal(tiny_model, windows, tmp_path):
    """The analyses see only a RecordJournal (records + append) and write no file: an in-memory
    journal resumes exactly like the file journal of reports/api/journal.py."""
    cfg = AblationConfig(heads=((0, 0), (1, 1)), heads_per_forward=1, n_bootstrap=0)
    mem = MemoryJournal()
    first = run_ablation(tiny_model, windows, cfg, journal=mem)
    assert [r["kind"] for r in mem.records] == ["baseline", "attribution", "head", "head"]
    assert list(tmp_path.iterdir()) == []
    resumed = run_ablation(tiny_model, windows, cfg, journal=MemoryJournal(mem.records))
    assert resumed.info["jobs_resumed"] == 2
    pd.testing.assert_frame_equal(resumed.table, first.table, check_exact=True)
    assert isinstance(Journal(tmp_path / "j.jsonl", "ablate", {}, resume=False, overwrite=False), RecordJournal)


_DRIVER = textwrap.dedent(
    """
    import os, sys, time
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from headlens.reports.api import journal as resume

    _append = resume.Journal.append

    def slow_append(self, records):  # make the sweep slow enough to be killed in the middle
        _append(self, records)
        time.sleep(0.4)

    resume.Journal.append = slow_append
    from headlens.reports.cli.main import cli

    cli.main(args=sys.argv[1:], prog_name="headlens")
    """
)


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_gives_the_identical_table(tiny_checkpoint, tmp_path, runner):
    args = [
        "ablate",
        "-m",
        str(tiny_checkpoint),
        "--n-windows",
        "3",
        "--window",
        "24",
        "--heads-per-forward",
        "1",
        "--method",
        "mean",
        "-q",
    ]
    ref = tmp_path / "ref.csv"
    res = runner.invoke(cli, [*args, "--out", str(ref)])
    assert res.exit_code == 0, res.output

    out = tmp_path / "killed.csv"
    journal = journal_path(out)
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(driver), *args, "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.exists() and journal.read_text().count('"kind":"head"') >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists() and journal.exists()
    done = journal.read_text().count('"kind":"head"')
    assert 3 <= done < 8

    res = runner.invoke(cli, [*args, "--out", str(out)])
    assert res.exit_code == 4 and "--resume" in res.output  # refuses to clobber the unfinished run
    res = runner.invoke(cli, [*args, "--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    assert not journal.exists()
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(ref), check_exact=True)
    manifest = json.loads(out.with_name("killed.manifest.json").read_text())
    assert manifest["ablation"]["resumed"] is True and manifest["ablation"]["run"]["jobs_resumed"] == done
