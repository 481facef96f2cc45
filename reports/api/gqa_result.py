"""The result of :func:`headlens.reports.api.design.gqa` (``headlens gqa``), and the file helpers the design
studies' results share (:mod:`headlens.reports.api.design`: projections and kv)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.design.gqa import GQAConfig, GQARun
from headlens.reports.api.common import config_from_record
from headlens.reports.api.folder import FolderResult
from headlens.reports.api.result import TEXT_COLUMNS, read_csv_table, read_manifest
from headlens.reports.render.figures.design import loss_vs_cache_figure
from headlens.reports.render.finding_lines import Findings, gqa_findings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["GQAResult", "DESIGN_TEXT_COLUMNS", "KV_TEXT_COLUMNS", "SUMMARY_FILE", "figure_files", "basis_of", "read_text"]

#: Columns of the design tables read back as text (a formula, a grouping, roles lost).
DESIGN_TEXT_COLUMNS = (*TEXT_COLUMNS, "formula", "grouping", "kind", "lost", "gained", "roles_before", "roles_after")
#: ... and in the tables whose ``kv_heads`` is text ("4,4,2" per layer; "0+1 2+3" groups)
KV_TEXT_COLUMNS = (*DESIGN_TEXT_COLUMNS, "kv_heads")
SUMMARY_FILE = "summary.md"
GQA_TABLES = ("summary", "heads", "groups", "comparison", "kv", "task")
GQA_FIGURE = "gqa_loss_vs_cache"


def figure_files(folder: Path, stem: str, formats: tuple[str, ...]) -> list[str]:
    """A figure's file paths, one per format (a manifest's ``files``)."""
    return [str(folder / f"{stem}.{fmt}") for fmt in formats]


def basis_of(summary_md: str) -> str:
    """What the loss was measured on, as ``summary.md`` says it (``Loss on <basis>.``)."""
    line = next((ln for ln in summary_md.splitlines() if ln.startswith("Loss on ")), "")
    return line.removeprefix("Loss on ").removesuffix(".")


def read_text(folder: Path, name: str) -> str:
    """``folder/name`` as text, ``""`` when there is none."""
    path = folder / name
    return path.read_text(encoding="utf-8") if path.is_file() else ""


@dataclass(kw_only=True, repr=False)
class GQAResult(FolderResult):
    """``summary`` (loss, KV cache and JS per grouping and group size), ``heads`` (JS per head),
    ``groups``, ``comparison`` (similar vs adjacent, both groupings run), ``kv`` and ``task``
    (the task's logit difference, with a task)."""

    kind = "gqa"
    section = "gqa"
    marker_files = ("summary.csv", "heads.csv", "groups.csv", "kv.csv")

    #: The analysis' run (summary, heads, groups, comparison, task and config); read back from a folder it is
    #: rebuilt from the tables and the manifest's ``config.gqa`` (:meth:`from_folder`).
    run: GQARun
    #: ``kv``: the model's KV cache per variant (:func:`~headlens.analyses.design.kv.kv_cache_table`)
    kv_cache: pd.DataFrame
    #: What the loss is measured on: the evaluation set's description (``EvalSet.describe()``, the manifest's ``gqa.data``).
    data: dict[str, Any]
    #: ``summary.md`` as written
    summary_md: str = ""

    def __post_init__(self) -> None:
        run = self.run
        found = {"summary": run.summary, "heads": run.heads, "groups": run.groups, "comparison": run.comparison, "kv": self.kv_cache}
        found["task"] = run.task
        self.tables = {name: table for name in GQA_TABLES if (table := found[name]) is not None}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        t = self.tables
        self.run = replace(
            self.run, summary=t["summary"], heads=t["heads"], groups=t["groups"], comparison=t.get("comparison"), task=t.get("task")
        )
        self.kv_cache = t["kv"]

    @property
    def basis(self) -> str:
        """What the loss is measured on (``16 windows x 128 tokens ... of the built-in evaluation text``)."""
        return basis_of(self.summary_md)

    @property
    def summary(self) -> pd.DataFrame:
        return self.run.summary

    @property
    def heads(self) -> pd.DataFrame:
        return self.run.heads

    @property
    def groups(self) -> pd.DataFrame:
        return self.run.groups

    @property
    def comparison(self) -> pd.DataFrame | None:
        return self.run.comparison

    @property
    def kv(self) -> pd.DataFrame:
        return self.kv_cache

    @property
    def task(self) -> pd.DataFrame | None:
        return self.run.task

    def findings(self) -> Findings:
        return gqa_findings(self.run.summary, self.run.comparison, basis=self.basis, n_items=self.data.get("n_windows"))

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return {GQA_FIGURE: lambda: loss_vs_cache_figure(self.summary, title=f"GQA what-if: {self.model_name}")}

    def texts(self) -> dict[str, str]:
        return {SUMMARY_FILE: self.summary_md}

    def files(self, folder: Path) -> dict[str, Any]:
        return {
            **{name: str(folder / f"{name}.csv") for name in self.tables},
            "figures": figure_files(folder, GQA_FIGURE, self.figure_formats),
        }

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        text = {n: KV_TEXT_COLUMNS if n in ("kv", "groups") else DESIGN_TEXT_COLUMNS for n in GQA_TABLES}
        return {n: read_csv_table(folder / f"{n}.csv", text[n]) for n in GQA_TABLES if (folder / f"{n}.csv").is_file()}

    @classmethod
    def from_folder(cls, folder: str | Path) -> GQAResult:
        """The saved result, its run rebuilt: the tables from their files, the config and the data's description from the manifest."""
        p = Path(folder)
        manifest, t = read_manifest(p), cls.read_tables(p)
        config = config_from_record(GQAConfig, manifest["config"]["gqa"])
        run = GQARun(
            summary=t["summary"], heads=t["heads"], groups=t["groups"], task=t.get("task"), comparison=t.get("comparison"), config=config
        )
        data = manifest["gqa"]["data"]
        return cls(run=run, kv_cache=t["kv"], data=data, manifest=manifest, summary_md=read_text(p, SUMMARY_FILE))
