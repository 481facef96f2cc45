"""Run the sweep's tasks on Ray (:mod:`headlens.probes.cluster`): local Ray by default, an existing cluster with ``address``.

The sweep is a pool of workers (:func:`~headlens.probes.cluster.pool.run_pool`), each asking for
``cpus_per_task`` CPUs and ``gpus_per_task`` GPUs (default: one where the cluster has GPUs), as many as the
cluster holds (at most one per task); each task is one job, which loads its own checkpoint.  A task whose
worker is lost (its process killed, its node gone) runs again on another worker, at most ``max_retries``
times.  A task that fails with a :class:`HeadlensError` comes back as a one-line failure and the others go
on; a task whose workers were all lost comes back as Ray's one-line reason.  Finished tasks
(``OUT/tasks/KEY/manifest.json``) are not submitted again, so rerunning the same command after an
interruption finishes only what is missing.

Local Ray starts with ``num_cpus`` CPUs (default: all) and is shut down at the end; a Ray already
initialised by the caller (or a cluster at ``address``) is used as it is and left running
(:mod:`~headlens.probes.cluster.session`).  Ctrl-C or SIGTERM stops the workers, shuts Ray down and then
raises :class:`KeyboardInterrupt` (:mod:`~headlens.probes.cluster.interrupts`: never from inside Ray's own calls).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headlens.probes.cluster.pool import Cluster, Finished, Job, run_pool
from headlens.probes.errors import OutputExistsError
from headlens.probes.outputs import write_json
from headlens.reports.runs.sweep.plan import SweepConfig, SweepTask
from headlens.reports.runs.sweep.task import is_done, run_task

log = logging.getLogger(__name__)

__all__ = ["SweepOutcome", "run_sweep", "check_settings"]


@dataclass
class SweepOutcome:
    """What happened to each task: ``done`` now, ``skipped`` (done before) or ``failed``."""

    records: list[dict[str, Any]] = field(default_factory=list)
    ray_start_s: float = 0.0
    wall_s: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)

    def by_status(self, status: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["status"] == status]


def check_settings(out: Path, config: SweepConfig, *, overwrite: bool) -> None:
    """Write ``OUT/sweep.json``; refused unless ``overwrite``: a folder holding a sweep with other
    settings, and a folder that holds other files but no sweep (no ``sweep.json``), as every
    command refuses a non-empty output folder."""
    path = out / "sweep.json"
    settings = config.to_dict()
    if not overwrite and not path.is_file() and out.is_dir() and any(out.iterdir()):
        raise OutputExistsError(
            f"output folder {out} is not empty and holds no sweep (no sweep.json); pass another --out, or --overwrite to write the sweep "
            "beside its files",
            path=str(out),
        )
    if path.is_file() and not overwrite:
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        if old != settings:
            changed = sorted(k for k in settings if not isinstance(old, dict) or old.get(k) != settings[k])
            raise OutputExistsError(
                f"{out} holds a sweep with other settings ({', '.join(changed) or 'unreadable sweep.json'}); pass --overwrite to start it "
                "afresh, or another --out"
            )
    if overwrite and (out / "tasks").is_dir():
        shutil.rmtree(out / "tasks")
    write_json(path, settings)


def _run_job(state: None, payload: tuple[SweepTask, SweepConfig, str, list[str]]) -> dict[str, Any]:
    """One task on a worker of the pool (the workers hold no state: each task loads its own checkpoint)."""
    return run_task(*payload)


def _record(task: SweepTask, status: str, error: str | None = None, exit_code: int = 0) -> dict[str, Any]:
    return {
        "key": task.key,
        "label": task.label,
        "model": task.model,
        "revision": task.revision,
        "step": task.step,
        "status": status,
        "error": error,
        "exit_code": exit_code,
    }


def run_sweep(
    tasks: list[SweepTask],
    config: SweepConfig,
    out: str | Path,
    *,
    command: list[str],
    address: str | None = None,
    num_cpus: int | None = None,
    cpus_per_task: float = 1,
    gpus_per_task: float | None = None,
    max_retries: int = 1,
    on_record: Callable[[dict[str, Any], int, int], None] | None = None,
) -> SweepOutcome:
    """Run every task not done yet in ``out``; ``on_record(record, finished, total)`` after each.

    An exception raised by ``on_record``, Ctrl-C or SIGTERM stops the workers and shuts down the Ray
    this call started before it propagates (a signal as :class:`KeyboardInterrupt`); finished task
    folders stay, and a rerun picks up from them.
    """
    out = Path(out)
    t0 = time.perf_counter()
    outcome = SweepOutcome()
    pending = []
    for task in tasks:
        if is_done(out, task):
            outcome.records.append(_record(task, "skipped"))
        else:
            pending.append(task)
    if not pending:
        outcome.wall_s = time.perf_counter() - t0
        return outcome
    by_key = {task.key: task for task in pending}
    skipped = len(outcome.records)

    def on_finished(end: Finished, finished: int, total: int) -> None:
        task = by_key[end.key]
        record = end.result if end.status == "done" else _record(task, "failed", end.error, 1)
        outcome.records.append(record)
        if on_record is not None:
            on_record(record, skipped + finished, len(tasks))

    jobs = [Job(task.key, (task, config, str(out.resolve()), command)) for task in pending]
    cluster = Cluster(address=address, num_cpus=num_cpus, cpus_per_worker=cpus_per_task, gpus_per_worker=gpus_per_task,
                      max_retries=max_retries)  # fmt: skip
    pool = run_pool(jobs, _run_job, cluster=cluster, on_finished=on_finished)
    outcome.ray_start_s, outcome.resources = pool.ray_start_s, pool.resources
    outcome.wall_s = time.perf_counter() - t0
    return outcome
