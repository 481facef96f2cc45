"""Ctrl-C on ``headlens sweep``: exit 130 every time, no Ray process left behind, resume intact.

Each run is a real ``headlens sweep`` process in a session of its own, interrupted the way a
terminal's Ctrl-C does it (SIGINT to the whole process group, Ray's helpers included), at
moments spread over the run: before Ray starts, while ``ray.init`` brings up GCS, raylet
and their agents (where the unwinding used to skip ``ray.shutdown`` and leave the agents
running for about 90 s, or crash the interpreter on exit), and while tasks run.  Processes
are read from ``/proc`` (Linux): every process of the run's process group and every
descendant seen while it ran must be gone when it has exited.

The default run interrupts three times (one moment of each kind: before Ray, while raylet and its
agents start, while tasks run); the ten-moment stress run is marked ``stress`` (``pytest -m stress``;
``.ci/run`` runs it in a process of its own beside the suite).
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

from tests.paths import REPO_ROOT

pytest.importorskip("ray")
pytest.importorskip("pyarrow")


pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads processes from /proc"),
]

#: Seconds a run may take to exit after Ctrl-C (shutting Ray down in order), and to start at all.
EXIT_S, START_S = 60, 120
#: Ten interrupts in a row, each at (what must exist first, seconds after it): ``settings`` only
#: in the first run (later runs find the first one's OUT/sweep.json at once).  The stress run.
MOMENTS = [
    ("settings", 0.0),
    ("raylet", 0.0),
    ("raylet", 0.6),
    ("agent", 0.0),
    ("worker", 0.0),
    ("raylet", 1.2),
    ("agent", 0.3),
    ("worker", 1.5),
    ("raylet", 0.3),
    ("agent", 1.0),
]
#: The default run's three interrupts: before Ray starts, while ``ray.init`` brings up raylet's agents
#: (where the unwinding used to skip ``ray.shutdown``), while a task runs.
FEW_MOMENTS = [("settings", 0.0), ("agent", 0.3), ("worker", 0.0)]
#: Seconds between looks at /proc (each look reads every process: kept cheap on a 2-core machine).
POLL_S = 0.1
SWEEP = [
    "--detectors",
    "previous_token,induction",
    "--n-prompts",
    "6",
    "--seq-len",
    "20",
    "--window",
    "32",
    "--loss-windows",
    "2",
    "--loss-window",
    "32",
    "--num-cpus",
    "2",
    "--no-figures",
    "-q",
]


def _stats() -> dict[tuple[int, int], tuple[int, int, str]]:
    """``{(pid, start time): (ppid, process group, state)}`` of every process, from ``/proc/PID/stat``
    alone (the start time tells a reused pid apart)."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (name) ": state, ppid, pgrp, ...
        table[(int(entry.name), int(fields[19]))] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def _cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def _processes() -> dict[tuple[int, int], tuple[int, int, str, str]]:
    """``{(pid, start time): (ppid, process group, state, command line)}`` of every process."""
    table = {}
    for key, (ppid, pgrp, state) in _stats().items():
        cmd = _cmdline(key[0])
        if cmd is not None:
            table[key] = (ppid, pgrp, state, cmd)
    return table


def _descendants(root: int, stats: dict) -> list[tuple[int, int]]:
    """The ``(pid, start time)`` of every descendant of ``root`` in a table of :func:`_stats`."""
    children: dict[int, list[tuple[int, int]]] = {}
    for key, (ppid, *_) in stats.items():
        children.setdefault(ppid, []).append(key)
    found, frontier = {}, [root]
    while frontier:
        for key in children.get(frontier.pop(), ()):
            if key not in found:
                found[key] = None
                frontier.append(key[0])
    return list(found)


def _watch(seen: dict[tuple[int, int], set[str]], root: int) -> None:
    """Add the run's descendants now, each with every command line (Ray renames its workers) it has
    shown.  Each look reads every process's ``stat`` and only the descendants' command lines (a
    look every :data:`POLL_S` seconds stays cheap on a 2-core machine)."""
    for key in _descendants(root, _stats()):
        cmd = _cmdline(key[0])
        if cmd is not None:
            seen.setdefault(key, set()).add(cmd)


def _left_behind(run_pid: int, seen: dict) -> list[str]:
    """Live (not zombie) processes of the run's group, or seen as its descendants, after it exited."""
    return [
        f"{key[0]} {cmd[:80]}" for key, (_, pgrp, state, cmd) in _processes().items() if state != "Z" and (pgrp == run_pid or key in seen)
    ]


