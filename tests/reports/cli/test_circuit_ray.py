"""``headlens circuit --method exact --workers 2``: Ctrl-C (or SIGTERM) while the workers score exits 130 with no process
left, and the same command with its journal finishes, equal to the run in one process.

The run is a real ``headlens circuit`` process in a session of its own, interrupted as a terminal's Ctrl-C does it
(SIGINT to the whole process group, Ray's helpers included) once a worker runs a chunk (Ray names it
``ray::Worker.run``); its descendants are read from ``/proc`` (the helpers of
tests/reports/runs/test_sweep_interrupt.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.reports.runs.test_sweep_interrupt import _default_sigint, _left_behind, _watch

pytest.importorskip("ray")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads processes from /proc"),
]

#: Seconds for a worker to start a chunk, and for the run to exit after Ctrl-C.
START_S, EXIT_S = 240, 60
ARGS = ["--device", "cpu", "--n-pairs", "16", "--method", "exact", "--n-bootstrap", "50", "-q"]


def _interrupted(args: list[str], sig: int = signal.SIGINT, group: bool = True) -> tuple[int, str, list[str]]:
    """Run ``headlens circuit ARGS``, send ``sig`` (to its process group: Ctrl-C; else to it alone: ``kill PID``) once a
    worker runs a chunk; ``(exit code, stderr, left behind)``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "headlens.reports.cli.main", "circuit", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_sigint)  # fmt: skip
    seen: dict[tuple[int, int], set[str]] = {}
    try:
        deadline = time.monotonic() + START_S
        while proc.poll() is None and time.monotonic() < deadline:
            _watch(seen, proc.pid)
            if any("ray::Worker.run" in c for cs in seen.values() for c in cs):
                break
            time.sleep(0.1)
        assert proc.poll() is None, f"the run ended before a worker ran a chunk: {proc.communicate()}"
        if group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < EXIT_S:
            _watch(seen, proc.pid)
            time.sleep(0.1)
        _, err = proc.communicate(timeout=EXIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, _left_behind(proc.pid, seen)


def test_ctrl_c_exits_130_leaves_no_process_and_the_journal_finishes_the_run(tiny_checkpoint, tmp_path: Path, runner):
    from headlens.reports.cli.main import cli

    journal = tmp_path / "chunks.jsonl"
    ray_args = ["-m", str(tiny_checkpoint), *ARGS, "--workers", "2", "--journal", str(journal), "--out", str(tmp_path / "ray")]
    code, err, left = _interrupted(ray_args)
    assert code == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "headlens: error: interrupted" and "Traceback" not in err, err[-2000:]
    assert not left, f"left running: {left}"

    res = runner.invoke(cli, ["circuit", *ray_args, "--overwrite"])
    assert res.exit_code == 0, res.output + res.stderr
    res = runner.invoke(cli, ["circuit", "-m", str(tiny_checkpoint), *ARGS, "--out", str(tmp_path / "here")])
    assert res.exit_code == 0, res.output + res.stderr
    ray, here = pd.read_csv(tmp_path / "ray" / "edges.csv"), pd.read_csv(tmp_path / "here" / "edges.csv")
    pd.testing.assert_series_equal(ray["score_raw"], here["score_raw"], check_exact=False, rtol=0, atol=1e-6)
    assert (ray["in_circuit"] == here["in_circuit"]).all()


def test_sigterm_to_the_run_alone_exits_130_and_leaves_no_process(tiny_checkpoint, tmp_path: Path):
    """``kill PID`` (a batch system's time limit): only the driver gets the signal; it stops its workers and Ray itself."""
    code, err, left = _interrupted(["-m", str(tiny_checkpoint), *ARGS, "--workers", "2", "--out", str(tmp_path / "ray")], signal.SIGTERM,
                                   group=False)  # fmt: skip
    assert code == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "headlens: error: interrupted" and "Traceback" not in err, err[-2000:]
    assert not left, f"left running: {left}"
