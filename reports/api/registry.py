"""Which :class:`~headlens.reports.api.result.Result` subclass reads which folder, and :func:`load`.

Each study module defines its Result subclass with a ``kind``; importing the module registers
it (:data:`~headlens.reports.api.result.RESULT_KINDS`).  A new study is one new module plus
one import line below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from headlens.probes.errors import InputError
from headlens.reports.api import ablate, capture, census, circuit, composition, design, ioi, patch, prune, sinks, verify  # noqa: F401  (importing a study module registers its Result kinds)
from headlens.reports.api.folder import table_result
from headlens.reports.api.result import MANIFEST_FILE, RESULT_KINDS, Result, read_manifest

log = logging.getLogger(__name__)

__all__ = ["load", "result_class"]


def result_class(folder: Path, manifest: dict, *, manifest_file: str = MANIFEST_FILE) -> type[Result]:
    """The Result subclass for a saved folder: its manifest's ``"result"``, else (folders written
    before results had a kind) the kind that recognises the folder (:meth:`Result.recognises`).
    ``manifest_file``: the manifest read, as errors name it."""
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
        if cls.recognises(folder, manifest):
            return cls
    raise InputError(
        f"folder={str(folder)!r} holds no headlens result that this headlens can read ({manifest_file} names no result kind);"
        f" load reads the folders and table files that results save and the CLI commands write ({', '.join(sorted(RESULT_KINDS))})",
        folder=str(folder),
    )


def load(folder: str | Path) -> Result:
    """A result saved by ``result.save(folder)`` or by the matching CLI command, read back."""
    p = Path(folder)
    single = table_result(p)  # one table file with its manifest beside it (headlens ablate / kv / detect --out FILE)
    if single is not None:
        table, manifest = single
        side = table.with_suffix("").with_name(table.stem + ".manifest.json").name
        cls = result_class(p, manifest, manifest_file=side)
        return _read(cls, p, lambda: cls.from_folder(table), lambda result: {name: table for name in result.tables})
    if not p.is_dir():
        raise InputError(
            f"folder={str(folder)!r} holds no headlens result ({'not a folder' if p.exists() else 'no such folder'})", folder=str(folder)
        )
    cls = result_class(p, read_manifest(p))
    return _read(cls, p, lambda: cls.from_folder(p), lambda result: {name: p / f"{name}.csv" for name in result.tables})


def _read(cls: type[Result], folder: Path, read: Callable[[], Result], files: Callable[[Result], dict[str, Path]]) -> Result:
    """``read()`` and the tables' saved dtypes restored; a file of the folder that is missing or
    unreadable (a partial copy, a hand edit) is one InputError naming the folder, not a traceback."""
    try:
        result = read()
        result.restore_dtypes(files(result))
    except (OSError, ValueError, KeyError) as err:  # pandas' ParserError and EmptyDataError are ValueErrors
        raise InputError(f"folder={str(folder)!r} holds a {cls.kind!r} result that cannot be read: {err}", folder=str(folder)) from err
    return result
