"""An append-only JSONL journal that lets a long sweep survive ``kill -9``.

The file side of the sweeps' resume protocol: the ablation and pruning sweeps
(:mod:`headlens.analyses.ablation`) only see a
:class:`headlens.analyses.measure.records.RecordJournal` (``records`` + ``append``), which
:class:`Journal` is; the commands and the report open it around a sweep.

Line 1 is a header identifying the run (``{"journal": "headlens", "kind": ..., "key": {...}}``:
model, data fingerprint, configuration).  Every later line is one finished unit of work
(a record: a head's per-item metric values, a pruning step...).  Each append is written,
flushed and ``fsync``'d before the sweep moves on, so after any interruption the journal
holds every unit that finished; a torn last line (the process died mid-write) is dropped.

``--resume`` reopens the journal, checks that its header matches the run being resumed
(same model, data and configuration, else an :class:`InputError`), hands back the finished
records and appends the rest.  When the final output has been written (atomically), the
journal is deleted.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from headlens.probes.config import json_ready
from headlens.probes.errors import InputError, OutputError, OutputExistsError

__all__ = ["Journal", "journal_path"]

log = logging.getLogger(__name__)

_MAGIC = "headlens"


def journal_path(out: str | Path) -> Path:
    """Where the journal of the run writing ``out`` lives: ``out`` plus ``.journal.jsonl``."""
    p = Path(out)
    return p.with_name(p.name + ".journal.jsonl")


def _diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Keys whose values differ between two JSON-ready dicts (for a readable error)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            out += _diff(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [prefix.rstrip(".")]


class Journal:
    """The journal of one run.

    ``Journal(path, kind, key, resume=..., overwrite=...)``:

    * no journal at ``path``: start one (``resume`` or not);
    * a journal exists and ``resume``: its header must equal ``(kind, key)``; its records
      are loaded into ``records``;
    * a journal exists, no ``resume``: refused (:class:`OutputExistsError`) unless
      ``overwrite``, which starts afresh.

    Nothing is written until :meth:`open` (so validation can fail first).
    """

    def __init__(self, path: str | Path, kind: str, key: dict[str, Any], *, resume: bool, overwrite: bool) -> None:
        self.path = Path(path)
        self.header = {"journal": _MAGIC, "kind": kind, "key": json_ready(key)}
        # Round-trip through JSON so comparisons see what the file will hold.
        self.header = json.loads(json.dumps(self.header))
        self.records: list[dict[str, Any]] = []
        self.resumed = False
        self._fh: Any = None
        self._valid_bytes = 0
        if self.path.exists():
            if self.path.is_dir():
                raise OutputExistsError(f"journal path {self.path} is a folder", path=str(self.path))
            if resume:
                self._load()
            elif not overwrite:
                raise OutputExistsError(
                    f"{self.path} holds an unfinished run: pass --resume to finish it, or --overwrite to start over",
                    path=str(self.path),
                )
            else:
                log.info("--overwrite: the unfinished run in %s is discarded", self.path)

    def _load(self) -> None:
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        good = 0
        parsed: list[dict[str, Any]] = []
        for i, line in enumerate(lines):
            complete = i < len(lines) - 1  # the last piece has no newline after it
            if not complete:
                if line:
                    log.info("%s: dropping a torn last line (%d bytes; the run was interrupted mid-write)", self.path, len(line))
                break  # torn write: drop it
            try:
                obj = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                log.warning("%s: line %d is unreadable (%s); it and everything after it are dropped", self.path, i + 1, exc)
                break
            parsed.append(obj)
            good += len(line) + 1
        if not parsed:
            log.info("%s holds no complete header; starting the run afresh", self.path)
            return  # empty or torn header: start over
        head = parsed[0]
        if not isinstance(head, dict) or head.get("journal") != _MAGIC:
            raise InputError(f"{self.path} is not a headlens journal; remove it or pass --overwrite", path=str(self.path))
        if head.get("kind") != self.header["kind"] or head.get("key") != self.header["key"]:
            changed = _diff(head.get("key"), self.header["key"]) or ["kind"]
            if any(c.split(".")[-1] == "weights" for c in changed):
                log.warning("%s was written with other model weights (the checkpoint's fingerprint changed): it is not resumed", self.path)
            else:
                log.warning("%s was written by a different run (differs in %s): it is not resumed", self.path, ", ".join(changed[:6]))
            raise InputError(
                f"cannot resume: {self.path} was written by a different run (differs in {', '.join(changed[:6])}); run with the same "
                "options, or pass --overwrite to start over",
                path=str(self.path),
            )
        self.records = parsed[1:]
        self.resumed = True
        self._valid_bytes = good

    def open(self) -> Journal:
        """Open for appending (writing the header on a fresh journal)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.resumed:
                fh = open(self.path, "r+b")  # noqa: SIM115
                fh.truncate(self._valid_bytes)  # drop a torn last line
                fh.seek(self._valid_bytes)
                self._fh = fh
            else:
                self.records = []
                self._fh = open(self.path, "wb")  # noqa: SIM115
                self._write([self.header])
        except OSError as exc:
            raise OutputError(f"cannot write journal {self.path}: {exc.strerror or exc}", path=str(self.path)) from exc
        return self

    def _write(self, objs: Iterable[dict[str, Any]]) -> None:
        data = b"".join(json.dumps(json_ready(o), separators=(",", ":")).encode("utf-8") + b"\n" for o in objs)
        self._fh.write(data)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, records: list[dict[str, Any]]) -> None:
        """Write ``records`` (one line each) and make them durable before returning."""
        if self._fh is None:
            raise RuntimeError("Journal.append before open()")
        self._write(records)
        self.records.extend(json.loads(json.dumps(json_ready(r))) for r in records)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def finish(self) -> None:
        """Close and delete: the final output now holds everything."""
        self.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> Journal:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
