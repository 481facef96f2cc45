"""``headlens.ioi``: Wang et al. 2022's IOI head classes on a model, each named by its own evidence.

The analysis is :mod:`headlens.analyses.patching.ioi` (the rules and thresholds); the pairs are the
built-in ``ioi`` task.  ``headlens ioi --out DIR`` is this call and :meth:`IOIResult.save`:
``heads.csv`` (per head: attention shares, OV copying, direct effect, path effects, each with its
95% interval over pairs, and the classes it meets), ``classes.csv`` (per class: its heads, its rule,
why it is empty), ``sinh_paths.csv`` and ``feed_paths.csv`` (the path-patching tables), the figure
``ioi_heads`` and ``manifest.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.measure.stats import small_sample_note
from headlens.analyses.patching.ioi import CLASSES, IOIConfig, IOIRun, run_ioi
from headlens.probes.config import ModelConfig
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.reports.api.common import config_of, loading_of, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_csv_table, read_manifest
from headlens.reports.render.figures.ioi import ioi_figure
from headlens.reports.render.finding_lines import Findings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["ioi", "IOIResult", "ioi_lines", "ioi_notes", "SHOWN", "LABELS"]

#: Heads listed per class in the findings (the rest are in classes.csv).
SHOWN = 8
_TABLES = ("heads", "classes", "sinh_paths", "feed_paths")
_TEXT = ("name", "classes", "class", "heads", "rule", "reason", "sender", "receiver", "receiver_input")
#: How the findings name each class.
LABELS = {
    "name mover": "name movers",
    "negative name mover": "negative name movers",
    "S-inhibition": "S-inhibition heads",
    "induction": "induction heads",
    "duplicate-token": "duplicate-token heads",
}
#: The figures each class's line shows per head: (column, label).
_SHOW = {
    "name mover": (("attn_io", "END->IO"), ("copying", "copying"), ("direct", "direct")),
    "negative name mover": (("attn_io", "END->IO"), ("negative_copying", "negative copying"), ("direct", "direct")),
    "S-inhibition": (("sinh_path", "share removed through NM queries"), ("attn_s2", "END->S2")),
    "induction": (("attn_ind", "S2->S1+1"), ("feed_path", "share removed through S-inhibition values")),
    "duplicate-token": (("attn_dup", "S2->S1"), ("feed_path", "share removed through S-inhibition values")),
}


@dataclass(kw_only=True, repr=False)
class IOIResult(Result):
    """``heads`` (one row per head: the IOI evidence with intervals, ``classes``), ``classes`` (one row
    per class: heads, rule, reason when empty), ``sinh_paths`` and ``feed_paths`` (path patching)."""

    kind = "ioi"
    marker_files = ("heads.csv", "classes.csv")

    #: The analysis' run (:class:`~headlens.analyses.patching.ioi.IOIRun`): :attr:`tables` are its ``heads``,
    #: ``classes`` and path tables; read back from a folder (:meth:`from_folder`) it is rebuilt from them and the
    #: manifest's ``ioi`` entry (its info).
    run: IOIRun

    def __post_init__(self) -> None:
        self.tables = {"heads": self.run.heads, "classes": self.run.classes, **self.run.paths}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        paths = {name: t for name, t in self.tables.items() if name not in ("heads", "classes")}
        self.run = replace(self.run, heads=self.tables["heads"], classes=self.tables["classes"], paths=paths)

    @property
    def heads(self) -> pd.DataFrame:
        return self.tables["heads"]

    @property
    def classes(self) -> pd.DataFrame:
        return self.tables["classes"]

    def members(self, cls: str) -> list[str]:
        """The heads of class ``cls`` (one of :data:`~headlens.analyses.patching.ioi.CLASSES`), e.g. ``["23.0"]``."""
        row = self.classes[self.classes["class"] == cls]
        return str(row["heads"].iloc[0]).split() if len(row) else []

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return {"ioi_heads": lambda: ioi_figure(self.heads)}

    def findings(self) -> Findings:
        """What ``headlens ioi`` prints (:func:`ioi_lines`) and its notes (:func:`ioi_notes`)."""
        return Findings(tuple(ioi_lines(self)), tuple(ioi_notes(self)))

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        return {name: read_csv_table(folder / f"{name}.csv", _TEXT) for name in _TABLES if (folder / f"{name}.csv").is_file()}

    @classmethod
    def from_folder(cls, folder: str | Path) -> IOIResult:
        """The saved result, its run rebuilt: the tables from their files, the info from the manifest's ``ioi`` entry."""
        p = Path(folder)
        manifest, tables = read_manifest(p), cls.read_tables(p)
        paths = {name: t for name, t in tables.items() if name not in ("heads", "classes")}
        info = {k: v for k, v in manifest["ioi"].items() if k != "classes"}
        return cls(run=IOIRun(heads=tables["heads"], classes=tables["classes"], paths=paths, info=info), manifest=manifest)


