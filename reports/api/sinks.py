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
from typing import TYPE_CHECKING, Any, TypedDict, overload

import pandas as pd

from headlens.analyses.measure.texts import TEXT_NAMES
from headlens.analyses.sinks.config import LengthsConfig, SinkConfig
from headlens.analyses.sinks.lengths import run_sink_lengths, validate_lengths
from headlens.analyses.sinks.seed import SeedTextRun, run_seed_text
from headlens.analyses.sinks.study import SinksRun, run_sinks
from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress, stage_step
from headlens.probes.prompts import read_prompts
from headlens.probes.settings import settings_of
from headlens.reports.api.common import coerce_setting, config_from_record, config_of, loading_of, python_command, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_manifest
from headlens.reports.api.sink_lengths import SinkLengthsResult, SinkLengthsRun
from headlens.reports.render.figures.sinks import sink_figure_makers
from headlens.reports.render.finding_lines import Findings, seed_text_findings, sink_heads_of, sinks_findings
from headlens.reports.render.sinks_tables import sinks_loss_notes, summary_markdown, write_tables

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from typing_extensions import Unpack  # typing's from Python 3.11

log = logging.getLogger(__name__)

__all__ = ["sinks", "SinkKeywords", "seed_text", "SinksResult", "SinkLengthsResult", "SeedTextResult", "LENGTHS_KEYWORDS"]

SUMMARY_FILE = "summary.md"

#: What ``sinks(..., lengths=...)`` takes besides ``lengths`` (``n_long``: sequences per length).
LENGTHS_KEYWORDS = ("eps", "n_long", "bos", "attention", "query_block", "seed", "prompts")

#: SinkConfig's fields and defaults (those of the full study; ``lengths=`` refuses them changed).
_SINK_DEFAULTS = {info.name: info.default for info in settings_of(SinkConfig)}
_SINK_FIELDS = tuple(_SINK_DEFAULTS)


@dataclass(kw_only=True, repr=False)
class SinksResult(Result):
    """Every table of the sink investigation: ``census`` (per sequence setting and head: mean
    alpha, sink or not), ``sink_rates``, ``sink_targets``, ``content``, ``value_norm``,
    ``removal``, ``windowed`` ... (those that ran)."""

    kind = "sinks"
    marker_files = ("census.csv", "sink_rates.csv")

    #: The analysis' run: config, tables (:attr:`tables` is its dict) and info; a result read back from a
    #: folder has it rebuilt from the tables and the manifest (:meth:`from_folder`: ``config.prompts`` is
    #: then None and a given ``text`` is named as the manifest records it).
    run: SinksRun
    summary: str = ""

    def __post_init__(self) -> None:
        self.tables = self.run.tables

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
        return sink_heads_of(self.census, bos)

    def findings(self) -> Findings:
        """What ``headlens sinks`` prints (:func:`~headlens.reports.render.finding_lines.sinks_findings`)."""
        found = sinks_findings(self.tables, self.run.config.eps, self.run.info)
        lines, warnings = sinks_loss_notes(self.tables, self.run.info)
        return Findings(found.lines + tuple(lines), found.warnings + tuple(warnings))

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return sink_figure_makers(self.tables, self.run.config.eps)

    def texts(self) -> dict[str, str]:
        return {SUMMARY_FILE: self.summary}

    def write_tables(self, folder: Path) -> list[Path]:
        return write_tables(self.tables, folder)

    @classmethod
    def from_folder(cls, folder: str | Path) -> SinksResult:
        """The saved result, its run rebuilt: the tables from their files, the config from the manifest's
        ``config.sinks``, the info from its ``sinks`` entry."""
        p = Path(folder)
        manifest = read_manifest(p)
        config = config_from_record(SinkConfig, manifest["config"]["sinks"])
        run = SinksRun(config=config, tables=cls.read_tables(p), info=manifest["sinks"])
        summary = (p / SUMMARY_FILE).read_text(encoding="utf-8") if (p / SUMMARY_FILE).is_file() else ""
        return cls(run=run, manifest=manifest, summary=summary)


