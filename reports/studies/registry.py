"""Which :class:`~headlens.reports.studies.result.Result` subclass reads which folder, and :func:`load`.

Each study module defines its Result subclass with a ``kind``; importing the module registers
it (:data:`~headlens.reports.studies.result.RESULT_KINDS`).  A new study is one new module plus
one import line below.
"""

from __future__ import annotations

import logging
from pathlib import Path

from headlens.probes.errors import InputError
from headlens.reports.studies import ablate, capture, census, design, patch, prune, sinks, verify  # noqa: F401  (importing a study module registers its Result kinds)
from headlens.reports.studies.folder import table_result
from headlens.reports.studies.result import MANIFEST_FILE, RESULT_KINDS, Result, read_manifest

log = logging.getLogger(__name__)

__all__ = ["load", "result_class"]


def result_class(folder: Path, manifest: dict) -> type[Result]:
    """The Result subclass for a saved folder: its manifest's ``"result"``, else (folders written
    before results had a kind) the kind whose marker files are all there."""
    kind = manifest.get("result")
    if kind is not None:
        if kind not in RESULT_KINDS:
            raise InputError(
                f"folder={str(folder)!r} holds a {kind!r} result, which this headlens cannot read;"
                f" it reads {', '.join(sorted(RESULT_KINDS))}",
                folder=str(folder),
            )
        return RESULT_KINDS[kind]
    for cls in RESULT_KINDS.values():
        if cls.marker_files and all((folder / name).is_file() for name in cls.marker_files):
            return cls
    raise InputError(
        f"folder={str(folder)!r} holds no headlens result that this headlens can read ({MANIFEST_FILE} names no result kind)",
        folder=str(folder),
    )


def load(folder: str | Path) -> Result:
    """A result saved by ``result.save(folder)`` or by the matching CLI command, read back."""
    p = Path(folder)
    single = table_result(p)  # one table file with its manifest beside it (headlens ablate / kv --out FILE)
    if single is not None:
        return result_class(p, single[1]).from_folder(single[0])
    if not p.is_dir():
        raise InputError(
            f"folder={str(folder)!r} holds no headlens result ({'not a folder' if p.exists() else 'no such folder'})", folder=str(folder)
        )
    return result_class(p, read_manifest(p)).from_folder(p)
