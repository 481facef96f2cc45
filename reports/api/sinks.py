"""``headlens.sinks``: attention sinks (which heads sink, onto what, does the sink carry anything,
what breaks without it), and with ``lengths=`` the long-context study.

The files are ``headlens sinks``'s: the tables as CSV (each float in its shortest exact form), their figures,
``summary.md`` and ``manifest.json``; with ``lengths`` those of ``headlens sinks --lengths``:
``sink_lengths.csv``, ``sink_lengths.png/.svg`` and ``manifest.json``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import pandas as pd

from headlens.analyses.sinks.config import SinkConfig
from headlens.analyses.sinks.lengths import LengthsConfig, run_sink_lengths, validate_lengths
from headlens.analyses.sinks.study import SinksRun, run_sinks
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.prompts import read_prompts
from headlens.reports.api.common import coerce_setting, loading_settings, python_command, study_config
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_manifest
from headlens.reports.render.figures.sinks import lengths_figure, sink_figure_makers
from headlens.reports.render.finding_lines import Findings, seed_text_findings, sink_lengths_findings, sinks_findings
from headlens.reports.render.sinks_tables import summary_markdown, write_tables

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["sinks", "SinksResult", "SinkLengthsResult", "SeedTextResult", "LENGTHS_KEYWORDS"]

SUMMARY_FILE = "summary.md"

#: What ``sinks(..., lengths=...)`` takes besides ``lengths`` (``n_long``: sequences per length).
LENGTHS_KEYWORDS = ("eps", "n_long", "bos", "attention", "query_block", "seed", "prompts")

#: The CLI's settings by default: both BOS settings, without first.
BOTH = (False, True)


def _eps(manifest: dict[str, Any], default: float = 0.3) -> float:
    sinks = (manifest.get("config") or {}).get("sinks") or {}
    return float(sinks.get("eps", default))


@dataclass(kw_only=True, repr=False)
class SinksResult(Result):
    """Every table of the sink investigation: ``census`` (per sequence setting and head: mean
    alpha, sink or not), ``sink_rates``, ``sink_targets``, ``content``, ``value_norm``,
    ``removal``, ``windowed`` ... (those that ran)."""

    kind = "sinks"
    marker_files = ("census.csv", "sink_rates.csv")

    summary: str = ""
    #: The analysis' own report (config and info included); None when read back from a folder.
    report: SinksRun | None = None

    @property
    def census(self) -> pd.DataFrame:
        """One row per BOS setting and head: mean sink alpha, sink or not."""
        return self["census"]

    @property
    def sink_rates(self) -> pd.DataFrame:
        """Per BOS setting: the share of (sequence, head) that sink, against uniform attention."""
        return self["sink_rates"]

    def sink_heads(self, bos: bool) -> list[tuple[int, int]]:
        """``(layer, head)`` of the sink heads for one BOS setting, strongest first."""
        c = self.census
        c = c[(c["bos"] == bos) & c["is_sink"]].sort_values("alpha_mean", ascending=False)
        return [(int(r.layer), int(r.head)) for r in c.itertuples()]

    def findings(self) -> Findings:
        """What ``headlens sinks`` prints (:func:`~headlens.reports.render.finding_lines.sinks_findings`)."""
        eps = self.report.config.eps if self.report is not None else _eps(self.manifest)
        info = self.report.info if self.report is not None else (self.manifest.get("sinks") or {})
        return sinks_findings(self, eps, info if isinstance(info, dict) else {})

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return sink_figure_makers(self.tables, _eps(self.manifest))

    def texts(self) -> dict[str, str]:
        return {SUMMARY_FILE: self.summary}

    def write_tables(self, folder: Path) -> list[Path]:
        return write_tables(self.tables, folder)

    @classmethod
    def from_folder(cls, folder: str | Path) -> SinksResult:
        p = Path(folder)
        summary = (p / SUMMARY_FILE).read_text(encoding="utf-8") if (p / SUMMARY_FILE).is_file() else ""
        return cls(tables=cls.read_tables(p), manifest=read_manifest(p), summary=summary)


@dataclass(kw_only=True, repr=False)
class SinkLengthsResult(Result):
    """``sink_lengths``: alpha, sink rate, first-token and value-norm shares per BOS setting,
    length, layer and head."""

    kind = "sink_lengths"
    marker_files = ("sink_lengths.csv",)

    @property
    def table(self) -> pd.DataFrame:
        return self["sink_lengths"]

    @property
    def eps(self) -> float:
        configs = ((self.manifest.get("config") or {}).get("sink_lengths") or {}).values()
        return float(next(iter(configs), {}).get("eps", 0.3))

    def findings(self) -> Findings:
        return sink_lengths_findings(self)

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return {"sink_lengths": lambda: lengths_figure(self.table, self.eps)}

    def write_tables(self, folder: Path) -> list[Path]:
        return write_tables(self.tables, folder)


@dataclass(kw_only=True, repr=False)
class SeedTextResult(Result):
    """``headlens sinks --text ... --out DIR``: ``seed_text`` (per BOS setting and head, the last
    token's attention to the first against 1/n) and ``manifest.json``."""

    kind = "sink_seed_text"
    marker_files = ("seed_text.csv",)

    @property
    def table(self) -> pd.DataFrame:
        return self["seed_text"]

    def findings(self) -> Findings:
        return seed_text_findings(self)

    def write_tables(self, folder: Path) -> list[Path]:
        return write_tables(self.tables, folder)


def _file_names(result: Result, tables: dict[str, pd.DataFrame]) -> list[str]:
    return [f"{name}.csv" for name in tables] + [f"{stem}.{fmt}" for stem in result._figure_makers() for fmt in result.figure_formats]


@overload
def sinks(
    model: LoadedModel | str,
    config: SinkConfig | None = None,
    /,
    *,
    lengths: None = None,
    prompts_file: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    command: list[str] | None = None,
    **kwargs: Any,
) -> SinksResult: ...


@overload
def sinks(
    model: LoadedModel | str,
    config: None = None,
    /,
    *,
    lengths: Sequence[int] | int | str,
    prompts_file: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    command: list[str] | None = None,
    **kwargs: Any,
) -> SinkLengthsResult: ...


def sinks(
    model: LoadedModel | str,
    config: SinkConfig | None = None,
    /,
    *,
    lengths: Sequence[int] | int | str | None = None,
    prompts_file: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    command: list[str] | None = None,
    **kwargs: Any,
) -> SinksResult | SinkLengthsResult:
    """Attention sinks (Gu et al. 2024): a :class:`SinksResult`; with ``lengths`` (e.g.
    ``(256, 1024, 4096)``) the long-context study instead, a :class:`SinkLengthsResult`.

    ``model``: a loaded model, or a named model, folder or Hub id (``device=``, ``dtype=`` ... load
    it).  ``kwargs`` are :class:`~headlens.analyses.sinks.config.SinkConfig`'s fields (``eps``,
    ``window``, ``n_prompts``, ``bos``, ``heads``, ``skip`` ...); with ``lengths`` only
    :data:`LENGTHS_KEYWORDS`.  ``prompts_file``: texts to use instead of the evaluation text (one a
    line, or JSONL with ``text``; recorded in the manifest).  ``progress(stage, done, total)`` is called after each batch.
    """
    call = dict(kwargs)
    load = loading_settings(model, kwargs)
    given = kwargs.get("prompts") is not None or (config is not None and config.prompts is not None)
    if prompts_file is not None and not given:  # else the texts were read from it already
        kwargs["prompts"] = tuple(read_prompts(prompts_file))
    if lengths is not None:
        wanted: tuple[int, ...] = coerce_setting("sinks", "lengths", tuple[int, ...], lengths)
        if config is not None:
            raise InputError("sinks: lengths= takes keyword settings (eps=, n_long=, bos=, ...), not a SinkConfig")
        return _lengths(
            model,
            load,
            wanted,
            kwargs,
            prompts_file=prompts_file,
            progress=progress,
            command=command or python_command("sinks", model, {"lengths": lengths, **call}),
        )
    config = study_config("sinks", SinkConfig, config, kwargs)
    loaded = as_loaded(model, load, seed=config.seed)
    report = run_sinks(loaded, config, progress=progress)
    settings = config.bos
    result = SinksResult(tables=report.tables, manifest={}, report=report)
    figures = [Path(f"{stem}.png") for stem in result._figure_makers()]
    files = [*sorted(_file_names(result, report.tables)), SUMMARY_FILE]
    result.manifest = build_manifest(
        model=loaded,
        command=command or python_command("sinks", model, call),
        seed=config.seed,
        prepend_bos=settings[0] if len(settings) == 1 else None,
        configs={"sinks": {k: v for k, v in dataclasses.asdict(config).items() if k != "prompts"}},
        extra={"sinks": {**report.info, "bos_settings": list(settings), "files": files, "prompts_file": prompts_file}},
    )
    result.summary = summary_markdown(report, model_name=loaded.name, figures=figures)
    return result


def _lengths(
    model: LoadedModel | str,
    load: dict[str, Any],
    lengths: Sequence[int],
    kwargs: dict[str, Any],
    *,
    prompts_file: str | None,
    progress: Callable[[str, int, int], None] | None,
    command: list[str],
) -> SinkLengthsResult:
    """``sinks(lengths=...)``: the long-context table, one :func:`run_sink_lengths` per BOS setting."""
    unknown = [k for k in kwargs if k not in LENGTHS_KEYWORDS]
    if unknown:
        raise InputError(
            f"sinks with lengths=: unknown keyword {', '.join(f'{k}=' for k in unknown)}; choose from {', '.join(LENGTHS_KEYWORDS)}",
            keywords=unknown,
        )
    settings = coerce_setting("sinks", "bos", tuple[bool, ...], kwargs.get("bos", BOTH))
    seed = int(kwargs.get("seed", 0))
    documents = kwargs.get("prompts")
    loaded = as_loaded(model, load, seed=seed)
    plan = [
        LengthsConfig(
            lengths=tuple(lengths),
            eps=kwargs.get("eps", 0.3),
            n_sequences=kwargs.get("n_long", 2),
            prepend_bos=bos,
            attention=kwargs.get("attention", "auto"),
            query_block=kwargs.get("query_block", 256),
        )
        for bos in settings
    ]
    for config in plan:  # every setting is checked before the first forward
        validate_lengths(loaded, config, documents=documents)
    parts, infos, configs = [], {}, {}
    for config in plan:
        bos = config.prepend_bos
        stage = f"lengths, {'BOS' if bos else 'no BOS'}"
        step = None if progress is None else (lambda done, total, stage=stage: progress(stage, done, total))
        result = run_sink_lengths(loaded, config, documents=documents, progress=step)
        parts.append(result.table.assign(bos=bos))
        infos["bos" if bos else "no_bos"] = result.info
        configs["bos" if bos else "no_bos"] = dataclasses.asdict(config)
    table = pd.concat(parts, ignore_index=True)
    out = SinkLengthsResult(tables={"sink_lengths": table}, manifest={"config": {"sink_lengths": configs}})
    out.manifest = build_manifest(
        model=loaded,
        command=command,
        seed=seed,
        prepend_bos=settings[0] if len(settings) == 1 else None,
        configs={"sink_lengths": configs},
        extra={"sink_lengths": {**infos, "files": sorted(_file_names(out, out.tables)), "prompts_file": prompts_file}},
    )
    return out
