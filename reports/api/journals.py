"""Journals for studies that run long: a study opens its journal from the run's key (model, data,
configuration) through a :data:`JournalOpener`; the caller finishes it once the outputs are
written (:meth:`headlens.reports.api.journal.Journal.finish` deletes it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headlens.reports.api.journal import Journal

log = logging.getLogger(__name__)

__all__ = ["JournalOpener", "KeptJournal", "JournalFile"]

#: Opens a run's journal from its key (``model``, ``data``, ``data_fingerprint``, the configuration);
#: ``headlens ablate --resume`` and the report pass one.
JournalOpener = Callable[[dict[str, Any]], Any]


class KeptJournal:
    """A :data:`JournalOpener` over ``open_journal(key)`` that keeps what it opened
    (:attr:`journal`, ``None`` until a study opens it) so the caller can :meth:`finish` it."""

    def __init__(self, open_journal: Callable[[dict[str, Any]], Journal]) -> None:
        self.open_journal = open_journal
        self.journal: Journal | None = None

    def __call__(self, key: dict[str, Any]) -> Journal:
        self.journal = self.open_journal(key)
        return self.journal

    def finish(self) -> None:
        """Delete the journal: the outputs it protected are written."""
        if self.journal is not None:
            self.journal.finish()


class JournalFile(KeptJournal):
    """The journal at ``path`` (``kind``: its header's kind), resumed with ``resume`` (else a
    journal already there is refused unless ``overwrite``); ``on_resume(journal)`` is called when
    one is resumed (e.g. to say how much was done)."""

    def __init__(
        self, path: str | Path, kind: str, *, resume: bool, overwrite: bool, on_resume: Callable[[Journal], None] | None = None
    ) -> None:
        super().__init__(self._open)
        self.path, self.kind, self.resume, self.overwrite, self.on_resume = Path(path), kind, resume, overwrite, on_resume

    def _open(self, key: dict[str, Any]) -> Journal:
        journal = Journal(self.path, self.kind, key, resume=self.resume, overwrite=self.overwrite)
        if journal.resumed and self.on_resume is not None:
            self.on_resume(journal)
        return journal