@dataclass(kw_only=True, repr=False)
class SeedTextResult(Result):
    """``headlens sinks --text ... --out DIR``: ``seed_text`` (per BOS setting and head, the last
    token's attention to the first against 1/n) and ``manifest.json``."""

    kind = "sink_seed_text"
    marker_files = ("seed_text.csv",)

    #: The analysis' run (the text, BOS settings, seed and table); read back from a folder it is rebuilt from
    #: the table and the manifest's ``sinks`` entry and ``seed`` (:meth:`from_folder`).
    run: SeedTextRun

    def __post_init__(self) -> None:
        self.tables = {"seed_text": self.run.table}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The table's dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        self.run = dataclasses.replace(self.run, table=self.tables["seed_text"])

    @property
    def table(self) -> pd.DataFrame:
        return self.run.table

    def findings(self) -> Findings:
        return seed_text_findings(self.run.table)

    def write_tables(self, folder: Path) -> list[Path]:
        return write_tables(self.tables, folder)

    @classmethod
    def from_folder(cls, folder: str | Path) -> SeedTextResult:
        """The saved result, its run rebuilt: the table from its file, the text and BOS settings from the
        manifest's ``sinks`` entry, the seed from its ``seed``."""
        p = Path(folder)
        manifest = read_manifest(p)
        entry = manifest["sinks"]
        run = SeedTextRun(text=entry["text"], bos=tuple(entry["bos"]), seed=int(manifest["seed"]), table=cls.read_tables(p)["seed_text"])
        return cls(run=run, manifest=manifest)


def seed_text(
    model: LoadedModel, text: str, *, bos: tuple[bool, ...] = (False, True), seed: int = 0, command: list[str] | None = None
) -> SeedTextResult:
    """``headlens sinks --text``: per BOS setting and head, the last token's attention to the first
    token of ``text`` against ``1/n`` (:func:`~headlens.analyses.sinks.seed.run_seed_text`), with its manifest."""
    run = run_seed_text(model, text, bos, seed=seed)
    manifest = build_manifest(
        model=model,
        command=command or python_command("sinks", model, {"text": text, "bos": bos}),
        seed=run.seed,
        prepend_bos=run.bos[0] if len(run.bos) == 1 else None,
        extra={"sinks": {"text": run.text, "bos": list(run.bos)}},
    )
    return SeedTextResult(run=run, manifest=manifest)


def _file_names(result: Result, tables: dict[str, pd.DataFrame]) -> list[str]:
    return [f"{name}.csv" for name in tables] + [f"{stem}.{fmt}" for stem in result._figure_makers() for fmt in result.figure_formats]


class SinkKeywords(TypedDict, total=False):
    """The keywords of :func:`sinks` besides ``lengths``, for its two overloads (which differ only in
    ``lengths`` and what they return); names and types are the implementation's keyword parameters
    (tests/reports/api/test_sinks_signature.py), whose defaults are :class:`SinkConfig`'s fields."""

    eps: float
    window: int
    n_prompts: int | None
    bos: tuple[bool, ...]
    prompts: tuple[str, ...] | None
    text: str | None
    heads: tuple[tuple[int, int], ...] | None
    max_single: int
    keep_first: tuple[int, ...]
    attn_windows: tuple[int, ...] | None
    long_tokens: int | None
    n_long: int
    top_k: int
    min_count: int
    batch_size: int
    seed: int
    skip: tuple[str, ...]
    attention: str
    query_block: int
    device: str
    dtype: str
    revision: str | None
    allow_new_weights: bool
    device_map: Any
    max_memory: Any
    offload_folder: str | None
    prompts_file: str | None
    progress: Progress | None
    command: list[str] | None


@overload
def sinks(
    model: LoadedModel | str, config: SinkConfig | None = None, /, *, lengths: None = None, **settings: Unpack[SinkKeywords]
) -> SinksResult: ...


@overload
def sinks(
    model: LoadedModel | str, config: None = None, /, *, lengths: tuple[int, ...] | int | str, **settings: Unpack[SinkKeywords]
) -> SinkLengthsResult: ...


