"""The result of a study: its tables as DataFrames, its manifest, the files it saves and its figures.

Every study (``headlens.census``, ``headlens.sinks``, ...) returns a subclass of :class:`Result`.
``save(folder)`` writes exactly the files the matching CLI command writes (the command calls it),
:func:`headlens.reports.api.registry.load` reads any saved folder back, ``plot()`` gives the
figures the command saves as matplotlib Figures.

A subclass sets ``kind`` (the registry key, recorded as ``"result"`` in ``manifest.json``),
``marker_files`` (files that tell its folders apart when an older manifest has no ``"result"``),
and overrides what it adds: :meth:`Result._figure_makers` (one function per figure, by file
stem), :meth:`Result.texts` (``summary.md``), :meth:`Result._write_extra` (files that are not
tables, e.g. tensors) and :meth:`Result.from_folder` when it keeps more than tables.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd
from markupsafe import Markup

from headlens.probes.errors import InputError
from headlens.probes.outputs import atomic_dir, check_out_dir, make_dir, write_json, write_text
from headlens.reports.api.schema import Table, mismatches, schema_of
from headlens.reports.render.figures.common import save_figure
from headlens.reports.render.finding_lines import Findings
from headlens.reports.render.page.html import environment
from headlens.reports.render.tables import write_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from typing_extensions import Self

log = logging.getLogger(__name__)

__all__ = ["Result", "RESULT_KINDS", "MANIFEST_FILE", "TEXT_COLUMNS", "DTYPES_KEY", "read_csv_table", "table_dtypes", "with_dtypes"]

MANIFEST_FILE = "manifest.json"

#: Every Result subclass with a ``kind``, by kind (filled as subclasses are defined).
RESULT_KINDS: dict[str, type[Result]] = {}

#: Columns read back as text, never numbers or NaN: a head name "1.10" stays "1.10", a head
#: without a role keeps ``""``.
TEXT_COLUMNS = ("name", "role", "roles", "detector", "evidence", "variant", "strongest_detector", "reason", "token", "text")

#: Rows of each table shown by ``_repr_html_``.
HTML_ROWS = 5
#: The notebook view's template (reports/render/page/templates/).
VIEW_TEMPLATE = "result_view.html.j2"

#: The manifest's record of each table's column dtypes (written by :meth:`Result.save`, restored by ``load``).
DTYPES_KEY = "table_dtypes"

#: dtypes whose columns are read back as text: an empty cell is ``""``, "1.10" stays "1.10".
TEXT_DTYPES = ("object", "str", "string")


def read_csv_table(path: str | Path, text_columns: tuple[str, ...] = TEXT_COLUMNS) -> pd.DataFrame:
    """A CSV written by :func:`headlens.reports.render.tables.write_table`, read back with its text columns as text
    (an empty cell of a text column is ``""``, of any other column NaN)."""
    try:
        header = pd.read_csv(path, nrows=0).columns
    except pd.errors.EmptyDataError:  # an empty table without columns
        return pd.DataFrame()
    text = [c for c in header if c in text_columns]
    na = {c: [""] for c in header if c not in text}
    return pd.read_csv(path, dtype={c: str for c in text}, keep_default_na=False, na_values=na, float_precision="round_trip")


@dataclass(kw_only=True, repr=False)
class Result:
    """Tables (DataFrames named as their CSV file stems) and the manifest of one study run.

    Subclasses are ``@dataclass(kw_only=True, repr=False)`` so they keep the short ``repr``.
    """

    kind: ClassVar[str] = ""
    #: Files whose presence marks a folder of this kind when its manifest has no ``"result"``.
    marker_files: ClassVar[tuple[str, ...]] = ()
    #: Formats each figure is saved in.
    figure_formats: ClassVar[tuple[str, ...]] = ("png", "svg")

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def schema(cls) -> dict[str, Table]:
        """This kind's tables as :mod:`headlens.reports.api.schema` declares them: by table name, its file,
        what a row is and its columns (name, dtype, meaning, when present)."""
        return schema_of(cls.kind)

    def schema_mismatches(self) -> list[str]:
        """How this result's tables differ from :meth:`schema` (``[]``: the same columns, order and dtypes)."""
        return mismatches(self.kind, {name: {str(c): str(d) for c, d in t.dtypes.items()} for name, t in self.tables.items()})

    @classmethod
    def recognises(cls, folder: Path, manifest: dict[str, Any]) -> bool:
        """Whether ``folder``, whose manifest names no result kind (written before results had one),
        holds this kind: all of :attr:`marker_files` are there."""
        return bool(cls.marker_files) and all((folder / name).is_file() for name in cls.marker_files)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind"):  # a subclass that sets its own kind (not one that inherits it)
            RESULT_KINDS[cls.kind] = cls

    # -- tables ---------------------------------------------------------------------------
    def __getitem__(self, name: str) -> pd.DataFrame:
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"no table {name!r} in this {self.kind} result; tables: {', '.join(self.tables) or 'none'}") from None

    @property
    def model_name(self) -> str | None:
        """The model as it was asked for (``"demo"``, a folder, a Hub id), from the manifest."""
        model = self.manifest.get("model")
        return model.get("model") if isinstance(model, dict) else None

    # -- figures --------------------------------------------------------------------------
    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        """One function per figure the command saves, by file stem (no figure by default)."""
        return {}

    def _label(self) -> str:
        return f"{self.kind} result" if self.kind else type(self).__name__

    def _missing(self, exc: KeyError) -> str:
        """What a figure lacked, in words: the KeyError's own sentence, or the key it missed."""
        what = str(exc.args[0]) if exc.args else ""
        if " " in what:
            return what
        return f"it holds no {what!r} (tables: {', '.join(self.tables) or 'none'})" if what else "a table is missing"

    def _available_figures(self) -> tuple[dict[str, Callable[[], Figure]], str]:
        """The figure makers, and why there are none when the tables they draw from are missing."""
        try:
            return self._figure_makers(), ""
        except KeyError as exc:  # a table (or manifest entry) the figures draw from is not there
            return {}, self._missing(exc)

    def figure_names(self) -> list[str]:
        """The file stems of the figures (:meth:`plot`'s names)."""
        return list(self._available_figures()[0])

    def figures(self) -> dict[str, Figure]:
        """Every figure the command saves, by file stem, as matplotlib Figures."""
        return {stem: make() for stem, make in self._available_figures()[0].items()}

    def plot(self, name: str | None = None) -> Figure:
        """One figure: ``name`` is its file stem (``result.plot("heatmap_induction")``); the first
        figure when ``name`` is None.  A name it has not, or a result without the tables a figure
        is drawn from: one-line :class:`~headlens.probes.errors.InputError` naming the figures there are."""
        makers, why = self._available_figures()
        asked = f"name={name!r}: " if name is not None else ""
        if not makers:
            because = f": {why}" if why else ""
            raise InputError(f"{asked}this {self._label()} has no figure{because}", name=name)
        if name is None:
            name = next(iter(makers))
        if name not in makers:
            raise InputError(f"{asked}no such figure in this {self._label()}; figures: {', '.join(makers)}", name=name)
        try:
            return makers[name]()
        except KeyError as exc:
            raise InputError(f"{asked}this {self._label()} cannot draw {name!r}: {self._missing(exc)}", name=name) from None

    # -- files ----------------------------------------------------------------------------
    def texts(self) -> dict[str, str]:
        """Text files the command writes besides tables, by file name (e.g. ``summary.md``)."""
        return {}

    def write_tables(self, folder: Path) -> list[Path]:
        """Each table as ``folder/<name>.csv``, atomically."""
        return [write_table(table, folder / f"{name}.csv") for name, table in self.tables.items()]

    def _write_extra(self, folder: Path) -> None:
        """Files that are neither tables, figures, texts nor the manifest (none by default)."""

    def _manifest_out(self) -> dict[str, Any]:
        kept = {k: v for k, v in self.manifest.items() if k not in ("result", DTYPES_KEY)}
        return {"result": self.kind, **kept, DTYPES_KEY: table_dtypes(self.tables)}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """Give each table read back from its CSV in ``files`` (by table name) its columns' dtypes: those
        :meth:`schema` declares, and where the manifest recorded this run's own (a category's categories,
        an int column that held a missing value) the recorded ones; text columns re-read as text,
        numbers, booleans and categories cast back; a column that cannot take its dtype stays as read."""
        recorded = self.manifest.get(DTYPES_KEY)
        recorded = recorded if isinstance(recorded, dict) else {}
        declared = self.schema()
        for name, table in self.tables.items():
            spec = declared.get(name)
            columns = {c.name: c.dtype for c in spec.columns if c.dtype != "category"} if spec is not None else {}
            own = recorded.get(name)
            columns.update(own if isinstance(own, dict) else {})
            path = files.get(name)
            if columns and path is not None and path.suffix.lower() == ".csv" and path.is_file():
                self.tables[name] = with_dtypes(table, columns, path)

    def write(self, folder: str | Path, *, formats: tuple[str, ...] | None = None) -> Path:
        """Write every file into ``folder`` (created if needed), each atomically, the manifest last;
        files already there that this result does not write are left alone.  :meth:`save` is the
        checked, all-or-nothing form.  ``formats``: the figures' (default :attr:`figure_formats`)."""
        out = make_dir(folder)  # through a symlinked folder too
        self.write_tables(out)
        self._write_extra(out)
        for stem, make in self._figure_makers().items():
            save_figure(make(), out / stem, formats or self.figure_formats)
        for name, text in self.texts().items():
            write_text(out / name, text)
        write_json(out / MANIFEST_FILE, self._manifest_out())
        return out

    def save(self, folder: str | Path, *, overwrite: bool = False) -> Path:
        """Write the files the CLI command writes to ``folder``: the tables as CSV, the figures
        (PNG and SVG), text files and ``manifest.json``.

        A new (or empty) folder appears whole or not at all; into a folder holding files
        (``overwrite=True``) each file is replaced atomically and files this result does not
        write stay.  Raises :class:`~headlens.probes.errors.OutputExistsError` for a non-empty
        folder without ``overwrite``.
        """
        out = check_out_dir(folder, overwrite=overwrite)
        if out.is_dir() and any(out.iterdir()):
            return self.write(out)
        with atomic_dir(out) as tmp:
            self.write(tmp)
        return out

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        """Every ``*.csv`` in ``folder``, by file stem."""
        return {p.stem: read_csv_table(p) for p in sorted(folder.glob("*.csv"))}

    @classmethod
    def from_folder(cls, folder: str | Path) -> Self:
        """The result saved in ``folder`` (by :meth:`save` or the CLI command)."""
        p = Path(folder)
        return cls(tables=cls.read_tables(p), manifest=read_manifest(p))

    # -- display --------------------------------------------------------------------------
    def _shapes(self) -> str:
        return ", ".join(f"{name} {t.shape[0]}x{t.shape[1]}" for name, t in self.tables.items()) or "no table"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} model={self.model_name!r}: {self._shapes()}>"

    def findings(self) -> Findings:
        """What the study found, in the lines its command prints (``lines``) and its notes
        (``warnings``): roles by head, the strongest effects with intervals, verdicts.  Empty
        by default; each study words its own (:mod:`headlens.reports.render.finding_lines`)."""
        return Findings()

    def _repr_html_(self) -> str:
        """The notebook view: the findings first (the command's words), the notes, then each table collapsed."""
        found = self.findings()
        tables = [
            {
                "name": name,
                "rows": table.shape[0],
                "columns": table.shape[1],
                "html": Markup(table.head(HTML_ROWS).to_html(index=False, max_cols=12, border=0)),
            }
            for name, table in self.tables.items()
        ]
        return (
            environment()
            .get_template(VIEW_TEMPLATE)
            .render(
                title=type(self).__name__,
                model=str(self.model_name),
                findings=list(found.lines),
                warnings=list(found.warnings),
                empty="nothing to report: no table" if not self.tables else f"the first {HTML_ROWS} rows of each table:",
                tables=tables,
            )
        )


