"""The files of a head census (written by :class:`headlens.reports.api.census.CensusResult`):
``scores.csv``, ``roles.csv``, ``heads.csv``, heatmaps, ``summary.md``, ``manifest.json``.

``roles.csv`` is the long role table (``layer, head, name, role``: one row per (head, role), the
source of truth, :func:`headlens.analyses.heads.classify.classify_heads`); ``heads.csv`` is one
row per head with the roles joined for reading (``roles``, ``;``-separated) and the strongest
detector.  Folders written before the long table have a one-row-per-head ``roles.csv`` instead:
:func:`read_roles` reads both.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from headlens.analyses.heads.classify import roles_from_wide

log = logging.getLogger(__name__)

__all__ = ["read_roles", "ROLES_FILE", "HEADS_FILE"]

ROLES_FILE = "roles.csv"
HEADS_FILE = "heads.csv"


def read_roles(folder: str | Path) -> pd.DataFrame:
    """The long role table of a census folder: ``roles.csv`` as written now, or converted from
    the one-row-per-head ``roles.csv`` of older folders."""
    table = pd.read_csv(Path(folder) / ROLES_FILE, dtype={"name": str, "role": str, "roles": str}, keep_default_na=False)
    if "role" in table.columns:
        return table
    return roles_from_wide(table)
