"""``headlens.verify``: check captured patterns against the family's attention redone from rotated
q and k, and z against pattern @ V (one row per layer); ``headlens verify`` prints the table."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from headlens.analyses.heads.verify import verify_attention
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.reports.api.common import loading_settings, python_command, study_config
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result
from headlens.reports.render.finding_lines import Findings, verify_findings

log = logging.getLogger(__name__)

__all__ = ["verify", "VerifyConfig", "VerifyResult", "DEFAULT_VERIFY_PROMPTS", "check_prompts"]

DEFAULT_VERIFY_TEXT = (
    "Apple raised its price target. Down by the river bank, the water was calm, "
    "and by the time you reach the bank the river has settled what you meant."
)

#: verify's default prompts: two lengths, so the padding mask of a batch is checked too.
DEFAULT_VERIFY_PROMPTS = (DEFAULT_VERIFY_TEXT, "Apple raised its price target.")

#: The columns whose largest value is the worst error.
ERROR_COLUMNS = ["max_err_pattern", "max_err_z", "max_row_sum_err"]


@dataclass(frozen=True, kw_only=True)
class VerifyConfig:
    """What :func:`verify` checks on: ``prompts`` (default two built-in prompts of different
    lengths), ``prepend_bos``, ``tolerance`` (default by dtype: 1e-4 float32, 3e-2 bfloat16,
    5e-3 float16), ``batch_size``."""

    prompts: tuple[str, ...] = DEFAULT_VERIFY_PROMPTS
    prepend_bos: bool = True
    tolerance: float | None = None
    batch_size: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompts", check_prompts(self.prompts))
        if self.tolerance is not None and not self.tolerance > 0:
            raise InputError(f"tolerance={self.tolerance}: must be above 0", tolerance=self.tolerance)


def check_prompts(prompts: str | Sequence[str]) -> tuple[str, ...]:
    """``prompts`` as a tuple of texts (one text is one prompt); empty ones refused, naming ``prompts``."""
    texts = (prompts,) if isinstance(prompts, str) else tuple(prompts)
    if not texts or any(not isinstance(t, str) or not t.strip() for t in texts):
        raise InputError("prompts is empty: give at least one non-empty text", prompts=texts)
    return texts


@dataclass(kw_only=True, repr=False)
class VerifyResult(Result):
    """``verify``: one row per layer with the largest errors, what the recomputation applied and ``ok``."""

    kind = "verify"
    marker_files = ("verify.csv",)

    @property
    def table(self) -> pd.DataFrame:
        return self["verify"]

    def findings(self) -> Findings:
        """What ``headlens`` prints for this study (:func:`~headlens.reports.render.finding_lines.verify_findings`)."""
        return verify_findings(self)

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


def verify(
    model: LoadedModel | str, config: VerifyConfig | None = None, /, *, command: list[str] | None = None, **kwargs: Any
) -> VerifyResult:
    """Check the captured attention of every layer against its recomputation: a :class:`VerifyResult`
    (``result.ok``, ``result.table``).  ``kwargs`` are :class:`VerifyConfig`'s fields (``prompts``,
    ``prepend_bos``, ``tolerance``); ``device=``, ``dtype=`` ... load a model given by name."""
    call = dict(kwargs)
    load = loading_settings(model, kwargs)
    config = study_config("verify", VerifyConfig, config, kwargs)
    loaded = as_loaded(model, load)
    table = verify_attention(
        loaded, list(config.prompts), prepend_bos=config.prepend_bos, tolerance=config.tolerance, batch_size=config.batch_size
    )
    manifest = build_manifest(
        model=loaded, command=command or python_command("verify", model, call), prepend_bos=config.prepend_bos, configs={"verify": config}
    )
    return VerifyResult(tables={"verify": table}, manifest=manifest)