def read_manifest(folder: Path) -> dict[str, Any]:
    """``folder/manifest.json`` as a dict; a one-line error naming ``folder`` when it is missing or unreadable."""
    path = folder / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"folder={str(folder)!r} holds no headlens result (no {MANIFEST_FILE})", folder=str(folder)) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"folder={str(folder)!r}: cannot read {MANIFEST_FILE} ({exc})", folder=str(folder)) from None
    if not isinstance(manifest, dict):
        raise InputError(f"folder={str(folder)!r}: {MANIFEST_FILE} is not a headlens manifest", folder=str(folder))
    return manifest


def table_dtypes(tables: dict[str, pd.DataFrame]) -> dict[str, dict[str, Any]]:
    """Each table's column dtypes, JSON-ready: a dtype's name, or for a category its categories and order."""
    out: dict[str, dict[str, Any]] = {}
    for name, table in tables.items():
        columns: dict[str, Any] = {}
        for column, dtype in table.dtypes.items():
            if isinstance(dtype, pd.CategoricalDtype):
                columns[str(column)] = {"dtype": "category", "categories": dtype.categories.tolist(), "ordered": bool(dtype.ordered)}
            else:
                columns[str(column)] = str(dtype)
        out[name] = columns
    return out


def with_dtypes(table: pd.DataFrame, columns: dict[str, Any], path: Path) -> pd.DataFrame:
    """``table`` (read from the CSV ``path``) with the dtypes ``columns`` recorded (:func:`table_dtypes`)."""
    out = table.copy()
    kinds = {c: (d.get("dtype") if isinstance(d, dict) else d) for c, d in columns.items() if c in out.columns}
    text = [c for c, kind in kinds.items() if kind in TEXT_DTYPES or kind == "category"]
    raw = pd.read_csv(path, usecols=text, dtype=str, keep_default_na=False) if text else pd.DataFrame()
    for column, kind in kinds.items():
        try:
            if kind == "category":
                spec = columns[column]
                cats = spec.get("categories") or []
                values = raw[column] if all(isinstance(c, str) for c in cats) else out[column]
                out[column] = pd.Categorical(values, categories=cats, ordered=bool(spec.get("ordered")))
            elif kind in TEXT_DTYPES:
                out[column] = raw[column].astype(kind)
            elif kind == "bool" and out[column].isin([True, False]).all():
                out[column] = out[column].astype(bool)
            elif isinstance(kind, str) and kind != "bool" and kind != str(out[column].dtype):
                out[column] = out[column].astype(kind)
        except (ValueError, TypeError, KeyError) as exc:
            log.debug("%s: column %s stays %s (%s)", path, column, out[column].dtype, exc)
    return out
