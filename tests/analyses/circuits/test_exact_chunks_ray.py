"""Every edge of a small model scored exactly on a local 2-worker Ray cluster, one worker killed mid-run.

The workers run one torch thread each; the reference is the same chunks run one after another in this
process with one thread: equal bit for bit (each chunk is the same computation wherever it runs), and
equal to one :func:`exact_scores` call over everything to 1e-6.  A worker is killed (SIGKILL, what the
kernel's OOM killer or a lost node does) as soon as the first chunk is back, while the workers run their
next ones: its chunk runs again on the other worker (or on the one started in its place).
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import numpy as np
import pytest
import torch

from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.exact_chunks import exact_scores_parallel
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.patching.builtin import builtin_task
from headlens.probes.cluster import Cluster

pytest.importorskip("ray")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers in /proc"),
]

EDGES_PER_CHUNK = 8


def _busy_workers() -> list[int]:
    """Pids of the pool's workers running a job (Ray names such a process ``ray::Worker.run``), this user's."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    cmd = f.read().decode(errors="replace")
            except OSError:
                continue
            if cmd.startswith("ray::Worker.run") and os.stat(f"/proc/{entry.name}").st_uid == os.getuid():
                pids.append(int(entry.name))
    return pids


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray of 2 CPUs for the module's tests, started as a run starts its own (``ray_session``: the same
    settings; a run finds it initialised and uses it): one start instead of one per test (4-6 s each on 2 cores).
    What the tests check (a lost worker rerun and reported, a load failure stopping the run) is the pool's, on any Ray."""
    from headlens.probes.cluster.session import ray_session

    saved = os.environ.pop("RAY_ADDRESS", None)
    try:
        with ray_session(None, Cluster(workers=2, threads=1).local_cpus()) as (ray, _):
            yield ray
    finally:
        if saved is not None:
            os.environ["RAY_ADDRESS"] = saved


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_edge_on_two_workers_with_one_killed_equals_one_process(local_ray, tiny_model, one_thread, caplog):
    graph = build_graph(tiny_model)
    task = builtin_task(tiny_model, "induction", n=6, seed=0)
    here = exact_scores_parallel(tiny_model, task, graph, edges_per_chunk=EDGES_PER_CHUNK)
    killed: list[int] = []

    def kill_one(stage, done, total):
        if done and not killed:
            busy = _busy_workers()
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])

    with caplog.at_level(logging.INFO, logger="headlens"):
        got = exact_scores_parallel(tiny_model, task, graph, edges_per_chunk=EDGES_PER_CHUNK,
                                    cluster=Cluster(workers=2, threads=1), progress=kill_one)  # fmt: skip
    assert killed, "no worker was running a chunk when the first came back"
    said = [r.getMessage() for r in caplog.records]
    assert any("lost" in line and str(killed[0]) in line for line in said), said
    assert np.array_equal(got.values, here.values) and np.array_equal(got.clean, here.clean)
    assert np.array_equal(got.corrupt, here.corrupt) and got.info == here.info
    one = exact_scores(tiny_model, task, graph)
    np.testing.assert_allclose(got.values, one.values, rtol=0, atol=1e-6)
    assert got.values.shape == (6, len(graph.edges)) and not np.isnan(got.values).any()


def test_workers_that_cannot_load_the_model_stop_the_run_with_one_line(local_ray, tiny_model, tmp_path):
    """Every worker's load fails (here: the folder is gone on the workers' side): one line naming why, no hang."""
    from headlens.analyses.circuits.exact_chunks import ChunkFailed
    from headlens.probes.config import ModelConfig

    graph = build_graph(tiny_model)
    task = builtin_task(tiny_model, "induction", n=2, seed=0)
    missing = ModelConfig(model=str(tmp_path / "gone"), device="cpu")
    with pytest.raises(ChunkFailed, match=r"no worker left: .*gone") as caught:
        exact_scores_parallel(missing, task, graph, cluster=Cluster(workers=1, max_retries=1))
    assert "\n" not in str(caught.value)
