"""The column schema: every table of every study's Result, its columns with their dtypes and meanings.

One place says what a Result's tables hold: ``SCHEMAS[kind][table]`` is a
:class:`~headlens.reports.api.schema.column.Table` (its file, what one row is, its columns), each
column a :class:`~headlens.reports.api.schema.column.Column` (``name``, ``dtype`` as pandas names it,
``meaning`` in one line, ``when``: "" if every run has it, else the setting that adds it).  ``kind``
is the Result's ``kind`` (``headlens.CensusResult.kind == "census"``); ``Result.schema()`` gives its
tables.  A Result read back from files (``headlens.load``) takes its columns' dtypes from here; the
docs' column tables are generated from here; tests/reports/api/test_schema.py checks that the
tables every study builds on the demo model have exactly these columns and dtypes.

A study's columns are one module here (``census``, ``sinks``, ``ablation``, ``patching``, ``design``,
``capture``), each a ``TABLES: dict[kind, dict[table, Table]]``; a new study is one new module and one
line below.  Light (the standard library only): reading it imports no torch or pandas.
"""

from __future__ import annotations

from collections.abc import Mapping

from headlens.reports.api.schema import ablation, capture, census, design, ioi, patching, sinks
from headlens.reports.api.schema.column import DTYPES, Column, Table

__all__ = ["SCHEMAS", "Column", "Table", "DTYPES", "schema_of", "mismatches"]

#: kind -> table name -> Table, for every Result kind.
SCHEMAS: dict[str, dict[str, Table]] = {
    **census.TABLES,
    **sinks.TABLES,
    **ablation.TABLES,
    **patching.TABLES,
    **design.TABLES,
    **capture.TABLES,
    **ioi.TABLES,
}


def schema_of(kind: str) -> dict[str, Table]:
    """The tables of the Result ``kind`` (``{}`` for a kind without tables)."""
    return SCHEMAS.get(kind, {})


def mismatches(kind: str, dtypes: Mapping[str, Mapping[str, str]]) -> list[str]:
    """What differs between tables (``{table: {column: dtype}}``, as ``str(df[c].dtype)`` names them) and
    the schema of ``kind``: an unknown table or column, a missing required column, a column out of the
    schema's order, another dtype.  ``[]`` when they agree."""
    tables = schema_of(kind)
    out = []
    for name, columns in dtypes.items():
        spec = tables.get(name)
        if spec is None:
            out.append(f"{kind}: table {name!r} is not in the schema (tables: {', '.join(tables) or 'none'})")
            continue
        known = spec.dtypes
        extra = [c for c in columns if c not in known]
        missing = [c for c in spec.required if c not in columns]
        out += [f"{kind}.{name}: column {c!r} is not in the schema" for c in extra]
        out += [f"{kind}.{name}: required column {c!r} is missing" for c in missing]
        order = [c for c in spec.names if c in columns]
        if not extra and list(columns) != order:
            out.append(f"{kind}.{name}: columns {list(columns)} are not in the schema's order {order}")
        out += [
            f"{kind}.{name}.{c}: dtype {d} but the schema says {known[c]}"
            for c, d in columns.items()
            if c in known and known[c] != (d if d != "string" else "str")
        ]
    return out
