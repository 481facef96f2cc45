"""Writing DataFrames by file extension, atomically."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headlens.analyses.heads.classify import roles_of
from headlens.probes.errors import InputError
from headlens.probes.outputs import atomic_write

__all__ = ["TABLE_FORMATS", "check_table_path", "write_table", "read_table", "baseline_label", "roles_joined", "head_roles_table"]

TABLE_FORMATS = (".csv", ".parquet", ".json")


def check_table_path(path: str | Path) -> Path:
    p = Path(path)
    if p.suffix.lower() not in TABLE_FORMATS:
        raise InputError(f"cannot tell the table format of {path}: use a .csv, .parquet or .json file name")
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InputError("writing .parquet needs pyarrow: pip install 'headlens[parquet]', or use .csv/.json") from None
    return p


def write_table(df: pd.DataFrame, path: str | Path) -> Path:
    """CSV, Parquet or JSON (records, one object per row) by ``path``'s extension.

    A CSV holds each float in its shortest form that reads back to the same float (Python's
    ``repr``; never rounded to a few digits), so :func:`read_table` and
    :func:`headlens.reports.api.result.read_csv_table` give back exactly the numbers written."""
    p = check_table_path(path)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return atomic_write(p, lambda t: df.to_csv(t, index=False))
    if suffix == ".parquet":
        return atomic_write(p, lambda t: df.to_parquet(t, index=False))
    return atomic_write(p, lambda t: df.to_json(t, orient="records", indent=2))


def read_table(path: str | Path) -> pd.DataFrame:
    p = check_table_path(path)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(p, float_precision="round_trip")
    if suffix == ".parquet":
        return pd.read_parquet(p)
    return pd.read_json(p, orient="records")


def baseline_label(baselines: pd.Series, nd: int = 3) -> str:
    """One uniform baseline as text, or its range when layers differ (sliding-window layers)."""
    values = pd.to_numeric(baselines, errors="coerce").dropna()
    if values.empty:
        return "n/a"
    lo, hi = float(values.min()), float(values.max())
    if round(lo, nd) == round(hi, nd):
        return f"{lo:.{nd}f}"
    return f"{lo:.{nd}f} to {hi:.{nd}f} by layer"


def roles_joined(roles: pd.DataFrame, heads: pd.DataFrame, sep: str = ";") -> list[str]:
    """The human-readable roles column: for each row of ``heads`` (columns ``layer, head``), its
    roles from the long table ``roles`` (``layer, head, role``), sorted and joined by ``sep``;
    ``""`` for a head without a role.

    The only place a joined roles string is made: code that needs a head's roles asks the long
    table (:func:`headlens.analyses.heads.classify.roles_of`), never splits this.
    """
    by_head = roles_of(roles)
    return [sep.join(sorted(by_head.get((int(a), int(b)), ()))) for a, b in zip(heads["layer"], heads["head"], strict=True)]


def head_roles_table(classified) -> pd.DataFrame:
    """``heads.csv``: one row per head, ``layer, head, name, roles`` (the rendering above, ``;``)
    ``, strongest_detector, strongest_score``, from a :class:`~headlens.analyses.heads.classify.HeadRoles`."""
    heads = classified.heads.copy()
    heads.insert(3, "roles", roles_joined(classified.roles, heads))
    return heads
