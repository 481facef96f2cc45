"""Ctrl-C and SIGTERM while work runs on Ray: recorded by the handler, acted on in normal flow.

Python raises :class:`KeyboardInterrupt` wherever the main thread happens to be when SIGINT
arrives: inside ``ray.init`` while Ray's core worker and its threads are half built, or
inside ``ray.wait``.  Unwinding from there skipped ``ray.shutdown`` (Ray's helper processes,
orphaned, lived on for about 90 s) and let the interpreter tear down a live core worker on
exit (a segfault or ``free(): invalid pointer`` in some runs).  Inside :func:`deferred_interrupts`
the handler only records the signal; the pool (:mod:`~headlens.probes.cluster.pool`) checks
:meth:`Interrupts.check` at the points where stopping is safe (after ``ray.init``, between
``ray.wait`` polls), stops its workers, shuts Ray down in order, and only then raises :class:`KeyboardInterrupt` (exit 130).

A second Ctrl-C stops at once (raised from the handler, as Python would), for a user who will
not wait, e.g. for an address that accepts connections but never answers ``ray.init``.

A signal the process ignores (``SIG_IGN``: a job started in the background by a shell) stays
ignored, and outside the main thread nothing is installed (Python allows handlers only there).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["Interrupts", "deferred_interrupts", "SIGNALS"]

#: The signals that stop work on Ray: Ctrl-C, and ``kill`` or a batch system's time limit.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The first stop signal received inside :func:`deferred_interrupts` (None: none yet)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.signals: list[int] = []  # the signals recorded (those not ignored, in the main thread)

    def record(self, signum: int, frame: Any = None) -> None:
        if self.received is None:
            self.received = signum
            return
        if signum == signal.SIGINT:  # a second Ctrl-C: the user will not wait (e.g. a hung ray.init)
            log.warning("second interrupt: stopping now, without waiting for Ray to shut down")
            raise KeyboardInterrupt("SIGINT (second)")

    def reinstall(self) -> None:
        """Record the signals again: ``ray.init`` installs its own SIGTERM handler (exit, and an abort from its core
        worker), so a ``kill PID`` during the run killed the driver with Ray's processes left running."""
        for sig in self.signals:
            signal.signal(sig, self.record)

    def check(self) -> None:
        """Raise :class:`KeyboardInterrupt` if a stop signal has come; call it where stopping is safe."""
        if self.received is not None:
            raise KeyboardInterrupt(signal.Signals(self.received).name)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[Interrupts]:
    """Record SIGINT and SIGTERM instead of raising; the previous handlers come back at the end."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {}
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, interrupts.record)
            interrupts.signals.append(sig)
    try:
        yield interrupts
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
