"""The one way headlens runs work on Ray: a pool of workers, each holding what ``setup`` builds once, running jobs.

:func:`run_pool` starts (or joins, :mod:`~headlens.probes.cluster.session`) Ray and ``workers`` Ray actors
(:class:`Worker`), each asking for ``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs (default: one where
the cluster has GPUs, else none) and running ``threads`` torch threads.  Each worker calls ``setup()``
once (e.g. loads a model: one copy per worker) and then ``work(state, payload)`` for each job it is
given, one at a time; a job goes to the first idle worker (with ``depth`` 2, each worker also holds the
next job, queued behind the one it runs, so it never waits for the driver between jobs).  A job whose worker is lost (its process
killed, its node gone) is given to another worker, at most ``max_retries`` times, and a new worker is
started in the lost one's place (as many replacements as ``workers x max_retries``); a job whose
``work`` raises is ``failed`` with the error's one line and the others go on.

Every signal of :mod:`~headlens.probes.cluster.interrupts` (Ctrl-C, SIGTERM) is acted on between polls:
the workers are killed, Ray is shut down, then :class:`KeyboardInterrupt` propagates.  Nothing here
imports Ray at module level: :class:`Worker` is made a Ray actor where the pool starts.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from headlens.probes.cluster.interrupts import deferred_interrupts
from headlens.probes.cluster.session import ray_session
from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["Cluster", "Job", "Finished", "PoolOutcome", "Worker", "run_pool", "error_line"]

#: Seconds between checks for Ctrl-C while waiting for jobs.
POLL_S = 0.5


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Where and how the pool runs."""

    #: None: a local Ray of this process (or ``$RAY_ADDRESS``'s cluster); ``"local"``: always a local Ray;
    #: ``"auto"``: the cluster ``ray start`` runs on this machine; ``HOST:PORT`` or ``ray://HOST:PORT``.
    address: str | None = None
    #: Workers (actors) to start; None: as many as the cluster's CPUs and GPUs hold, at most one per job.
    workers: int | None = None
    #: CPUs of a local Ray (default: ``workers x cpus_per_worker`` when ``workers`` is given, else all).
    num_cpus: int | None = None
    cpus_per_worker: float = 1.0
    #: None: 1 where the cluster has GPUs, else 0.
    gpus_per_worker: float | None = None
    #: torch threads of each worker (None: ``cpus_per_worker``, at least 1).
    threads: int | None = None
    #: Reruns of a job whose worker was lost.
    max_retries: int = 1

    def local_cpus(self) -> int | None:
        if self.num_cpus is not None or self.workers is None:
            return self.num_cpus
        return max(1, math.ceil(self.workers * self.cpus_per_worker))


@dataclass(frozen=True)
class Job:
    """One unit of work: ``key`` names it (unique), ``payload`` is what ``work`` gets with the worker's state."""

    key: str
    payload: Any


@dataclass
class Finished:
    """A job's end: ``done`` with ``work``'s ``result``, or ``failed`` with its ``error`` line."""

    key: str
    status: str
    result: Any = None
    error: str | None = None
    #: The worker that ran it: ``pid``, ``host``, ``threads`` (empty when no worker ran it to the end).
    worker: dict[str, Any] = field(default_factory=dict)
    tries: int = 1


@dataclass
class PoolOutcome:
    finished: list[Finished] = field(default_factory=list)
    ray_start_s: float = 0.0
    wall_s: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    #: Every worker that started (``pid``, ``host``, ``threads``, ``setup_s``), in the order they became ready.
    workers: list[dict[str, Any]] = field(default_factory=list)
    #: Workers lost while the pool ran.
    lost: int = 0


class Worker:
    """One Ray actor of the pool: ``setup()``'s state, built once, and the jobs run on it."""

    def __init__(self, setup: Callable[[], Any] | None, threads: int) -> None:
        t0 = time.perf_counter()
        torch.set_num_threads(threads)
        self.threads, self.state, self.error = threads, None, None
        try:
            self.state = setup() if setup is not None else None
        except Exception as exc:  # noqa: BLE001 - said by describe(): a worker that cannot set up takes no job
            self.error = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
        self.setup_s = time.perf_counter() - t0

    def describe(self) -> dict[str, Any]:
        """``pid``, ``host``, ``threads``, ``setup_s``, and ``error``: why ``setup`` failed (None: it did not)."""
        return {"pid": os.getpid(), "host": os.uname().nodename, "threads": self.threads, "setup_s": round(self.setup_s, 3),
                "error": self.error}  # fmt: skip

    def run(self, work: Callable[[Any, Any], Any], payload: Any) -> Any:
        return work(self.state, payload)


