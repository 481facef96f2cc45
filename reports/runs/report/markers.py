"""Stage markers and resume keys: what makes a finished stage reusable.

A stage writes its files, then (last, atomically) ``<stage>/stage.json``: its status and its
*key* (the model with its weights' fingerprint, the stage's configuration, :data:`REPORT_VERSION`).
A rerun reuses a stage whose marker says ``done`` with the same key.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

from headlens.probes.config import json_ready
from headlens.probes.errors import HeadlensError
from headlens.probes.loading import checkpoint_fingerprint, weights_fingerprint
from headlens.probes.outputs import write_json
from headlens.reports.api.journal import Journal

log = logging.getLogger(__name__)

__all__ = [
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "MARKER",
    "JOURNAL",
    "model_identity",
    "model_fingerprint",
    "json_key",
    "key_hash",
    "one_line",
    "now_utc",
    "read_marker",
    "write_marker",
    "clear_stage_dir",
    "open_journal",
]

REPORT_FORMAT = "headlens.report"
#: Bumped when a stage's outputs change meaning: every stage is then recomputed.
REPORT_VERSION = 2  # 2: quick stages marked as smoke tests in their figures and summaries (issue 20)
MARKER = "stage.json"
JOURNAL = "journal.jsonl"


def model_identity(source: str, path: str, revision: str | None) -> dict[str, Any]:
    """What names the model: a report folder belongs to exactly one."""
    return {"source": source, "path": path, "revision": revision}


def model_fingerprint(source: str, path: str, revision: str | None = None, loaded: Any = None) -> str:
    """The weights' one fingerprint (:func:`headlens.probes.loading.weights_fingerprint`): full-file
    sha256 for local checkpoints, so retrained weights, even middle tensors only, invalidate stages."""
    return weights_fingerprint(loaded) if loaded is not None else checkpoint_fingerprint(source, path, revision=revision)


def json_key(obj: Any) -> Any:
    return json.loads(json.dumps(json_ready(obj), sort_keys=True, default=str))


def key_hash(key: Any) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def one_line(exc: BaseException) -> str:
    if isinstance(exc, HeadlensError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def read_marker(stage_dir: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads((stage_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) and obj.get("format") == f"{REPORT_FORMAT}.stage" else None


def write_marker(stage_dir: Path, marker: dict[str, Any]) -> None:
    write_json(stage_dir / MARKER, marker)


def clear_stage_dir(stage_dir: Path) -> None:
    """Remove a stage's files (the marker first), keeping its journal for a resumed sweep."""
    (stage_dir / MARKER).unlink(missing_ok=True)
    if not stage_dir.is_dir():
        return
    for p in stage_dir.iterdir():
        if p.name == JOURNAL:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def open_journal(path: Path, kind: str, key: dict[str, Any]) -> Any:
    """A journal that resumes a sweep of the same key, or starts afresh."""
    try:
        return Journal(path, kind, key, resume=True, overwrite=True)
    except HeadlensError as exc:
        log.warning("discarding journal %s, the stage starts over: %s", path, exc)
        path.unlink(missing_ok=True)
        return Journal(path, kind, key, resume=False, overwrite=True)