def _phase(seen: dict, out: Path) -> set[str]:
    """What the run has reached: ``settings`` (OUT/sweep.json written, Ray not started yet), then Ray's processes."""
    cmds = [c for cs in seen.values() for c in cs]
    keys = (("raylet", "raylet"), ("agent", "ray::DashboardAgent"), ("agent", "ray::RuntimeEnvAgent"), ("worker", "ray::Worker.run"))
    return ({"settings"} if (out / "sweep.json").is_file() else set()) | {name for name, key in keys if any(key in c for c in cmds)}


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory):
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint

    root = tmp_path_factory.mktemp("ctrlc") / "run"
    for i, step in enumerate((0, 100)):
        build_tiny_checkpoint(root / f"step-{step}", TinySpec(n_layer=2, n_head=4, d_model=64, n_ctx=128, seed=i))
    return root


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupted_run(args: list[str], out: Path, moment: tuple[str, float]) -> tuple[int, str, list[str], set[str]]:
    """Start the sweep, press Ctrl-C at ``moment``; ``(exit code, stderr, left behind, phases reached)``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "headlens.reports.cli.main", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a terminal's program starts with Ctrl-C at its default; a pytest-xdist worker ignores
        # SIGINT, and an ignored signal is inherited across exec (Python would then never see it)
        preexec_fn=_default_sigint,
    )
    seen: dict[tuple[int, int], set[str]] = {}
    wanted, delay = moment
    try:
        deadline, reached_at = time.monotonic() + START_S, None
        while proc.poll() is None and time.monotonic() < deadline:
            _watch(seen, proc.pid)
            if reached_at is None and wanted in _phase(seen, out):
                reached_at = time.monotonic()
            if reached_at is not None and time.monotonic() - reached_at >= delay:
                break
            time.sleep(POLL_S)
        assert proc.poll() is None, f"the sweep ended before the interrupt ({wanted} + {delay} s): {proc.communicate()}"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        t0 = time.monotonic()
        while proc.poll() is None and time.monotonic() - t0 < EXIT_S:
            _watch(seen, proc.pid)
            time.sleep(POLL_S)
        _, err = proc.communicate(timeout=EXIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, _left_behind(proc.pid, seen), _phase(seen, out)


def _interrupt_then_resume(moments: list[tuple[str, float]], two_checkpoints: Path, tmp_path: Path, runner) -> None:
    """Ctrl-C at each of ``moments`` in turn (exit 130, one line, nothing left running), then the same
    command completes the dataset, equal to single-checkpoint ``detect`` runs."""
    from headlens.reports.cli.main import cli
    from headlens.reports.runs.sweep.gather import read_dataset

    out = tmp_path / "out"
    args = ["sweep", "-m", str(two_checkpoints), *SWEEP, "--out", str(out)]
    reached = set()
    for i, moment in enumerate(moments):
        code, err, left, phases = _interrupted_run(args, out, moment)
        reached |= phases
        assert code == 130, f"run {i} (Ctrl-C at {moment}): exit {code}\n{err[-2000:]}"
        assert err.strip().splitlines()[-1] == "headlens: error: interrupted" and "Traceback" not in err, f"run {i}: {err[-2000:]}"
        assert not left, f"run {i} (Ctrl-C at {moment}) left {left}"
    assert {"raylet", "agent", "worker"} <= reached, (
        f"the interrupts never came while {sorted({'raylet', 'agent', 'worker'} - reached)} ran"
    )

    # what the interrupted runs finished is kept; the same command completes the dataset
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output + res.stderr
    data = read_dataset(out)
    assert sorted(data["step"].unique().tolist()) == [0, 100] and len(data) == 2 * 8 * 2
    for step in (0, 100):
        table = tmp_path / f"detect-{step}.csv"
        res = runner.invoke(
            cli, ["detect", "-m", str(two_checkpoints / f"step-{step}"), *SWEEP[:8], "--device", "cpu", "--out", str(table), "-q"]
        )
        assert res.exit_code == 0, res.output
        single = pd.read_csv(table).sort_values(["detector", "layer", "head"]).reset_index(drop=True)
        mine = data[data["step"] == step].sort_values(["detector", "layer", "head"]).reset_index(drop=True)
        pd.testing.assert_series_equal(mine["score"], single["score"], check_exact=False, rtol=1e-5, atol=1e-6, check_names=False)


@pytest.mark.slow
def test_ctrl_c_at_three_moments_exits_130_leaves_no_process_and_the_sweep_resumes(two_checkpoints, tmp_path, runner):
    _interrupt_then_resume(FEW_MOMENTS, two_checkpoints, tmp_path, runner)


@pytest.mark.slow
@pytest.mark.stress
def test_ctrl_c_ten_times_exits_130_every_time_leaves_no_process_and_the_sweep_resumes(two_checkpoints, tmp_path, runner):
    _interrupt_then_resume(MOMENTS, two_checkpoints, tmp_path, runner)


def test_the_default_moments_are_among_the_stress_runs_and_ci_leaves_out_only_that_test():
    """.ci/run deselects the three-moment test from its suite process while the stress process runs
    the ten: that checks nothing less only while the three moments are among the ten (the first,
    ``settings``, first in both) and .ci/run names this module's test."""
    assert set(FEW_MOMENTS) <= set(MOMENTS), sorted(set(FEW_MOMENTS) - set(MOMENTS))
    assert FEW_MOMENTS[0] == MOMENTS[0] == ("settings", 0.0)
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    name = test_ctrl_c_at_three_moments_exits_130_leaves_no_process_and_the_sweep_resumes.__name__
    assert f"THREE_MOMENTS=tests/reports/runs/test_sweep_interrupt.py::{name}\n" in ci
    assert '--deselect "$THREE_MOMENTS"' in ci and ci.count("--deselect") == 1
