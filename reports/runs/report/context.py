"""What a report stage is (:class:`Stage`) and what it gets when it runs (:class:`StageContext`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.probes.outputs import atomic_write

log = logging.getLogger(__name__)

__all__ = ["Stage", "StageContext", "write_csv", "relative_names"]


@dataclass
class StageContext:
    """What a running stage gets: its folder, the settings, its resume key, the model (loaded
    on the first call of ``model()``), progress callbacks and the command line."""

    name: str
    dir: Path
    settings: Any  # ReportSettings
    key: dict[str, Any]
    model: Callable[[], Any]  # loads the model on first call
    step: Callable[[str, int, int], None]
    command: list[str]
    quiet: bool
    say: Callable[[str], None] = lambda text: None
    #: a census already computed on this model (``build_report(census=)``): the census stage reuses it when its settings are equal
    census: Any = None


@dataclass(frozen=True)
class Stage:
    """One stage of the report.

    ``run(ctx) -> info``: compute and write the stage's files into ``ctx.dir`` (the marker is
    written after it returns; ``info`` is JSON-ready and lands in the marker and
    :attr:`StageStatus.info`).  ``load(dir, marker) -> dict``: read those files back (no
    model).  ``config(settings)``: the stage's configuration, part of its resume key.
    ``apply(report, loaded)``: put what ``load`` returned onto the :class:`Report`.
    ``needs``: the stages it reads; when one is skipped, so is this one.
    """

    name: str
    title: str
    run: Callable[[StageContext], dict[str, Any]]
    load: Callable[[Path, dict[str, Any]], dict[str, Any]]
    config: Callable[[Any], Any]
    apply: Callable[[Any, dict[str, Any]], None]
    #: stages whose output this one reads: skipping any of them skips this one too (said, not failed)
    needs: tuple[str, ...] = ()


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    return atomic_write(path, lambda p: df.to_csv(p, index=False))


def relative_names(paths: Sequence[Path], base: Path) -> list[str]:
    return sorted(str(Path(p).relative_to(base)) for p in paths)
