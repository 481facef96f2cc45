"""How results that the base :class:`Result` does not save as it does are saved.

* :class:`FolderResult`: a folder whose manifest lists its files by path (``prune``, ``gqa``,
  ``projections``): the paths are those of the folder saved to, not of the temporary folder
  :meth:`Result.save` fills first;
* :class:`TableFileResult`: one table file with its manifest and figures beside it (``ablate``, ``kv``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from headlens.probes.errors import InputError
from headlens.probes.outputs import check_out_dir, check_out_file, make_dir, write_json
from headlens.reports.api.result import TEXT_COLUMNS, Result, read_csv_table
from headlens.reports.render.figures.common import save_figure
from headlens.reports.render.tables import TABLE_FORMATS, read_table, write_table

if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger(__name__)

__all__ = ["FolderResult", "TableFileResult", "table_of_manifest", "table_result"]


@dataclass(kw_only=True, repr=False)
class FolderResult(Result):
    """:meth:`files` (the manifest's ``<section>.files``) is filled in with the folder written to."""

    #: the manifest's section that holds ``files``
    section: ClassVar[str] = ""

    _target: Path | None = field(default=None, init=False)

    def files(self, folder: Path) -> dict[str, Any]:
        """The manifest's record of the files written into ``folder``."""
        return {}

    def save(self, folder: str | Path, *, overwrite: bool = False) -> Path:
        self._target = Path(folder)
        try:
            return super().save(folder, overwrite=overwrite)
        finally:
            self._target = None

    def _manifest_out(self) -> dict[str, Any]:
        out = super()._manifest_out()
        if self._target is not None and isinstance(out.get(self.section), dict):
            out[self.section] = {**out[self.section], "files": self.files(self._target)}
        return out

    def write(self, folder: str | Path) -> Path:
        keep = self._target
        self._target = keep or Path(folder)
        try:
            return super().write(folder)
        finally:
            self._target = keep


@dataclass(kw_only=True, repr=False)
class TableFileResult(Result):
    """A result saved as one table file (``.csv``, ``.parquet`` or ``.json``) with
    ``<stem>.manifest.json`` and each figure as ``<stem>.<figure>.png/.svg`` beside it
    (``headlens ablate --out FILE``, ``headlens kv --out FILE``).  Saved to a folder, the table
    is ``<folder>/<table_name>.csv``."""

    #: the table's name (its key in ``tables``) and its file stem in a folder
    table_name: ClassVar[str] = ""
    #: the manifest's section whose ``files`` lists the paths written ("" for none)
    section: ClassVar[str] = ""
    #: the figures' stems (each saved as ``<table stem>.<figure>.png/.svg``), as :meth:`_figure_makers` names them
    figure_stems: ClassVar[tuple[str, ...]] = ()
    #: columns read back from a CSV as text
    text_columns: ClassVar[tuple[str, ...]] = TEXT_COLUMNS
    #: the field of the subclass' typed ``run`` that holds the table: :attr:`tables` derive from it, and
    #: :meth:`restore_dtypes` puts the restored table back into it
    run_table: ClassVar[str] = "table"

    def __post_init__(self) -> None:
        run = getattr(self, "run", None)  # the subclass' typed run (None: a result that holds its tables alone)
        if run is not None:
            self.tables = {self.table_name: getattr(run, self.run_table)}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The table's dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        run = getattr(self, "run", None)
        if run is not None:
            self.run = replace(run, **{self.run_table: self.tables[self.table_name]})

    @property
    def table(self) -> pd.DataFrame:
        return self.tables[self.table_name]

    @classmethod
    def table_file(cls, path: str | Path) -> Path:
        """The table file of a save target: ``path`` itself for a table file name, else ``path/<table_name>.csv``."""
        p = Path(path)
        return p if p.suffix.lower() in TABLE_FORMATS else p / f"{cls.table_name}.csv"

    @classmethod
    def sidecars(cls, out: str | Path) -> dict[str, Path]:
        """The files written beside the table ``out``: ``manifest``, and ``<figure>_<format>`` per figure."""
        stem = Path(out).with_suffix("")
        side = {"manifest": stem.with_name(stem.name + ".manifest.json")}
        for fig in cls.figure_stems:
            for fmt in cls.figure_formats:
                side[f"{fig}_{fmt}"] = stem.with_name(f"{stem.name}.{fig}.{fmt}")
        return side

    def write(self, folder: str | Path) -> Path:
        """The files for the table ``folder`` (a table file name, or a folder): the table, the
        figures, then the manifest (each atomically).  Returns the table's path."""
        out = self.table_file(folder)
        side = self.sidecars(out)
        manifest = self._manifest_out()
        if self.section and isinstance(manifest.get(self.section), dict):
            manifest[self.section] = {**manifest[self.section], "files": {"table": str(out), **{k: str(v) for k, v in side.items()}}}
        write_table(self.table, out)
        stem = out.with_suffix("")
        makers = self._figure_makers()
        for fig in self.figure_stems:
            save_figure(makers[fig](), stem.with_name(f"{stem.name}.{fig}"), self.figure_formats)
        write_json(side["manifest"], manifest)
        return out

    def save(self, folder: str | Path, *, overwrite: bool = False) -> Path:
        """Write the table and the files beside it as the CLI command does: ``folder`` is the table
        file (``.csv``, ``.parquet``, ``.json``) or a folder (``<folder>/<table_name>.csv``).
        Raises :class:`~headlens.probes.errors.OutputExistsError` for a file already there without
        ``overwrite`` (or a file where the folder would be), :class:`~headlens.probes.errors.OutputError`
        when the folder cannot be made; nothing is written then.  Returns the table's path."""
        out = self.table_file(folder)
        if out != Path(folder):  # saved into a folder
            check_out_dir(folder, overwrite=True)  # files there that this result does not write stay
        for path in (out, *self.sidecars(out).values()):
            check_out_file(path, overwrite=overwrite)
        make_dir(out.parent)  # through a symlinked folder too (a dangling one's is made)
        return self.write(out)

    @classmethod
    def from_folder(cls, folder: str | Path) -> Self:
        """The result saved at ``folder``: its table file, its manifest, or the folder it was saved into."""
        p = Path(folder)
        if p.name.endswith(".manifest.json"):
            p = table_of_manifest(p)
        table = cls.table_file(p)
        manifest_file = table.with_suffix("").with_name(table.stem + ".manifest.json")
        if not (table.is_file() and manifest_file.is_file()):
            raise InputError(
                f"folder={str(folder)!r} holds no {cls.kind} result (no {table.name} with {manifest_file.name})", folder=str(folder)
            )
        try:
            manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"folder={str(folder)!r}: cannot read {manifest_file.name} ({exc})", folder=str(folder)) from None
        frame = read_csv_table(table, cls.text_columns) if table.suffix.lower() == ".csv" else read_table(table)
        return cls.from_table(frame, manifest)

    @classmethod
    def from_table(cls, table: pd.DataFrame, manifest: dict[str, Any]) -> Self:
        """The result of a table read back and its manifest (a subclass with a run rebuilds it from them)."""
        return cls(tables={cls.table_name: table}, manifest=manifest)


