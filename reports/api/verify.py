"""``headlens.verify``: check captured patterns against the family's attention redone from rotated
q and k, and z against pattern @ V (one row per layer); ``headlens verify`` prints the table."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.analyses.heads.verify import VerifyRun, run_verify
from headlens.analyses.heads.verify_config import DEFAULT_VERIFY_PROMPTS, DEFAULT_VERIFY_TEXT, VerifyConfig, check_prompts
from headlens.analyses.synthetic.selftest import SelftestReport, run_selftest
from headlens.probes.config import ModelConfig
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.reports.api.common import config_from_record, config_of, loading_of, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_manifest
from headlens.reports.render.finding_lines import Findings, verify_findings

log = logging.getLogger(__name__)

__all__ = [
    "verify",
    "selftest",
    "SelftestReport",
    "VerifyConfig",
    "VerifyResult",
    "DEFAULT_VERIFY_PROMPTS",
    "DEFAULT_VERIFY_TEXT",
    "check_prompts",
]

#: The columns whose largest value is the worst error.
ERROR_COLUMNS = ["max_err_pattern", "max_err_z", "max_row_sum_err"]


@dataclass(kw_only=True, repr=False)
class VerifyResult(Result):
    """``verify``: one row per layer with the largest errors, what the recomputation applied and ``ok``."""

    kind = "verify"
    marker_files = ("verify.csv",)

    #: The analysis' run (the config and the table); read back from a folder it is rebuilt from ``verify.csv``
    #: and the manifest's ``config.verify`` (:meth:`from_folder`).
    run: VerifyRun

    def __post_init__(self) -> None:
        self.tables = {"verify": self.run.table}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The table's dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        self.run = replace(self.run, table=self.tables["verify"])

    @property
    def table(self) -> pd.DataFrame:
        return self.run.table

    def findings(self) -> Findings:
        """What ``headlens`` prints for this study (:func:`~headlens.reports.render.finding_lines.verify_findings`)."""
        return verify_findings(self.run.table)

    @classmethod
    def from_folder(cls, folder: str | Path) -> VerifyResult:
        """The saved result, its run rebuilt: the table from ``verify.csv``, the config from the manifest's ``config.verify``."""
        p = Path(folder)
        manifest = read_manifest(p)
        config = config_from_record(VerifyConfig, manifest["config"]["verify"])
        return cls(run=VerifyRun(config=config, table=cls.read_tables(p)["verify"]), manifest=manifest)

    @property
    def ok(self) -> bool:
        """Every layer within tolerance (no attention on a masked key, rows summing to 1)."""
        return bool(self.table["ok"].all())

    @property
    def worst_error(self) -> float:
        return float(self.table[ERROR_COLUMNS].to_numpy().max())

    @property
    def failed_layers(self) -> list[int]:
        return [int(v) for v in self.table.loc[~self.table["ok"].astype(bool), "layer"]]


@study("verify", VerifyConfig)
def verify(
    model: LoadedModel | str,
    config: VerifyConfig | None = None,
    /,
    *,
    prompts: tuple[str, ...] = VerifyConfig.prompts,
    prepend_bos: bool = VerifyConfig.prepend_bos,
    tolerance: float | None = VerifyConfig.tolerance,
    batch_size: int = VerifyConfig.batch_size,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    command: list[str] | None = None,
) -> VerifyResult:
    """Check the captured attention of every layer against its recomputation on ``prompts``: a
    :class:`VerifyResult` (``result.ok``, ``result.table``).  ``tolerance``: the largest absolute
    error accepted (default by dtype: 1e-4 float32, 3e-2 bfloat16, 5e-3 float16); the settings are
    :class:`VerifyConfig`'s fields (or ``config``); ``device=``, ``dtype=`` ... load a model given by name."""
    config = config_of(VerifyConfig, locals())
    loaded = as_loaded(model, loading_of(locals()))
    run = run_verify(loaded, config)
    manifest = build_manifest(model=loaded, command=command, prepend_bos=config.prepend_bos, configs={"verify": config})
    return VerifyResult(run=run, manifest=manifest)


def selftest(
    *,
    device: str = "auto",
    dtype: str = "float32",
    n_prompts: int = 40,
    folder: str | Path | None = None,
    progress: Progress | None = None,
) -> SelftestReport:
    """Build a model with planted heads and check that the census finds each one, and nothing else
    (``headlens selftest``): a :class:`~headlens.analyses.synthetic.selftest.SelftestReport`
    (``ok``, ``lines()``).  ``folder`` keeps the planted checkpoint and its census."""
    return run_selftest(device=device, dtype=dtype, n_prompts=n_prompts, folder=folder, progress=progress)
