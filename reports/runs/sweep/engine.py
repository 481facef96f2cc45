"""Run the sweep's tasks on Ray: local Ray by default, an existing cluster with ``address``.

Ray is the scheduler: every unfinished task is one ``ray.remote`` call asking for
``cpus_per_task`` CPUs and ``gpus_per_task`` GPUs (default: one where the cluster has GPUs),
retried ``max_retries`` times when its worker or node is lost.  A task that fails with a
:class:`HeadlensError` comes back as a one-line failure and the others go on; a task whose
worker died comes back as Ray's one-line reason.  Finished tasks (``OUT/tasks/KEY/manifest.json``)
are not submitted again, so rerunning the same command after an interruption finishes only
what is missing.

Local Ray starts with ``num_cpus`` CPUs (default: all), no dashboard, no usage reporting and
no worker logs forwarded to the driver, and is shut down at the end; a Ray already
initialised by the caller (or a cluster at ``address``) is used as it is and left running.
Ctrl-C or SIGTERM cancels the tasks, shuts Ray down and then raises :class:`KeyboardInterrupt`
(:mod:`~headlens.reports.runs.sweep.interrupts`: never from inside Ray's own calls).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headlens.probes.errors import InputError, OutputExistsError
from headlens.probes.outputs import write_json
from headlens.reports.runs.sweep.interrupts import Interrupts, deferred_interrupts
from headlens.reports.runs.sweep.plan import SweepConfig, SweepTask
from headlens.reports.runs.sweep.task import is_done, run_task

log = logging.getLogger(__name__)

__all__ = ["SweepOutcome", "run_sweep", "ray_session", "check_settings", "import_ray"]


@dataclass
class SweepOutcome:
    """What happened to each task: ``done`` now, ``skipped`` (done before) or ``failed``."""

    records: list[dict[str, Any]] = field(default_factory=list)
    ray_start_s: float = 0.0
    wall_s: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)

    def by_status(self, status: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["status"] == status]


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError("headlens sweep needs Ray: pip install 'headlens[sweep]'") from None
    return ray


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """Set environment variables for Ray's start-up only (Ray reads them when it starts)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A quick TCP check of ``host:port`` so that a wrong address is a one-line error, not a long wait."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--address {address!r}: expected HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise InputError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def ray_session(
    address: str | None = None, num_cpus: int | None = None, interrupts: Interrupts | None = None
) -> Iterator[tuple[Any, float]]:
    """``(ray, start-up seconds)``; starts local Ray (or connects) unless Ray is already initialised,
    and shuts down only what it started.

    ``interrupts``: the signals recorded while Ray starts (see :mod:`~headlens.reports.runs.sweep.interrupts`);
    one that came during ``ray.init`` is acted on once Ray is up, by shutting it down in order.
    """
    ray = import_ray()
    if address:
        _check_reachable(address)
    if ray.is_initialized():
        log.info("using the Ray instance already initialised in this process")
        yield ray, 0.0
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    t0 = time.perf_counter()
    with _env(RAY_USAGE_STATS_ENABLED="0"):
        try:
            if address:
                _check_reachable(address)
                try:
                    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    raise InputError(f"cannot join the Ray cluster at {address}: {' '.join(str(exc).split())[:300]}") from None
            else:
                # "local": always a new instance of our own; with no address Ray would join a cluster
                # it finds in /tmp/ray/ray_current_cluster (a `ray start` on this machine) and then
                # refuse num_cpus with a traceback (join one with address="auto" or --address auto)
                ray.init(
                    address="local",
                    num_cpus=num_cpus or os.cpu_count() or 1,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
        except BaseException:
            _shutdown(ray)  # whatever ray.init had started before it failed
            raise
    start_s = time.perf_counter() - t0
    try:
        if interrupts is not None:
            interrupts.check()
        log.info("Ray %s in %.1f s: %s", "joined" if address else "started", start_s, ray.cluster_resources())
        yield ray, start_s
    finally:
        _shutdown(ray)


def _shutdown(ray: Any) -> None:
    """``ray.shutdown()``, waiting for the processes it stops to exit where this Ray version has that option."""
    wait = "wait_for_processes" in inspect.signature(ray.shutdown).parameters
    ray.shutdown(**({"wait_for_processes": True} if wait else {}))


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


def _failure(task: SweepTask, message: str, exit_code: int = 1) -> dict[str, Any]:
    return {
        "key": task.key,
        "label": task.label,
        "model": task.model,
        "revision": task.revision,
        "step": task.step,
        "status": "failed",
        "error": message,
        "exit_code": exit_code,
    }


#: Seconds between checks for Ctrl-C while waiting for tasks.
_POLL_S = 0.5


def _ray_error_line(exc: Exception) -> str:
    cause = getattr(exc, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {' '.join(str(cause).split())}"[:500]
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:500]


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

    An exception raised by ``on_record``, Ctrl-C or SIGTERM cancels the tasks still queued or
    running and shuts down the Ray this call started before it propagates (a signal as
    :class:`KeyboardInterrupt`); finished task folders stay, and a rerun picks up from them.
    """
    out = Path(out)
    t0 = time.perf_counter()
    outcome = SweepOutcome()
    pending = []
    for task in tasks:
        if is_done(out, task):
            outcome.records.append(
                {
                    "key": task.key,
                    "label": task.label,
                    "model": task.model,
                    "revision": task.revision,
                    "step": task.step,
                    "status": "skipped",
                    "error": None,
                    "exit_code": 0,
                }
            )
        else:
            pending.append(task)
    if not pending:
        outcome.wall_s = time.perf_counter() - t0
        return outcome
    with deferred_interrupts() as interrupts, ray_session(address, num_cpus, interrupts) as (ray, start_s):
        outcome.ray_start_s = start_s
        outcome.resources = dict(ray.cluster_resources())
        gpus = gpus_per_task if gpus_per_task is not None else (1.0 if outcome.resources.get("GPU", 0) >= 1 else 0.0)
        remote = ray.remote(run_task).options(num_cpus=cpus_per_task, num_gpus=gpus, max_retries=max_retries)
        refs = {remote.remote(task, config, str(out.resolve()), command): task for task in pending}
        finished = len(outcome.records)
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1, timeout=_POLL_S)
                interrupts.check()
                for ref in ready:
                    task = refs.pop(ref)
                    try:
                        record = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the task raised, or its worker/node was lost
                        record = _failure(task, _ray_error_line(exc))
                    outcome.records.append(record)
                    finished += 1
                    if on_record is not None:
                        on_record(record, finished, len(tasks))
        except BaseException:
            log.info("stopping: cancelling %d unfinished task%s, then Ray", len(refs), "" if len(refs) == 1 else "s")
            for ref in refs:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
    outcome.wall_s = time.perf_counter() - t0
    return outcome
