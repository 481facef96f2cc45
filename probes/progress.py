"""The one progress callback shape: ``progress(stage, done, total)``.

Every ``progress=`` parameter of :mod:`headlens.probes`, :mod:`headlens.analyses` and the studies of
:mod:`headlens.reports.api` takes a :class:`Progress`: called with the stage being run (``"capture"``,
``"induction"``, ``"census: repeated"``), the units done and the units in that stage, after each unit
(a batch, a head, a prompt).  A plain function ``def show(stage, done, total): ...`` is one; so is
the CLI's :class:`headlens.reports.render.progress.ProgressBars`.  Code that counts one pass calls
:func:`stage_step` to get a ``(done, total)`` step of one stage.  What a run will cost, said before it
starts, goes through :func:`announce`: to the callback's ``note(text)`` where it has one (the CLI's
bars write it as a line on stderr), nowhere otherwise; nothing below the CLI prints.

Light (the standard library only): the CLI's options and every layer import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Progress", "Step", "stage_step", "no_progress", "announce"]


@runtime_checkable
class Progress(Protocol):
    """``progress(stage, done, total)``: ``done`` of ``total`` units of ``stage`` are finished."""

    def __call__(self, stage: str, done: int, total: int, /) -> None: ...


#: One stage's step, ``step(done, total)``, as :func:`stage_step` makes it.
Step = Callable[[int, int], None]


def stage_step(progress: Progress | None, stage: str) -> Step | None:
    """``progress`` bound to one ``stage``: a ``(done, total)`` callable (None without ``progress``)."""
    if progress is None:
        return None

    def step(done: int, total: int) -> None:
        progress(stage, done, total)

    return step


def no_progress(stage: str, done: int, total: int, /) -> None:
    """A :class:`Progress` that shows nothing."""


def announce(progress: object, text: str) -> None:
    """Hand ``text`` (one line: what a run will cost, before it starts) to ``progress.note`` when the
    callback has one; a plain function gets nothing."""
    note = getattr(progress, "note", None)
    if callable(note):
        note(text)