def table_of_manifest(manifest: Path) -> Path:
    """The table file a ``<stem>.manifest.json`` sits beside (``<stem>.csv`` when none is there)."""
    stem = manifest.name.removesuffix(".manifest.json")
    found = [manifest.parent / f"{stem}{ext}" for ext in TABLE_FORMATS if (manifest.parent / f"{stem}{ext}").is_file()]
    return found[0] if found else manifest.parent / f"{stem}.csv"


def table_result(path: Path) -> tuple[Path, dict[str, Any]] | None:
    """``(table file, manifest)`` when ``path`` is a :class:`TableFileResult`'s table file, its
    ``<stem>.manifest.json``, or a folder one was saved into (no ``manifest.json``, one
    ``<stem>.manifest.json``); ``None`` otherwise."""
    if path.is_dir():
        if (path / "manifest.json").exists():
            return None
        sidecar = sorted(path.glob("*.manifest.json"))
        if len(sidecar) != 1:
            return None
        table = table_of_manifest(sidecar[0])
    elif path.name.endswith(".manifest.json"):
        table = table_of_manifest(path)
    elif path.suffix.lower() in TABLE_FORMATS:
        table = path
    else:
        return None
    manifest_file = table.with_suffix("").with_name(table.stem + ".manifest.json")
    if not manifest_file.is_file():
        return None
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"folder={str(path)!r}: cannot read {manifest_file.name} ({exc})", folder=str(path)) from None
    return table, manifest
