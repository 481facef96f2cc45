"""``headlens sweep --address`` on a real two-node Ray cluster that loses its worker node mid-sweep.

Ray's own multi-node harness (:class:`ray.cluster_utils.Cluster`) starts a head node (GCS and a
raylet, 1 CPU) and a separate worker node (its own raylet, 1 CPU) on this machine; the sweep
is a ``headlens sweep --address HEAD`` process, as a user would run it against a cluster.  As
soon as a task runs on the worker node, the node is removed (its raylet and workers killed,
what a lost machine does): the task is retried on the head (``--max-retries 1``), the sweep
exits 0, and the dataset equals an undisturbed run of the same tasks.  One CPU a node: one task
on each at a time, side by side, and one worker process a node (each imports the library and its
torch, ~5 s of CPU: a worker node of 2 CPUs started two, and the head then a third and fourth for
the retried tasks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")
pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the worker node's tasks in /proc"),
]

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
    "--no-figures",
    "-q",
]
STEPS = (0, 100, 200)
#: Seconds for the sweep to put a task on the worker node, and to finish after losing it.
RUNNING_S, FINISH_S = 180, 300
#: Object store of each node: small, the tasks pass only their records through it.
STORE_BYTES = 80 * 1024**2
#: Seconds between looks at /proc for a task on the worker node (each look reads every process's ``stat``).
POLL_S = 0.1


def _children(pid: int) -> dict[int, str]:
    """``{pid: command line}`` of every descendant of ``pid`` (from /proc: every process's ``stat``,
    and only the descendants' command lines, so that a look every :data:`POLL_S` seconds stays cheap)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read().decode(errors="replace")
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        found[child] = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    found[child] = ""
                frontier.append(child)
    return found


def _runs_a_task(raylet: int) -> bool:
    """A pool worker under ``raylet`` runs a task (Ray names the process ``ray::Worker.run`` while it does)."""
    return any("ray::Worker.run" in c for c in _children(raylet).values())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint

    root = tmp_path_factory.mktemp("cluster") / "run"
    for i, step in enumerate(STEPS):
        build_tiny_checkpoint(root / f"step-{step}", TinySpec(n_layer=2, n_head=4, d_model=64, n_ctx=128, seed=i))
    return root


@pytest.fixture
def cluster(monkeypatch):
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        pytest.skip("a Ray instance is initialised in this process")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": STORE_BYTES, "include_dashboard": False})
    try:
        yield c
    finally:
        c.shutdown()


def _undisturbed(run_dir: Path, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same tasks and settings run one by one in this process, without Ray: what the sweep must equal."""
    from headlens.reports.cli.census_options import census_config as _census_config
    from headlens.reports.runs.sweep.gather import gather
    from headlens.reports.runs.sweep.plan import SweepConfig, plan_tasks
    from headlens.reports.runs.sweep.task import run_task

    settings = json.loads((out.parent / "swept" / "sweep.json").read_text())
    config = SweepConfig(census=_census_config("previous_token,induction", 6, 0, 20, 32, False, 16, None), loss_windows=2, loss_window=32)
    assert config.to_dict() == settings, "the undisturbed run's settings must be the sweep's"
    tasks = plan_tasks([str(run_dir)])
    for task in tasks:
        assert run_task(task, config, str(out), ["test"])["status"] == "done"
    return gather(out, tasks)


@pytest.mark.slow
def test_a_sweep_on_a_cluster_that_loses_its_worker_node_finishes_with_the_same_dataset(cluster, run_dir, tmp_path):
    from headlens.reports.runs.sweep.gather import read_dataset

    worker = cluster.add_node(num_cpus=1, object_store_memory=STORE_BYTES)
    cluster.wait_for_nodes()
    worker_raylet = worker.all_processes["raylet"][0].process.pid
    out = tmp_path / "swept"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    args = ["sweep", "-m", str(run_dir), *SWEEP, "--address", cluster.address, "--max-retries", "1", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "headlens.reports.cli.main", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + RUNNING_S
        while proc.poll() is None and time.monotonic() < deadline and not _runs_a_task(worker_raylet):
            time.sleep(POLL_S)
        assert proc.poll() is None and time.monotonic() < deadline, (
            f"no task ran on the worker node: {proc.communicate() if proc.poll() is not None else 'timed out'}"
        )
        done_before = {p.name for p in (out / "tasks").glob("*") if (p / "manifest.json").is_file()} if (out / "tasks").is_dir() else set()
        cluster.remove_node(worker, allow_graceful=False)  # SIGKILL: the worker node is lost with the task it runs
        stdout, stderr = proc.communicate(timeout=FINISH_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout + stderr
    assert len(done_before) < len(STEPS), "every task had finished before the node was lost"
    status = pd.read_csv(out / "tasks.csv")
    assert status["status"].tolist() == ["done"] * len(STEPS), status
    assert not worker.any_processes_alive(), "the worker node was not removed"

    expected, expected_checkpoints = _undisturbed(run_dir, tmp_path / "undisturbed")
    data, checkpoints = read_dataset(out), pd.read_csv(out / "checkpoints.csv")
    assert len(data) == len(expected) == len(STEPS) * 8 * 2
    pd.testing.assert_frame_equal(data, read_dataset(tmp_path / "undisturbed"), check_exact=False, rtol=1e-5, atol=1e-6)
    pd.testing.assert_series_equal(
        checkpoints["heldout_loss"], expected_checkpoints["heldout_loss"].astype(float), check_exact=False, rtol=1e-5, check_names=False
    )
