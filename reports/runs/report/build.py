"""The full report's orchestration: every analysis of a model in one folder, one HTML page and one Markdown file.

:func:`build_report` runs the stages of :mod:`headlens.reports.runs.report.stages` in order,
each into ``OUT/<stage>/`` (that module's docstring lists them, and says how to add one).

**Models without a trained output head.**  When the model's output head was newly initialised
(``LoadedModel.head_is_new``, e.g. all-MiniLM-L6-v2 booted as ``BertForMaskedLM``) or the model
is an encoder, the ablation and pruning stages measure the **embedding change** instead of the
loss (:func:`headlens.analyses.measure.metrics.default_metric`): ``1 - cos`` between the mean-pooled last
hidden state and the unablated one, over 64 sentences of the evaluation text [4 sentences of
at most 32 tokens]; pruning then ranks heads by their exact single-head change (the embedding
change has no gradient), and the sinks stage leaves out sink removal and windowed attention
(they measure loss).  The page says so.  A loss-based stage never runs on a new head.

**Resuming.**  A stage writes its files, then (last, atomically) ``OUT/<stage>/stage.json``, a
marker holding the stage's *key*: the model (source, path, revision, the full-file sha256 of its weights,
dtype), the stage's configuration and the report format version.  On a rerun a stage whose
marker says ``done`` with the same key is loaded from its files, not recomputed; any other
stage is cleared and run again (the ablation and pruning sweeps also keep a journal, so an
interrupted sweep continues where it stopped).  The model is loaded only when a stage has to
run.

**Failures.**  A stage that raises is recorded in its marker as ``failed`` with a one-line
error; the other stages still run, the page shows the stage as FAILED with that error, and
:attr:`Report.ok` is False (``headlens report`` then exits with 1).  A failed stage is retried
on the next run.

**Output folder.**  ``OUT`` must be empty, missing, or hold a report of the same model
(``OUT/manifest.json``); anything else is refused (:class:`headlens.probes.errors.OutputExistsError`)
unless ``overwrite``, and nothing is written then.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, resolve_source
from headlens.probes.progress import Progress
from headlens.reports.api.common import config_of, loading_of, study
from headlens.reports.api.named_models import named_models
from headlens.reports.render.progress import ReportBars
from headlens.reports.runs.report import stages as _stages
from headlens.reports.runs.report.folder import check_report_dir, read_manifest, remove_old_report, write_report_manifest
from headlens.reports.runs.report.join import assemble
from headlens.reports.runs.report.markers import (
    REPORT_FORMAT,
    model_fingerprint,
    model_identity,
    read_marker,
)
from headlens.reports.runs.report.result import Example, Report, StageStatus
from headlens.reports.runs.report.settings import DEFAULT_EXAMPLE_PROMPTS, MAX_EXAMPLE_PROMPTS, ReportSettings
from headlens.reports.runs.report.stage_examples import MAX_EXAMPLE_TOKENS
from headlens.reports.runs.report.stage_runner import StageRunner, skipped_stages
from headlens.reports.runs.report.stages import STAGES

log = logging.getLogger(__name__)

__all__ = [
    "STAGES",
    "REPORT_FORMAT",
    "DEFAULT_EXAMPLE_PROMPTS",
    "MAX_EXAMPLE_PROMPTS",
    "MAX_EXAMPLE_TOKENS",
    "ReportSettings",
    "ReportProgress",
    "StageStatus",
    "Example",
    "Report",
    "build_report",
    "load_report",
    "check_report_dir",
]


class ReportProgress(Progress, Protocol):
    """What :func:`build_report` reports while it runs: a :class:`~headlens.probes.progress.Progress`
    (``progress(stage, done, total)`` after each batch of a pass inside a stage, ``stage`` as
    ``"stage 2/6 sinks: census"``) that also takes ``message(text)``, once per stage event
    (``"stage 2/6 sinks: done in 0.8 s"``).  Subclass it, match it (as
    :class:`headlens.reports.render.progress.ReportBars`) or pass ``progress=True``.  ``quiet``
    silences the progress lines that the census prints itself.
    """

    quiet: bool = False

    def __call__(self, stage: str, done: int, total: int, /) -> None:  # pragma: no cover - overridden
        pass

    def message(self, text: str) -> None:  # pragma: no cover - overridden
        pass


def _StderrProgress() -> ReportProgress:
    return ReportBars()


def _resolve(model: Any, dtype: str, revision: str | None) -> tuple[dict[str, Any], str, Any, str]:
    """``(identity, display name, LoadedModel or None, dtype)`` without loading anything."""
    if isinstance(model, LoadedModel):
        return model_identity(model.source, model.path, model.config.revision), model.name, model, str(model.dtype).removeprefix("torch.")
    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, str) or not model:
        raise InputError(f"model must be a Hugging Face id, a checkpoint folder or a loaded model, got {type(model).__name__}")
    source, path = resolve_source(model, named_models())
    return model_identity(source, path, revision), model, None, dtype


def _redo(redo: Sequence[str]) -> set[str]:
    """The stages to recompute even when finished (``"all"``: every one); an unknown name is an InputError."""
    redo_set = set(STAGES) if "all" in redo else set(redo)
    bad = redo_set - set(STAGES)
    if bad:
        raise InputError(f"cannot redo {', '.join(map(repr, sorted(bad)))}: choose from all, {', '.join(STAGES)}")
    return redo_set


@study("report", ReportSettings)
def build_report(
    model: LoadedModel | str | Path,
    config: ReportSettings | None = None,
    /,
    *,
    quick: bool = ReportSettings.quick,
    prepend_bos: bool = ReportSettings.prepend_bos,
    seed: int = ReportSettings.seed,
    batch_size: int = ReportSettings.batch_size,
    example_prompts: tuple[str, ...] = ReportSettings.example_prompts,
    skip: tuple[str, ...] = ReportSettings.skip,
    text_file: str | None = ReportSettings.text_file,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    out_dir: str | Path | None = None,
    redo: Sequence[str] = (),
    overwrite: bool = False,
    progress: ReportProgress | Progress | bool | None = None,
    command: list[str] | None = None,
    census: Any = None,
) -> Report:
    """Run (or resume) every stage for ``model`` into ``out_dir``; write ``report.html``,
    ``report.md`` and ``manifest.json``; return the :class:`Report`.

    ``model``: a Hub id, a local checkpoint folder, a named model (``"demo"``) or a
    :class:`headlens.probes.loading.LoadedModel`; ``device=``, ``dtype=`` ... load a model given by
    name.  The settings are :class:`ReportSettings`' fields (or ``config``, keywords overriding it):
    ``quick`` smoke-test settings, ``prepend_bos``, ``seed``, ``batch_size``, ``example_prompts``,
    ``skip`` (stages not to run), ``text_file`` (the evaluation text of ablation, pruning and design;
    default the model's own held-out text when it carries one, as the demo does, else the built-in
    English text, as ``headlens ablate --text-file``; which text, why and its SHA-256 go into the manifest).
    ``out_dir``: default a new temporary folder.  ``redo``: stages to recompute even when finished
    (``"all"`` for every one).  ``progress=True`` writes stage lines to stderr; a
    :class:`~headlens.probes.progress.Progress` gets each pass's ``(stage, done, total)`` and, when it
    has ``message`` (a :class:`ReportProgress`), the stage lines.  Failed stages do not
    raise: check :attr:`Report.ok`.  ``census``: a :class:`~headlens.reports.api.census.CensusResult`
    already computed on the loaded ``model`` (as ``headlens classify`` does): the census stage reuses
    it when its settings equal the stage's (checked there; else it computes its own), so the roles
    are that census's.
    """
    settings = config_of(ReportSettings, locals(), text_file=str(text_file) if text_file is not None else None)
    load = loading_of(locals())
    settings.eval_text_id()  # a missing or empty --text-file fails here, before anything loads or is written
    redo_set = _redo(redo)
    identity, model_name, loaded_model, dtype_name = _resolve(model, dtype, revision)
    out = Path(out_dir if out_dir is not None else tempfile.mkdtemp(prefix="headlens-report-"))
    previous = check_report_dir(out, identity, overwrite=overwrite)
    reporter = _StderrProgress() if progress is True else (progress or None)
    runner = StageRunner(
        out=out, settings=settings, keys=_keys(settings, identity, dtype_name, loaded_model), redo=redo_set,
        reporter=reporter, model_name=model_name, load=load, dtype=dtype, loaded=loaded_model,
    )  # fmt: skip
    skipped = skipped_stages(settings)
    if [n for n in STAGES if n not in skipped and runner.finished(n) is None] or previous is None:
        runner.model()  # a model that does not load fails here, before anything is written
    if overwrite and out.is_dir():
        stale = read_manifest(out)
        if stale is None or stale["report"].get("identity") != identity:
            remove_old_report(out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = command if command is not None else ["headlens", *sys.argv[1:]]  # @study records a Python call as the command
    if previous is None:  # claim the folder before the first stage runs
        write_report_manifest(out, runner.loaded, identity, settings, cmd, {}, previous=None)
    runner.run_all(skipped, cmd, census if loaded_model is not None else None)  # a census of a loaded model only
    statuses = {s.name: s for s in runner.statuses}
    manifest = write_report_manifest(out, runner.loaded, identity, settings, cmd, statuses, previous=previous)
    model_info = manifest.get("model") or {}
    n_layers, n_heads = int(model_info.get("n_layers") or 0), int(model_info.get("n_heads") or 0)
    report = assemble(model_name, n_layers, n_heads, settings, runner.statuses, runner.results, manifest, out)
    report.write(out)
    return report


def _keys(settings: ReportSettings, identity: dict[str, Any], dtype_name: str, loaded: LoadedModel | None) -> dict[str, Any]:
    """Each stage's key: the model (its identity, dtype and weights' fingerprint), the stage's settings, the format."""
    weights = model_fingerprint(identity["source"], identity["path"], identity["revision"], loaded)
    model_key = {**identity, "dtype": dtype_name, "weights": weights}
    return {name: _stages.stage_key(name, settings, model_key) for name in STAGES}


