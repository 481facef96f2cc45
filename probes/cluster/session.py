"""Ray started or joined for one run, and shut down in order after it.

``address``: ``None`` starts a local Ray of this process's own (``num_cpus`` CPUs, default all; no
dashboard, no usage reporting, no worker logs forwarded, workers not niced), unless ``$RAY_ADDRESS`` names a cluster;
``"auto"`` joins the cluster ``ray start`` runs on this machine; ``HOST:PORT`` or ``ray://HOST:PORT``
joins that one (a quick TCP check first, so that a wrong address is a one-line error, not a long wait).
A Ray already initialised by the caller is used as it is and left running.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

from headlens.probes.cluster.interrupts import Interrupts
from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["import_ray", "ray_session"]


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError("running on Ray needs Ray: pip install 'headlens[sweep]'") from None
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
        raise InputError(f"address={address!r}: expected auto, local, HOST:PORT or ray://HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        raise InputError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def _init(ray: Any, address: str | None, num_cpus: int | None) -> None:
    if address and address != "local":
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


@contextlib.contextmanager
def ray_session(
    address: str | None = None, num_cpus: int | None = None, interrupts: Interrupts | None = None
) -> Iterator[tuple[Any, float]]:
    """``(ray, start-up seconds)``; starts local Ray (or connects) unless Ray is already initialised,
    and shuts down only what it started.

    ``interrupts``: the signals recorded while Ray starts (see :mod:`~headlens.probes.cluster.interrupts`);
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
    local = address in (None, "local")
    t0 = time.perf_counter()
    # a local Ray's workers at the driver's priority: Ray nices them (15) by default, and on a machine shared with other
    # work they then get a fraction of a core each (2 workers scored 1.0x one process at a load average of 16 on 2 cores)
    niceness = {"RAY_worker_niceness": "0"} if local else {}
    with _env(RAY_USAGE_STATS_ENABLED="0", **niceness):
        try:
            _init(ray, address, num_cpus)
        except BaseException:
            _shutdown(ray)  # whatever ray.init had started before it failed
            raise
    start_s = time.perf_counter() - t0
    try:
        if interrupts is not None:
            interrupts.reinstall()  # ray.init replaced the SIGTERM handler
            interrupts.check()
        log.info("Ray %s in %.1f s: %s", "started" if local else "joined", start_s, ray.cluster_resources())
        yield ray, start_s
    finally:
        _shutdown(ray)


def _shutdown(ray: Any) -> None:
    """``ray.shutdown()``, waiting for the processes it stops to exit where this Ray version has that option."""
    wait = "wait_for_processes" in inspect.signature(ray.shutdown).parameters
    ray.shutdown(**({"wait_for_processes": True} if wait else {}))