def error_line(exc: BaseException) -> str:
    """One line for a Ray error: the cause's type and message where Ray carries one, else its last line."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {' '.join(str(cause).split())}"[:500]
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:500]


def _sizes(cluster: Cluster, resources: dict[str, float], n_jobs: int) -> tuple[int, float]:
    """``(workers, gpus per worker)`` on a cluster with ``resources``; a request no node can hold is refused."""
    gpus = cluster.gpus_per_worker if cluster.gpus_per_worker is not None else (1.0 if resources.get("GPU", 0) >= 1 else 0.0)
    cpus_total, gpus_total = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    if cluster.cpus_per_worker > cpus_total or gpus > gpus_total:
        raise InputError(
            f"a worker asks for {cluster.cpus_per_worker:g} CPUs and {gpus:g} GPUs; the Ray cluster has {cpus_total:g} CPUs "
            f"and {gpus_total:g} GPUs"
        )
    fit = int(cpus_total // cluster.cpus_per_worker)
    if gpus > 0:
        fit = min(fit, int(gpus_total // gpus))
    workers = cluster.workers if cluster.workers is not None else max(1, min(fit, n_jobs))
    if workers > fit:
        log.warning("%d workers asked for; the cluster holds %d at a time now (the others start when it grows)", workers, fit)
    return workers, gpus


class _Pool:
    """The pool's bookkeeping: workers starting, ready (with their jobs in flight) or lost; jobs queued; tries per job."""

    def __init__(self, ray: Any, actor: Any, setup: Callable[[], Any] | None, work: Callable[[Any, Any], Any], cluster: Cluster,
                 threads: int, jobs: Sequence[Job], outcome: PoolOutcome, depth: int) -> None:  # fmt: skip
        self.ray, self.actor, self.setup, self.work, self.threads = ray, actor, setup, work, threads
        self.max_retries = cluster.max_retries
        self.queue: deque[Job] = deque(jobs)
        self.tries: Counter[str] = Counter()
        self.pending: dict[Any, tuple[Any, Job | None]] = {}  # ref -> (worker, its job; None: its start)
        self.ready: dict[int, Any] = {}  # id(worker) -> worker, ready for jobs
        self.load: Counter[int] = Counter()  # id(worker) -> its jobs in flight
        self.lost: set[int] = set()
        self.depth = depth
        self.handles: list[Any] = []
        self.info: dict[int, dict[str, Any]] = {}
        self.starts_left = 0
        self.last_loss = ""
        self.outcome = outcome

    def start(self) -> None:
        handle = self.actor.remote(self.setup, self.threads)
        self.handles.append(handle)
        self.pending[handle.describe.remote()] = (handle, None)

    def feed(self) -> None:
        """Each ready worker filled up to ``depth`` jobs in flight: every worker one job first, then a second."""
        for level in range(self.depth):
            for key, handle in self.ready.items():
                if self.queue and self.load[key] <= level:
                    job = self.queue.popleft()
                    self.tries[job.key] += 1
                    self.load[key] += 1
                    self.pending[handle.run.remote(self.work, job.payload)] = (handle, job)

    def busy(self) -> bool:
        return bool(self.queue) or any(job is not None for _, job in self.pending.values())

    def settle(self, ref: Any) -> Finished | None:
        """The end of one call: a worker ready, a job done or failed, or a worker lost (its job queued again)."""
        handle, job = self.pending.pop(ref)
        if job is not None:
            self.load[id(handle)] -= 1
        try:
            value = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            return self._lost(handle, job, exc)
        except self.ray.exceptions.RayError as exc:  # the job's work raised: the worker goes on
            if job is None:
                return None
            return Finished(job.key, "failed", error=error_line(exc), worker=self.info.get(id(handle), {}), tries=self.tries[job.key])
        if job is None:
            if value["error"] is not None:
                self.last_loss = value["error"]
                log.warning("worker %s on %s could not set up: %s", value["pid"], value["host"], value["error"])
                with contextlib.suppress(Exception):
                    self.ray.kill(handle)
                return None
            self.info[id(handle)] = value
            self.outcome.workers.append(value)
            log.info("worker %s on %s ready in %.1f s", value["pid"], value["host"], value["setup_s"])
            self.ready[id(handle)] = handle
            return None
        return Finished(job.key, "done", result=value, worker=self.info.get(id(handle), {}), tries=self.tries[job.key])

    def _lost(self, handle: Any, job: Job | None, exc: BaseException) -> Finished | None:
        """A worker lost: said, replaced (once, while replacements are left), its jobs queued again up to ``max_retries``."""
        if id(handle) not in self.lost:  # its other job in flight fails the same way: one loss
            self.lost.add(id(handle))
            self.ready.pop(id(handle), None)
            self.outcome.lost += 1
            self.last_loss = error_line(exc)
            with contextlib.suppress(Exception):
                self.ray.kill(handle)
            log.warning("worker %s lost (%s)", self.info.get(id(handle), {}).get("pid", "starting"), self.last_loss)
            if self.starts_left > 0:
                self.starts_left -= 1
                self.start()
        if job is None:
            return None
        if self.tries[job.key] <= self.max_retries:
            self.queue.appendleft(job)  # to the next idle worker
            return None
        return Finished(
            job.key, "failed", error=f"its worker was lost {self.tries[job.key]} times: {self.last_loss}", tries=self.tries[job.key]
        )

    def stranded(self) -> list[Finished]:
        """The queued jobs when no worker is left or starting: each failed with the last loss."""
        if self.pending or self.ready or not self.queue:
            return []
        jobs, self.queue = list(self.queue), deque()
        return [Finished(j.key, "failed", error=f"no worker left: {self.last_loss}", tries=self.tries[j.key]) for j in jobs]

    def stop(self) -> None:
        for handle in self.handles:
            with contextlib.suppress(Exception):
                self.ray.kill(handle)


