"""The census flags shared by ``detect``, ``classify`` and ``sweep``, generated from
:class:`~headlens.analyses.heads.census_config.CensusConfig`'s fields, and the config they make."""

from __future__ import annotations

from typing import Any

from headlens.analyses.heads.census_config import ATTENTION_HELP, CensusConfig
from headlens.reports.cli.common import parse_csv
from headlens.reports.cli.options import config_options

__all__ = ["census_options", "attention_options", "census_config", "ATTENTION_HELP", "CENSUS_FLAGS", "ATTENTION_FLAGS"]

#: The census settings every census command takes, in their ``--help`` order.
CENSUS_FLAGS = ("detectors", "n_prompts", "seed", "seq_len", "window", "prepend_bos", "batch_size", "referent_file")
#: ``--attention auto|eager|streaming`` and ``--query-block``.
ATTENTION_FLAGS = ("attention", "query_block")

census_options = config_options(CensusConfig, CENSUS_FLAGS)
attention_options = config_options(CensusConfig, ATTENTION_FLAGS)


def census_config(
    detectors: str | None,
    n_prompts: int,
    seed: int,
    seq_len: int,
    window: int,
    no_bos: bool,
    batch_size: int,
    referent_file: str | None,
    ablate: Any = (),
    attention: str = "auto",
    query_block: int = 256,
) -> CensusConfig:
    """The :class:`CensusConfig` of the census flags given as their text (``detectors`` comma-separated)."""
    return CensusConfig(
        attention=attention,
        query_block=query_block,
        detectors=tuple(parse_csv(detectors) or ()) if detectors else None,
        n_prompts=n_prompts,
        seq_len=seq_len,
        window=window,
        prepend_bos=not no_bos,
        seed=seed,
        batch_size=batch_size,
        referent_file=referent_file,
        ablate=tuple(ablate),
    )
