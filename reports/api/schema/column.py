"""The column schema's two types: :class:`Column` (name, dtype, one-line meaning) and :class:`Table`.

A dtype is written as pandas names it (``str(df[column].dtype)``): ``int64``, ``float64``, ``bool``,
``str`` (text), ``object`` (mixed: e.g. an int or None), ``Int64`` (an integer that may be missing),
``category``.  Light: the standard library only, so the docs generator reads it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Column", "Table", "table", "DTYPES"]

#: The dtypes a schema may name.
DTYPES = ("int64", "float64", "bool", "str", "object", "Int64", "category")


@dataclass(frozen=True)
class Column:
    """One column of a result's table."""

    name: str
    dtype: str
    meaning: str
    #: "" when every run has the column; else the setting or case that adds it (``"with attribution=True"``)
    when: str = ""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"column {self.name}: dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")

    @property
    def optional(self) -> bool:
        return bool(self.when)


@dataclass(frozen=True)
class Table:
    """One table of a result: ``result.tables[name]``, saved as ``file``; one row per ``row``."""

    name: str
    file: str
    row: str
    columns: tuple[Column, ...]
    #: "" when every run has the table; else the setting or case that adds it
    when: str = ""

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def dtypes(self) -> dict[str, str]:
        return {c.name: c.dtype for c in self.columns}

    @property
    def required(self) -> list[str]:
        return [c.name for c in self.columns if not c.optional]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"table {self.name} has no column {name!r}; columns: {', '.join(self.names)}")


def table(name: str, file: str, row: str, *columns: Column | tuple[str, str, str] | tuple[str, str, str, str], when: str = "") -> Table:
    """A :class:`Table` from columns written as ``Column`` or ``(name, dtype, meaning[, when])``."""
    cols = tuple(c if isinstance(c, Column) else Column(*c) for c in columns)
    seen = [c.name for c in cols]
    if len(set(seen)) != len(seen):
        raise ValueError(f"table {name}: a column named twice in {seen}")
    return Table(name=name, file=file, row=row, columns=cols, when=when)