def load_report(out_dir: str | Path) -> Report:
    """Read a report folder written by :func:`build_report` (no model needed)."""
    out = Path(out_dir)
    manifest = read_manifest(out)
    if manifest is None:
        raise InputError(f"{out} holds no headlens report (no report manifest.json)", path=str(out))
    info = manifest["report"]
    cfg = dict((manifest.get("config") or {}).get("report") or {})
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items() if k in ReportSettings.__dataclass_fields__}
    settings = ReportSettings(**fields)
    statuses, results = [], {}
    for name in STAGES:
        rec = (info.get("stages") or {}).get(name)
        marker = read_marker(out / name)
        if rec is None or rec.get("status") == "skipped":
            statuses.append(StageStatus(name, "skipped"))
        elif marker is not None and marker.get("status") == "done":
            results[name] = _stages.STAGE_DEFS[name].load(out / name, marker)
            statuses.append(
                StageStatus(
                    name,
                    rec.get("status", "done"),
                    seconds=marker.get("seconds"),
                    files=marker.get("files", []),
                    info=marker.get("info", {}),
                )
            )
        else:
            statuses.append(
                StageStatus(
                    name, "failed", seconds=rec.get("seconds"), error=rec.get("error") or (marker or {}).get("error") or "no output"
                )
            )
    model_info = manifest.get("model") or {}
    name = model_info.get("model") or str((info.get("identity") or {}).get("path"))
    return assemble(
        name, int(model_info.get("n_layers") or 0), int(model_info.get("n_heads") or 0), settings, statuses, results, manifest, out
    )