# The implementation spells out SinkKeywords as keyword parameters (their defaults are SinkConfig's and
# ModelConfig's) where the overloads take them as **settings: pyright asks an implementation to take
# **settings too, which would hide the settings from help(), notebooks and tests/meta/test_settings_once.py.
@study("sinks", SinkConfig)
def sinks(  # pyright: ignore[reportInconsistentOverload]
    model: LoadedModel | str,
    config: SinkConfig | None = None,
    /,
    *,
    eps: float = SinkConfig.eps,
    window: int = SinkConfig.window,
    n_prompts: int | None = SinkConfig.n_prompts,
    bos: tuple[bool, ...] = SinkConfig.bos,
    prompts: tuple[str, ...] | None = SinkConfig.prompts,
    text: str | None = SinkConfig.text,
    heads: tuple[tuple[int, int], ...] | None = SinkConfig.heads,
    max_single: int = SinkConfig.max_single,
    keep_first: tuple[int, ...] = SinkConfig.keep_first,
    attn_windows: tuple[int, ...] | None = SinkConfig.attn_windows,
    long_tokens: int | None = SinkConfig.long_tokens,
    n_long: int = SinkConfig.n_long,
    top_k: int = SinkConfig.top_k,
    min_count: int = SinkConfig.min_count,
    batch_size: int = SinkConfig.batch_size,
    seed: int = SinkConfig.seed,
    skip: tuple[str, ...] = SinkConfig.skip,
    lengths: tuple[int, ...] | int | str | None = None,
    attention: str = LengthsConfig.attention,
    query_block: int = LengthsConfig.query_block,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    prompts_file: str | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> SinksResult | SinkLengthsResult:
    """Attention sinks (Gu et al. 2024): a :class:`SinksResult`; with ``lengths`` (e.g.
    ``(256, 1024, 4096)``) the long-context study instead, a :class:`SinkLengthsResult`.

    ``model``: a loaded model, or a named model, folder or Hub id (``device=``, ``dtype=`` ... load
    it).  The settings are :class:`~headlens.analyses.sinks.config.SinkConfig`'s fields (``eps``,
    ``window``, ``n_prompts``, ``bos``, ``heads``, ``skip`` ...; or ``config``, keywords overriding
    it); with ``lengths`` only :data:`LENGTHS_KEYWORDS` apply (``n_long`` sequences per length;
    ``attention`` and ``query_block``: :class:`~headlens.analyses.sinks.config.LengthsConfig`'s).
    ``text``: what the evaluation windows are cut from (a text, ``"heldout"`` or ``"builtin"``;
    default the model's own held-out text when it carries one, else the built-in text: the rule
    ablate uses, :func:`~headlens.analyses.measure.texts.choose_text`; the manifest's
    ``sinks.text`` records which, why, SHA-256 and length).
    ``prompts_file``: texts to use instead of the evaluation text (one a line, or JSONL with
    ``text``; recorded in the manifest).  ``progress(stage, done, total)`` is called after each batch.
    """
    if prompts_file is not None and prompts is None:  # else the texts were read from it already
        prompts = tuple(read_prompts(prompts_file))
    if lengths is not None:
        wanted: tuple[int, ...] = coerce_setting("sinks", "lengths", tuple[int, ...], lengths)
        if config is not None:
            raise InputError("sinks: lengths= takes keyword settings (eps=, n_long=, bos=, ...), not a SinkConfig")
        return _lengths(
            model,
            loading_of(locals()),
            wanted,
            {k: v for k, v in locals().items() if k in LENGTHS_KEYWORDS},
            {k: v for k, v in locals().items() if k in _SINK_FIELDS and k not in LENGTHS_KEYWORDS},
            prompts_file=prompts_file,
            progress=progress,
            command=command or [],
        )
    config = config_of(SinkConfig, locals())
    load = loading_of(locals())
    if attention != "auto" or query_block != 256:
        raise InputError("sinks: attention= and query_block= apply with lengths= (the full study reads the patterns, eager)")
    loaded = as_loaded(model, load, seed=config.seed)
    return _sinks_result(loaded, run_sinks(loaded, config, progress=progress), command=command, prompts_file=prompts_file)


def _sinks_result(loaded: LoadedModel, run: SinksRun, *, command: list[str] | None, prompts_file: str | None) -> SinksResult:
    """The result of a full sinks study: the run, its manifest (the files it saves listed) and its summary."""
    config, settings = run.config, run.config.bos
    result = SinksResult(run=run)
    figures = [Path(f"{stem}.png") for stem in result._figure_makers()]
    files = [*sorted(_file_names(result, run.tables)), SUMMARY_FILE]
    result.manifest = build_manifest(
        model=loaded,
        command=command,
        seed=config.seed,
        prepend_bos=settings[0] if len(settings) == 1 else None,
        configs={"sinks": _config_record(config)},
        extra={"sinks": {**run.info, "bos_settings": list(settings), "files": files, "prompts_file": prompts_file}},
    )
    result.summary = summary_markdown(run, model_name=loaded.name, figures=figures)
    return result


def _config_record(config: SinkConfig) -> dict[str, Any]:
    """The manifest's ``config.sinks``: every field but the prompts; ``text`` by name when named
    (a text given is recorded by its SHA-256 and length in ``sinks.text``)."""
    record = {k: v for k, v in dataclasses.asdict(config).items() if k != "prompts"}
    if record["text"] is not None and record["text"] not in TEXT_NAMES:
        record["text"] = "given (see sinks.text)"
    return record


def _lengths(
    model: LoadedModel | str,
    load: dict[str, Any],
    lengths: Sequence[int],
    settings: dict[str, Any],
    others: dict[str, Any],
    *,
    prompts_file: str | None,
    progress: Progress | None,
    command: list[str],
) -> SinkLengthsResult:
    """``sinks(lengths=...)``: the long-context table, one :func:`run_sink_lengths` per BOS setting;
    ``settings``: the :data:`LENGTHS_KEYWORDS`, ``others``: the full study's settings (refused unless at their defaults)."""
    changed = [k for k, v in others.items() if v != _SINK_DEFAULTS[k]]
    if changed:
        raise InputError(
            f"sinks with lengths=: unknown keyword {', '.join(f'{k}=' for k in changed)}; choose from {', '.join(LENGTHS_KEYWORDS)}",
            keywords=changed,
        )
    settings_bos: tuple[bool, ...] = settings["bos"]
    seed = int(settings["seed"])
    documents = settings["prompts"]
    loaded = as_loaded(model, load, seed=seed)
    plan = [
        LengthsConfig(
            lengths=tuple(lengths),
            eps=settings["eps"],
            n_sequences=settings["n_long"],
            prepend_bos=bos,
            attention=settings["attention"],
            query_block=settings["query_block"],
        )
        for bos in settings_bos
    ]
    for config in plan:  # every setting is checked before the first forward
        validate_lengths(loaded, config, documents=documents)
    parts, infos, configs = [], {}, {}
    for config in plan:
        bos = config.prepend_bos
        stage = f"lengths, {'BOS' if bos else 'no BOS'}"
        result = run_sink_lengths(loaded, config, documents=documents, progress=stage_step(progress, stage))
        parts.append(result.table.assign(bos=bos))
        infos["bos" if bos else "no_bos"] = result.info
        configs["bos" if bos else "no_bos"] = config
    out = SinkLengthsResult(run=SinkLengthsRun(table=pd.concat(parts, ignore_index=True), configs=configs, info=infos))
    out.manifest = build_manifest(
        model=loaded,
        command=command,
        seed=seed,
        prepend_bos=settings_bos[0] if len(settings_bos) == 1 else None,
        configs={"sink_lengths": {k: dataclasses.asdict(c) for k, c in configs.items()}},
        extra={"sink_lengths": {**infos, "files": sorted(_file_names(out, out.tables)), "prompts_file": prompts_file}},
    )
    return out