def run_pool(
    jobs: Sequence[Job],
    work: Callable[[Any, Any], Any],
    *,
    setup: Callable[[], Any] | None = None,
    cluster: Cluster | None = None,
    on_finished: Callable[[Finished, int, int], None] | None = None,
    depth: int = 1,
) -> PoolOutcome:
    """Run every job on a pool of Ray workers (module doc); ``on_finished(finished, n_finished, n_jobs)`` after each;
    ``depth``: jobs in flight on each worker (2: the next one waits on the worker; for many short jobs).

    ``setup`` and ``work`` must be picklable (module-level functions, or :func:`functools.partial` of them),
    as must the payloads and results.  An exception raised by ``on_finished``, Ctrl-C or SIGTERM kills the
    workers and shuts down the Ray this call started before it propagates (a signal as :class:`KeyboardInterrupt`).
    """
    cluster = cluster or Cluster()
    t0 = time.perf_counter()
    outcome = PoolOutcome()
    if not jobs:
        return outcome
    with deferred_interrupts() as interrupts, ray_session(cluster.address, cluster.local_cpus(), interrupts) as (ray, start_s):
        outcome.ray_start_s = start_s
        outcome.resources = dict(ray.cluster_resources())
        n_workers, gpus = _sizes(cluster, outcome.resources, len(jobs))
        threads = cluster.threads or max(1, int(cluster.cpus_per_worker))
        actor = ray.remote(Worker).options(num_cpus=cluster.cpus_per_worker, num_gpus=gpus, max_restarts=0)
        pool = _Pool(ray, actor, setup, work, cluster, threads, jobs, outcome, depth)
        pool.starts_left = n_workers * cluster.max_retries
        try:
            for _ in range(n_workers):
                pool.start()
            while pool.busy():
                ready, _ = ray.wait(list(pool.pending), num_returns=1, timeout=POLL_S)
                interrupts.check()
                for ref in ready:
                    ends = [end] if (end := pool.settle(ref)) is not None else []
                    pool.feed()  # the idle workers get their next job before the callback runs
                    for end in ends + pool.stranded():
                        outcome.finished.append(end)
                        if on_finished is not None:
                            on_finished(end, len(outcome.finished), len(jobs))
                pool.feed()
        except BaseException:
            log.info("stopping: %d job%s unfinished; the workers stop, then Ray", len(jobs) - len(outcome.finished),
                     "" if len(jobs) - len(outcome.finished) == 1 else "s")  # fmt: skip
            raise
        finally:
            pool.stop()
    outcome.wall_s = time.perf_counter() - t0
    return outcome
