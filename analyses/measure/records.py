"""The resume protocol of the long sweeps (the ablation table, pruning).

A sweep hands each finished unit of work (a record: a JSON-ready dict with a ``"kind"``) to a
:class:`RecordJournal` and, when resumed, reads the records of the interrupted run back from it;
it never touches a file.  The durable journal (an fsync'd JSONL file that survives ``kill -9``)
is :class:`headlens.reports.api.journal.Journal`; :class:`MemoryJournal` keeps the records in memory
(tests, or a caller that stores them its own way).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from headlens.probes.config import json_ready

__all__ = ["RecordJournal", "MemoryJournal", "records_of"]

log = logging.getLogger(__name__)


@runtime_checkable
class RecordJournal(Protocol):
    """Where a sweep's finished records go: ``records`` holds those of the run being resumed
    (and every record appended since); ``append`` makes ``records`` durable before returning."""

    records: list[dict[str, Any]]

    def append(self, records: list[dict[str, Any]]) -> None: ...


class MemoryJournal:
    """A :class:`RecordJournal` in memory; ``records`` round-trip through JSON, as a file journal's do."""

    def __init__(self, records: Iterable[dict[str, Any]] = ()) -> None:
        self.records: list[dict[str, Any]] = [_json_copy(r) for r in records]

    def append(self, records: list[dict[str, Any]]) -> None:
        self.records.extend(_json_copy(r) for r in records)


def _json_copy(record: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(json_ready(record)))


def records_of(journal: RecordJournal | None, kind: str) -> list[dict[str, Any]]:
    """The journal's records of ``kind`` (none without a journal)."""
    return [r for r in (journal.records if journal is not None else []) if r.get("kind") == kind]
