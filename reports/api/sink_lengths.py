"""The result of ``headlens.sinks(lengths=...)`` (``headlens sinks --lengths``): ``sink_lengths.csv``, its
figure and ``manifest.json``; the study itself runs in :func:`headlens.reports.api.sinks.sinks`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.sinks.config import LengthsConfig
from headlens.reports.api.common import config_from_record
from headlens.reports.api.result import Result, read_manifest
from headlens.reports.render.figures.sinks import lengths_figure
from headlens.reports.render.finding_lines import Findings, sink_lengths_findings
from headlens.reports.render.sinks_tables import write_tables

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["SinkLengthsResult", "SinkLengthsRun"]


@dataclass(kw_only=True)
class SinkLengthsRun:
    """The long-context study, one :func:`~headlens.analyses.sinks.lengths.run_sink_lengths` per BOS setting:
    ``table`` (every setting's rows, with ``bos``), and by setting (``"bos"``, ``"no_bos"``) its config and info."""

    table: pd.DataFrame
    configs: dict[str, LengthsConfig]
    info: dict[str, dict[str, Any]]

    @property
    def eps(self) -> float:
        """The sink threshold on alpha (every setting runs with the same)."""
        return next(iter(self.configs.values())).eps if self.configs else LengthsConfig.eps


@dataclass(kw_only=True, repr=False)
class SinkLengthsResult(Result):
    """``sink_lengths``: alpha, sink rate, first-token and value-norm shares per BOS setting,
    length, layer and head."""

    kind = "sink_lengths"
    marker_files = ("sink_lengths.csv",)

    #: The study's run (:attr:`table` is its table); a result read back from a folder has it rebuilt from the
    #: table and the manifest's ``config.sink_lengths`` and ``sink_lengths`` entries (:meth:`from_folder`).
    run: SinkLengthsRun

    def __post_init__(self) -> None:
        self.tables = {"sink_lengths": self.run.table}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The table's dtypes restored (:meth:`Result.restore_dtypes`), in the run too; ``window`` (an object
        column of key counts and None, which the CSV holds as text) back to ints and None."""
        super().restore_dtypes(files)
        table = self.tables["sink_lengths"]
        if "window" in table and table["window"].dtype == object:
            windows = [None if v is None or v == "" else int(v) for v in table["window"]]
            table = table.assign(window=pd.Series(windows, index=table.index, dtype=object))
            self.tables["sink_lengths"] = table
        self.run = replace(self.run, table=table)

    @property
    def table(self) -> pd.DataFrame:
        return self.run.table

    @property
    def eps(self) -> float:
        return self.run.eps

    def findings(self) -> Findings:
        return sink_lengths_findings(self.table, self.eps)

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return {"sink_lengths": lambda: lengths_figure(self.table, self.eps)}

    def write_tables(self, folder: Path) -> list[Path]:
        return write_tables(self.tables, folder)

    @classmethod
    def from_folder(cls, folder: str | Path) -> SinkLengthsResult:
        """The saved result, its run rebuilt: the table from its file, each setting's config and info from the manifest."""
        p = Path(folder)
        manifest = read_manifest(p)
        configs = {k: config_from_record(LengthsConfig, v) for k, v in manifest["config"]["sink_lengths"].items()}
        run = SinkLengthsRun(
            table=cls.read_tables(p)["sink_lengths"], configs=configs, info={k: manifest["sink_lengths"][k] for k in configs}
        )
        return cls(run=run, manifest=manifest)