def _fig(row: dict[str, Any], column: str, label: str) -> str:
    sign = "+" if column in ("direct", "sinh_path", "feed_path") else ""
    return f"{label} {row[column]:{sign}.2f} [{row[f'{column}_low']:{sign}.2f}, {row[f'{column}_high']:{sign}.2f}]"


def _ci(values: list[float]) -> str:
    return f"{values[0]:.2f} [{values[1]:.2f}, {values[2]:.2f}]"


def ioi_lines(result: IOIResult) -> list[str]:
    """The task line, then one line per class: its rule and each head with its figures, or "none found: <why>"."""
    info = result.run.info
    if "logit_diff_clean" not in info:  # an empty result (no run behind it): nothing to state
        return []
    orders = (info.get("task") or {}).get("orders", {})
    lines = [
        f"IOI on {info.get('n_pairs')} pairs (Wang et al.'s templates, ABBA {orders.get('ABBA')} / BABA {orders.get('BABA')},"
        f" ABC corruption): logit(IO) - logit(S) {_ci(info['logit_diff_clean'])} clean, IO preferred on {info['io_preferred']:.0%};"
        f" {_ci(info['logit_diff_corrupt'])} corrupted"
    ]
    heads = result.heads.set_index("name", drop=False)
    for row in result.classes.to_dict("records"):
        names = str(row["heads"]).split()
        head = f"{LABELS[row['class']]} ({row['rule']})"
        if not names:
            lines.append(f"{head}: none found: {row['reason']}")
            continue
        lines.append(f"{head}: {len(names)}")
        for name in names[:SHOWN]:
            h = heads.loc[name].to_dict()
            lines.append(f"  {name}  " + ", ".join(_fig(h, c, label) for c, label in _SHOW[row["class"]]))
        if len(names) > SHOWN:
            lines.append(f"  (+{len(names) - SHOWN} more in classes.csv)")
    return lines


def ioi_notes(result: IOIResult) -> list[str]:
    """What the lines cannot say: few pairs, a gap not shown to exist, wide intervals, screened senders."""
    info = result.run.info
    if "logit_diff_clean" not in info:  # an empty result: no run, no notes
        return []
    notes = []
    small = small_sample_note(info.get("n_pairs"), items="pairs")
    if small:
        notes.append(small)
    clean, corrupt = info.get("logit_diff_clean"), info.get("logit_diff_corrupt")
    if clean and corrupt and clean[1] <= corrupt[2]:
        notes.append(
            "the clean and corrupted logit differences' intervals overlap: path effects are shares of a gap this sample does not"
            " separate from zero; more pairs (n_pairs) before reading them"
        )
    heads = result.heads
    for cls, shown in _SHOW.items():
        names = set(result.members(cls))
        rows = heads[heads["name"].isin(names)]
        for column, label in shown:
            width = (rows[f"{column}_high"] - rows[f"{column}_low"]).abs()
            wide = rows.loc[width > rows[column].abs(), "name"].tolist()
            if wide:
                notes.append(f"{cls}: {label} interval wider than the value itself for {', '.join(wide)}: read as rough, not settled")
    if info.get("feed_path_gqa"):
        notes.append(str(info["feed_path_gqa"]))
    if (info.get("thresholds") or {}).get("screen_attention") is not None:
        notes.append(
            f"path patching screened its senders by attention (mean >= {info['thresholds']['screen_attention']:g} on the class's"
            " pattern); screen_senders=False path-patches every earlier head"
        )
    return notes


@study("ioi", IOIConfig)
def ioi(
    model: LoadedModel | str,
    config: IOIConfig | None = None,
    /,
    *,
    n_pairs: int = IOIConfig.n_pairs,
    seed: int = IOIConfig.seed,
    n_resamples: int = IOIConfig.n_resamples,
    batch_size: int = IOIConfig.batch_size,
    screen_senders: bool = IOIConfig.screen_senders,
    prepend_bos: bool = IOIConfig.prepend_bos,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> IOIResult:
    """Which heads do what in indirect-object identification (Wang et al. 2022): name movers,
    negative name movers, S-inhibition, induction and duplicate-token heads, each by its own
    evidence with 95% intervals over the pairs of the built-in ``ioi`` task; a class no head meets
    is empty with the reason.

    ``config`` and keywords: :class:`~headlens.analyses.patching.ioi_config.IOIConfig`'s fields
    (``n_pairs``, ``seed``, ``n_resamples``, ``batch_size``, ``screen_senders``, ``prepend_bos``).
    The rules and thresholds: :mod:`headlens.analyses.patching.ioi`.
    """
    values = locals()
    cfg = config_of(IOIConfig, values)
    load = loading_of(values)
    loaded = as_loaded(model, load)
    run = run_ioi(loaded, cfg, progress=progress)
    manifest = build_manifest(
        model=loaded,
        command=command,
        seed=cfg.seed,
        prepend_bos=cfg.prepend_bos,
        configs={"ioi": cfg},
        extra={"ioi": {**run.info, "classes": list(CLASSES)}},
    )
    return IOIResult(run=run, manifest={"result": IOIResult.kind, **manifest})
