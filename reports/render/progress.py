"""The one progress adapter: library ``progress`` callbacks -> tqdm bars (or plain lines) on stderr.

Library code (``headlens.probes``, ``headlens.analyses``) takes a plain callback,
``progress(done, total)`` or ``progress(stage, done, total)``, and never imports tqdm.  The
commands hand it a :class:`ProgressBars`::

    with progress_bars("census", quiet=quiet) as progress:
        run_census(loaded, config, progress=progress)

On a terminal each label gets a tqdm bar on stderr; when stderr is not a terminal (CI logs,
pipes, click's test runner) it writes plain ``label: done/total`` lines instead, one per tenth
of a pass, so logs stay readable.  ``quiet`` (the commands' ``-q``) silences it.  A pass with
``total <= 1`` shows nothing.  A pass whose first units project a long run (more than
:data:`LONG_PASS_S`) gets one line with its estimated time when that is known, after its first
unit (``circuit: exact: about 12 min for 144 units (5.0 s each so far)``): a long run is said, never
refused for its time.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, TypeVar

from tqdm import tqdm

logger = logging.getLogger(__name__)

__all__ = ["ProgressBars", "ReportBars", "progress_bars", "LONG_PASS_S", "duration_text"]

#: A pass projected to take longer than this (seconds) gets a line with its estimated time.
LONG_PASS_S = 30.0


def duration_text(seconds: float) -> str:
    """``0.4 s``, ``45 s``, ``12 min``, ``3.2 h``, ``4.1 days``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


_Bars = TypeVar("_Bars", bound="ProgressBars")


class ProgressBars:
    """A progress callback: ``bars(done, total)`` or ``bars(stage, done, total)``.

    ``label`` prefixes every line (``"census: induction 3/10"``); ``stream`` defaults to the
    ``sys.stderr`` of the moment it is made; ``tty`` overrides the terminal check.
    """

    def __init__(self, label: str | None = None, *, quiet: bool = False, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.label = label
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty()) if callable(isatty) else False
        self.tty = tty
        self._bars: dict[str, Any] = {}  # tqdm bars (terminal) by label
        self._tenth: dict[str, int] = {}  # last tenth written (plain lines) by label
        self._start: dict[str, float] = {}  # when each pass began (its 0 call, else the previous event)
        self._said: set[str] = set()  # passes whose estimate was written
        self._last = time.monotonic()

    def _name(self, stage: str | None) -> str:
        """``label: stage``; a stage named like the label (``gqa`` under ``gqa``) is said once."""
        parts = [p for p in (self.label, stage) if p]
        if len(parts) == 2 and parts[0] == parts[1]:
            parts = parts[:1]
        return ": ".join(parts) or "progress"

    def __call__(self, *args: Any) -> None:
        if len(args) == 3:
            stage, done, total = args
        elif len(args) == 2:
            stage, (done, total) = None, args
        else:
            raise TypeError(f"progress callback takes (done, total) or (stage, done, total), got {len(args)} arguments")
        self.update(None if stage is None else str(stage), int(done), int(total))

    def update(self, stage: str | None, done: int, total: int) -> None:
        if self.quiet or total <= 1:
            return
        name = self._name(stage)
        self._estimate(name, done, total)
        if self.tty:
            self._update_bar(name, done, total)
            return
        tenth = (10 * min(done, total)) // total
        if done == total or tenth != self._tenth.get(name, 0):
            self._tenth[name] = tenth
            self.stream.write(f"{name}: {done}/{total}\n")
            self.stream.flush()
        if done >= total:
            self._tenth.pop(name, None)

    def _estimate(self, name: str, done: int, total: int) -> None:
        """One line with the pass's estimated time once its first unit is done, when it is long."""
        now = time.monotonic()
        start = self._start.setdefault(name, now if done <= 0 else self._last)
        self._last = now
        if done >= total:
            self._start.pop(name, None)
            self._said.discard(name)
            return
        if done <= 0 or name in self._said:
            return
        each = (now - start) / done
        if each * total > LONG_PASS_S:
            self._said.add(name)
            self.write(f"{name}: about {duration_text(each * total)} for {total:,} units ({duration_text(each)} each so far)")

    def _update_bar(self, name: str, done: int, total: int) -> None:
        bar = self._bars.get(name)
        if bar is not None and (bar.total != total or done < bar.n):  # a new pass under the same label
            bar.close()
            bar = None
        if bar is None:
            bar = self._bars[name] = tqdm(total=total, desc=name, file=self.stream, leave=True, dynamic_ncols=True)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
            del self._bars[name]

    def write(self, text: str) -> None:
        """A message line (unless quiet) that does not break a bar being drawn."""
        if self.quiet:
            return
        if self._bars:
            tqdm.write(text, file=self.stream)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """A line under the label (:func:`headlens.probes.progress.announce`: what a run will cost, before it starts)."""
        self.write(f"{self._name(None)}: {text}" if self.label else text)

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()
        self._tenth.clear()

    def __enter__(self: _Bars) -> _Bars:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextmanager
def progress_bars(label: str | None = None, *, quiet: bool = False) -> Iterator[ProgressBars]:
    """A :class:`ProgressBars` on stderr whose bars are closed on the way out (also on errors)."""
    bars = ProgressBars(label, quiet=quiet)
    try:
        yield bars
    finally:
        bars.close()


class ReportBars(ProgressBars):
    """The :class:`headlens.reports.runs.report.build.ReportProgress` protocol on top of the same bars:
    ``message(text)`` per stage event, ``step(label, sub, done, total)`` per pass."""

    def message(self, text: str) -> None:
        self.write(text)

    def step(self, label: str, sub: str, done: int, total: int) -> None:
        self.update(f"{label}: {sub}", done, total)
