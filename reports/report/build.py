"""The full report: every analysis of a model in one folder, one HTML page and one Markdown file.

:func:`build_report` runs the stages below in order, each into ``OUT/<stage>/``:

==============  ===========================================================================
stage           what it runs (``--quick`` in brackets)
==============  ===========================================================================
``census``      head census and roles (:func:`headlens.reports.cli.detect.classify_to_dir`); 100 prompts
                per stimulus set, 1000 bootstrap resamples [the same: roles equal ``headlens classify``'s]
``sinks``       attention sinks (:func:`headlens.analyses.sinks.study.run_sinks`), both BOS settings, every
                part [the sink census only, the report's BOS setting]
``ablation_zero``  zero ablation of each head alone: change in loss on the evaluation text (the
                built-in English text, or ``text_file``), 16 windows of 128 tokens, with
                attribution [2 windows of 32, no attribution]
``ablation_mean``  the same with mean ablation
``pruning``     iterative pruning by gradient importance against random orders, step 0.1,
                3 random orders [step 0.5, 2 orders]
``examples``    attention patterns of every head on 2-3 example prompts (or yours)
==============  ===========================================================================

**Models without a trained output head.**  When the model's output head was newly initialised
(``LoadedModel.head_is_new``, e.g. all-MiniLM-L6-v2 booted as ``BertForMaskedLM``) or the model
is an encoder, the ablation and pruning stages measure the **embedding change** instead of the
loss (:func:`headlens.analyses.ablation.data.default_metric`): ``1 - cos`` between the mean-pooled last
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

import dataclasses
import datetime as _dt
import hashlib
import html
import json
import logging
import shutil
import sys
import zipfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headlens.probes.errors import HeadlensError, InputError, OutputExistsError

log = logging.getLogger(__name__)

__all__ = [
    "STAGES",
    "REPORT_FORMAT",
    "DEFAULT_EXAMPLE_PROMPTS",
    "ReportSettings",
    "ReportProgress",
    "StageStatus",
    "Example",
    "Report",
    "build_report",
    "load_report",
    "check_report_dir",
]

REPORT_FORMAT = "headlens.report"
#: Bumped when a stage's outputs change meaning: every stage is then recomputed.
REPORT_VERSION = 1
MARKER = "stage.json"
JOURNAL = "journal.jsonl"
#: Stage names, in the order they run.
STAGES: tuple[str, ...] = ("census", "sinks", "ablation_zero", "ablation_mean", "pruning", "examples")
STAGE_TITLES = {
    "census": "head census and roles",
    "sinks": "attention sinks",
    "ablation_zero": "zero ablation of each head",
    "ablation_mean": "mean ablation of each head",
    "pruning": "pruning curve with random control",
    "examples": "attention on example prompts",
}

#: Shown when no ``--example-prompt`` is given: natural text, a repeated phrase (induction,
#: duplicate-token) and a pronoun with two candidate antecedents (referent).
DEFAULT_EXAMPLE_PROMPTS: tuple[str, ...] = (
    "Apple raised its price target on the shares after the strong quarter.",
    "The old keeper fed his grey cat at dawn. The old keeper fed his grey cat at dawn.",
    "Mary thanked John because she had finished the report early.",
)
MAX_EXAMPLE_PROMPTS = 8
MAX_EXAMPLE_TOKENS = 64


class ReportProgress:
    """What :func:`build_report` reports while it runs; subclass or pass ``progress=True``.

    ``message(text)`` is called once per stage event (``"stage 2/6 sinks: done in 0.8 s"``);
    ``step(label, sub, done, total)`` after each batch of a pass inside a stage.  ``quiet``
    silences the progress lines that the census prints itself.
    """

    quiet = False

    def message(self, text: str) -> None:  # pragma: no cover - overridden
        pass

    def step(self, label: str, sub: str, done: int, total: int) -> None:  # pragma: no cover - overridden
        pass


def _StderrProgress() -> ReportProgress:  # noqa: N802 - ``progress=True``: the commands' adapter
    from headlens.reports.progress import ReportBars

    return ReportBars()  # type: ignore[return-value]


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True, kw_only=True)
class ReportSettings:
    """What the stages run with.  ``quick`` shrinks every stage to a smoke run (tests, CI)."""

    quick: bool = False
    prepend_bos: bool = True
    seed: int = 0
    batch_size: int = 8
    example_prompts: tuple[str, ...] = DEFAULT_EXAMPLE_PROMPTS
    skip: tuple[str, ...] = ()
    #: Evaluation text of ablation and pruning (``--text-file``); default the built-in English text.
    text_file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "example_prompts", tuple(self.example_prompts))
        object.__setattr__(self, "skip", tuple(dict.fromkeys(self.skip)))
        check_example_prompts(self.example_prompts)
        unknown = [s for s in self.skip if s not in STAGES]
        if unknown:
            raise InputError(f"cannot skip {', '.join(map(repr, unknown))}: choose from {', '.join(STAGES)}", skip=self.skip)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise InputError(f"--batch-size must be at least 1, got {self.batch_size}")

    # Each stage's configuration (also its resume key).

    def census(self) -> Any:
        from headlens.analyses.heads.census import CensusConfig

        # --quick keeps the census at `headlens classify`'s defaults (100 prompts, 1000 resamples):
        # fewer prompts move borderline scores across a threshold, and the report's roles must be
        # classify's (the census is the cheapest stage on a small model)
        return CensusConfig(
            n_prompts=100,
            n_bootstrap=1000,
            prepend_bos=self.prepend_bos,
            seed=self.seed,
            batch_size=max(self.batch_size, 16),
        )

    def sinks(self) -> Any:
        from headlens.analyses.sinks.study import SinkConfig

        if self.quick:
            return SinkConfig(bos=(self.prepend_bos,), n_prompts=8, seed=self.seed, batch_size=self.batch_size, skip=("content", "secondary", "value_norm", "removal", "windowed"))
        return SinkConfig(bos=(False, True), seed=self.seed, batch_size=self.batch_size)

    def eval_data(self, n_ctx: int) -> dict[str, Any]:
        """Where ablation and pruning measure the loss: windows of the evaluation text."""
        window = 32 if self.quick else 128
        return {"n_windows": 2 if self.quick else 16, "window": min(window, n_ctx), "prepend_bos": self.prepend_bos, **self.eval_text_id()}

    def sentence_data(self, n_ctx: int) -> dict[str, Any]:
        """Where ablation and pruning measure the embedding change (models without a trained
        output head, encoders): sentences of the shipped evaluation text."""
        return {"n_sentences": 4 if self.quick else 64, "max_tokens": min(32 if self.quick else 128, n_ctx), "prepend_bos": self.prepend_bos, **self.eval_text_id()}

    def eval_source(self) -> tuple[str, str]:
        """``(text, label)``: the evaluation text of ablation and pruning and how the page names it."""
        if self.text_file is None:
            from headlens.analyses.stimuli import eval_text

            return eval_text(), "built-in evaluation text"
        from headlens.reports.cli.ablate import read_text_file

        return read_text_file(self.text_file), f"--text-file {self.text_file}"

    def eval_text_id(self) -> dict[str, Any]:
        """``--text-file`` and its text's SHA-256 (first 16 hex digits), for resume keys and the
        manifest; empty for the built-in text."""
        if self.text_file is None:
            return {}
        text, _ = self.eval_source()
        return {"text_file": self.text_file, "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]}

    def ablation(self, method: str) -> Any:
        from headlens.analyses.ablation.study import AblationConfig

        return AblationConfig(method=method, batch_size=self.batch_size, n_bootstrap=200 if self.quick else 1000, seed=self.seed, attribution=not self.quick)

    def pruning(self) -> Any:
        from headlens.analyses.ablation.pruning import PruneConfig

        return PruneConfig(step=0.5 if self.quick else 0.1, random_seeds=2 if self.quick else 3, seed=self.seed, batch_size=self.batch_size)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def check_example_prompts(prompts: Sequence[str]) -> None:
    """Refuse no prompt, an empty or blank prompt, or too many (:class:`InputError`)."""
    if not prompts:
        raise InputError("no example prompt given")
    if len(prompts) > MAX_EXAMPLE_PROMPTS:
        raise InputError(f"at most {MAX_EXAMPLE_PROMPTS} example prompts, got {len(prompts)}")
    for i, p in enumerate(prompts, start=1):
        if not isinstance(p, str) or not p.strip():
            raise InputError(f"--example-prompt {i} is empty")


# --------------------------------------------------------------------------- model identity


def model_identity(source: str, path: str, revision: str | None) -> dict[str, Any]:
    """What names the model: a report folder belongs to exactly one."""
    return {"source": source, "path": path, "revision": revision}


def model_fingerprint(source: str, path: str, revision: str | None = None, loaded: Any = None) -> str:
    """The weights' one fingerprint (:func:`headlens.probes.loading.weights_fingerprint`): full-file
    sha256 for local checkpoints, so retrained weights, even middle tensors only, invalidate stages."""
    from headlens.probes.loading import checkpoint_fingerprint, weights_fingerprint

    return weights_fingerprint(loaded) if loaded is not None else checkpoint_fingerprint(source, path, revision=revision)


# --------------------------------------------------------------------------- stage records


@dataclass
class StageStatus:
    """One stage's outcome: ``done`` (run now), ``loaded`` (from an earlier run), ``failed``,
    ``skipped``."""

    name: str
    status: str
    seconds: float | None = None
    error: str | None = None
    files: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return STAGE_TITLES.get(self.name, self.name)

    @property
    def ok(self) -> bool:
        return self.status in ("done", "loaded")


@dataclass
class Example:
    """An example prompt's tokens and every head's attention pattern ``[layer, head, q, k]``."""

    prompt: str
    tokens: list[str]
    pattern: np.ndarray
    truncated: bool = False


def _json_key(obj: Any) -> Any:
    from headlens.probes.config import json_ready

    return json.loads(json.dumps(json_ready(obj), sort_keys=True, default=str))


def _key_hash(key: Any) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, HeadlensError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _read_marker(stage_dir: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads((stage_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) and obj.get("format") == f"{REPORT_FORMAT}.stage" else None


def _write_marker(stage_dir: Path, marker: dict[str, Any]) -> None:
    from headlens.probes.outputs import write_json

    write_json(stage_dir / MARKER, marker)


def _clear_stage_dir(stage_dir: Path) -> None:
    """Remove a stage's files (the marker first), keeping its journal for a resumed sweep."""
    (stage_dir / MARKER).unlink(missing_ok=True)
    if not stage_dir.is_dir():
        return
    for p in stage_dir.iterdir():
        if p.name == JOURNAL:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _journal(path: Path, kind: str, key: dict[str, Any]) -> Any:
    """A journal that resumes a sweep of the same key, or starts afresh."""
    from headlens.analyses.ablation.journal import Journal

    try:
        return Journal(path, kind, key, resume=True, overwrite=True)
    except HeadlensError as exc:
        log.warning("discarding journal %s, the stage starts over: %s", path, exc)
        path.unlink(missing_ok=True)
        return Journal(path, kind, key, resume=False, overwrite=True)


# --------------------------------------------------------------------------- the stages


@dataclass
class _Ctx:
    """What a running stage gets."""

    name: str
    dir: Path
    settings: ReportSettings
    key: dict[str, Any]
    model: Callable[[], Any]  # loads the model on first call
    step: Callable[[str, int, int], None]
    command: list[str]
    quiet: bool
    say: Callable[[str], None] = lambda text: None  # noqa: E731 - a stage line ("stage 3/6 ablation_zero: ...")


def _csv(df: pd.DataFrame, path: Path) -> Path:
    from headlens.probes.outputs import atomic_write

    return atomic_write(path, lambda p: df.to_csv(p, index=False))


def _names(paths: Sequence[Path], base: Path) -> list[str]:
    return sorted(str(Path(p).relative_to(base)) for p in paths)


#: How the ablation and pruning stages choose their metric (part of their resume key).
METRIC_RULE = "embedding change when the output head is newly initialised or the model is an encoder, else loss"


def _eval_set(ctx: _Ctx, loaded: Any) -> tuple[Any, dict[str, Any]]:
    """The stage's evaluation set and what the page says about its metric."""
    from headlens.analyses.ablation.data import EMBEDDING_DEFINITION, check_metric, default_metric, embedding_eval_set, split_sentences, text_eval_set

    text, label = ctx.settings.eval_source()
    metric, why = default_metric(loaded)
    check_metric(loaded, metric)
    if metric == "embedding":
        ctx.say(f"measured by the embedding change, not loss: {why}")
        d = ctx.settings.sentence_data(loaded.n_ctx)
        data = embedding_eval_set(loaded, split_sentences(text, complete_only=True), n_sentences=d["n_sentences"], max_tokens=d["max_tokens"], prepend_bos=d["prepend_bos"], source=label)
        return data, {"metric": metric, "metric_why": why, "metric_definition": EMBEDDING_DEFINITION}
    d = ctx.settings.eval_data(loaded.n_ctx)
    data = text_eval_set(loaded.tokenizer, text, n_windows=d["n_windows"], window=d["window"], prepend_bos=d["prepend_bos"], n_ctx=loaded.n_ctx, bos_id=loaded.bos_id, source=label)
    return data, {"metric": metric}


def _run_census(ctx: _Ctx) -> dict[str, Any]:
    from headlens.reports.cli.detect import classify_to_dir
    from headlens.reports.figures.report import FIGURE_FORMATS

    loaded = ctx.model()
    result, roles = classify_to_dir(
        loaded, ctx.settings.census(), ctx.dir, thresholds={}, baseline_factor=2.0, quiet=ctx.quiet, command=ctx.command,
        extra={"report_stage": "census"}, formats=FIGURE_FORMATS,
    )
    pdfs = sorted(ctx.dir.glob("heatmap_*.pdf"))
    return {"stimuli": result.stimuli, "n_roles": int((roles["roles"] != "").sum()), "extra_files": _names(pdfs, ctx.dir)}


def _load_census(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    scores = pd.read_csv(d / "scores.csv")
    roles = pd.read_csv(d / "roles.csv", dtype={"name": str, "roles": str}, keep_default_na=False)
    thresholds = json.loads((d / "manifest.json").read_text(encoding="utf-8")).get("thresholds") or {}
    return {"scores": scores, "roles": roles, "thresholds": {str(k): float(v) for k, v in thresholds.items()}}


def _run_sinks(ctx: _Ctx) -> dict[str, Any]:
    from headlens.analyses.sinks.study import run_sinks
    from headlens.reports.sinks_tables import summary_markdown, write_tables
    from headlens.probes.outputs import write_text
    from headlens.reports.figures.report import sink_alpha_heatmap

    loaded = ctx.model()
    config = ctx.settings.sinks()
    left_out = _loss_analyses(loaded, config)
    if left_out:
        config = dataclasses.replace(config, skip=tuple(dict.fromkeys((*config.skip, *left_out))))
        ctx.say(f"left out {' and '.join(left_out)}: they measure loss, which {_why_no_loss(loaded)}")
    report = run_sinks(loaded, config, progress=ctx.step)
    files = write_tables(report.tables, ctx.dir)
    if not ctx.settings.quick:
        from headlens.reports.figures.sinks import sink_figures

        files += sink_figures(report.tables, ctx.dir, config.eps)
    census = report.tables["census"]
    files += sink_alpha_heatmap(census[census["bos"] == ctx.settings.prepend_bos], ctx.dir / "sink_alpha", eps=config.eps, bos=ctx.settings.prepend_bos)
    files.append(write_text(ctx.dir / "summary.md", summary_markdown(report, model_name=loaded.name, figures=[p for p in files if p.suffix == ".png"])))
    info = {"sinks": report.info, "eps": config.eps, "bos": list(config.bos)}
    if left_out:
        info["left_out"] = {"analyses": list(left_out), "why": f"they measure loss, which {_why_no_loss(loaded)}"}
    return info


#: Parts of the sinks stage that measure next-token loss.
_SINK_LOSS_ANALYSES = ("removal", "windowed")


def _loss_analyses(loaded: Any, config: Any) -> tuple[str, ...]:
    """The loss-based sink analyses ``config`` would run that mean nothing on ``loaded`` (a new
    output head, or an encoder): they are left out."""
    if not (getattr(loaded, "head_is_new", False) or getattr(loaded, "is_encoder", False)):
        return ()
    return tuple(a for a in _SINK_LOSS_ANALYSES if a not in config.skip)


def _why_no_loss(loaded: Any) -> str:
    if getattr(loaded, "head_is_new", False):
        return "would be read from the newly initialised (random) output head"
    return "a bidirectional encoder does not model (next-token prediction)"


def _load_sinks(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    out = {"census": pd.read_csv(d / "census.csv"), "sink_rates": pd.read_csv(d / "sink_rates.csv")}
    for name in ("removal", "windowed", "content_verdicts"):
        if (d / f"{name}.csv").is_file():
            out[name] = pd.read_csv(d / f"{name}.csv")
    return out


def _run_ablation(ctx: _Ctx, method: str) -> dict[str, Any]:
    from headlens.analyses.ablation.study import ablation_study
    from headlens.reports.figures.report import ablation_heatmap

    loaded = ctx.model()
    data, about = _eval_set(ctx, loaded)
    config = ctx.settings.ablation(method)
    journal = _journal(ctx.dir / JOURNAL, f"report-{ctx.name}", {**ctx.key, "data": data.fingerprint()})
    with journal:
        result = ablation_study(loaded, data, config, journal=journal, progress=ctx.step)
    files = [_csv(result.table, ctx.dir / "ablation.csv")]
    files += ablation_heatmap(result.table, ctx.dir / "delta_heatmap", n_layers=loaded.n_layers, n_heads=loaded.n_heads, baseline=result.baseline_value)
    journal.finish()
    info = {"method": method, **about, "unablated_value": result.unablated_value, "spearman_attribution_vs_exact": result.spearman, "data": data.describe(), "resumed": journal.resumed}
    if "attribution" in result.info:
        info["attribution"] = result.info["attribution"]
    return info


def _load_ablation(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    return {"table": pd.read_csv(d / "ablation.csv")}


def _run_pruning(ctx: _Ctx) -> dict[str, Any]:
    from headlens.analyses.ablation.masks import write_mask
    from headlens.analyses.ablation.pruning import prune_study
    from headlens.reports.figures.report import pruning_curve

    loaded = ctx.model()
    data, about = _eval_set(ctx, loaded)
    config = ctx.settings.pruning()
    journal = _journal(ctx.dir / JOURNAL, "report-pruning", {**ctx.key, "data": data.fingerprint()})
    with journal:
        result = prune_study(loaded, data, config, journal=journal, progress=ctx.step)
    for name, df in (("curve.csv", result.curve), ("random_orders.csv", result.random), ("importance.csv", result.importance)):
        _csv(df, ctx.dir / name)
    write_mask(ctx.dir / "pruned_heads.json", result.pruned)
    pruning_curve(result.curve, ctx.dir / "pruning_curve", metric=data.metric, baseline=result.baseline_value, max_increase=config.max_increase, removable=result.removable_fraction)
    journal.finish()
    return {
        **about,
        "importance": result.info["importance"],
        "unablated_value": result.baseline_value,
        "removable_fraction": result.removable_fraction,
        "max_increase": config.max_increase,
        "random_seeds": config.random_seeds,
        "data": data.describe(),
        "resumed": journal.resumed,
    }


def _load_pruning(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    return {
        "curve": pd.read_csv(d / "curve.csv", keep_default_na=True, dtype={"removed_this_step": str}),
        "random": pd.read_csv(d / "random_orders.csv"),
        "importance": pd.read_csv(d / "importance.csv"),
    }


def _run_examples(ctx: _Ctx) -> dict[str, Any]:
    from headlens.probes.capture import capture
    from headlens.probes.config import CaptureConfig
    from headlens.probes.outputs import atomic_write, write_json
    from headlens.probes.prompts import tokenize_prompts

    loaded = ctx.model()
    prompts = list(ctx.settings.example_prompts)
    limit = min(MAX_EXAMPLE_TOKENS, loaded.n_ctx)
    bos = ctx.settings.prepend_bos
    full_len = [len(loaded.tokenizer(p, add_special_tokens=False)["input_ids"]) + int(bos) for p in prompts]
    batch = tokenize_prompts(loaded.tokenizer, prompts, prepend_bos=bos, n_ctx=limit, truncate=True)
    cap = capture(loaded, batch, CaptureConfig(what=("pattern",), prepend_bos=bos, batch_size=ctx.settings.batch_size))
    arrays = {}
    for i in range(len(prompts)):
        n = int(batch.lengths[i])
        arrays[f"p{i}"] = np.stack([cap.get(layer, "pattern")[i, :, :n, :n].float().numpy() for layer in range(loaded.n_layers)]).astype(np.float32)
    meta = {
        "prepend_bos": bos,
        "max_tokens": limit,
        "examples": [{"prompt": p, "tokens": batch.strings[i], "truncated": full_len[i] > limit} for i, p in enumerate(prompts)],
    }
    write_json(ctx.dir / "examples.json", meta)

    def save(path: Path) -> None:
        with open(path, "wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_write(ctx.dir / "patterns.npz", save)
    return {"n_examples": len(prompts), "max_tokens": limit}


def _load_examples(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    meta = json.loads((d / "examples.json").read_text(encoding="utf-8"))
    with np.load(d / "patterns.npz") as z:
        arrays = {k: z[k] for k in z.files}
    examples = [Example(prompt=e["prompt"], tokens=list(e["tokens"]), pattern=arrays[f"p{i}"], truncated=bool(e["truncated"])) for i, e in enumerate(meta["examples"])]
    return {"examples": examples}


@dataclass(frozen=True)
class _Stage:
    name: str
    run: Callable[[_Ctx], dict[str, Any]]
    load: Callable[[Path, dict[str, Any]], dict[str, Any]]
    config: Callable[[ReportSettings], Any]


_STAGE_DEFS: dict[str, _Stage] = {
    "census": _Stage("census", _run_census, _load_census, lambda s: s.census()),
    "sinks": _Stage("sinks", _run_sinks, _load_sinks, lambda s: {k: v for k, v in dataclasses.asdict(s.sinks()).items()}),
    "ablation_zero": _Stage("ablation_zero", lambda c: _run_ablation(c, "zero"), _load_ablation, lambda s: {"ablation": s.ablation("zero"), "data": s.eval_data(10**9), "metric": METRIC_RULE, "sentences": s.sentence_data(10**9)}),
    "ablation_mean": _Stage("ablation_mean", lambda c: _run_ablation(c, "mean"), _load_ablation, lambda s: {"ablation": s.ablation("mean"), "data": s.eval_data(10**9), "metric": METRIC_RULE, "sentences": s.sentence_data(10**9)}),
    "pruning": _Stage("pruning", _run_pruning, _load_pruning, lambda s: {"pruning": s.pruning(), "data": s.eval_data(10**9), "metric": METRIC_RULE, "sentences": s.sentence_data(10**9)}),
    "examples": _Stage("examples", _run_examples, _load_examples, lambda s: {"prompts": list(s.example_prompts), "prepend_bos": s.prepend_bos, "max_tokens": MAX_EXAMPLE_TOKENS}),
}


def _stage_key(stage: str, settings: ReportSettings, model_key: dict[str, Any]) -> dict[str, Any]:
    config = _STAGE_DEFS[stage].config(settings)
    if hasattr(config, "__dataclass_fields__"):
        config = dataclasses.asdict(config)
    elif isinstance(config, dict):
        config = {k: dataclasses.asdict(v) if hasattr(v, "__dataclass_fields__") else v for k, v in config.items()}
    return _json_key({"version": REPORT_VERSION, "stage": stage, "model": model_key, "config": config})


# --------------------------------------------------------------------------- the report object


@dataclass
class Report:
    """Everything a report shows, as DataFrames, plus the stage outcomes and the manifest.

    ``heads``: one row per head (the role table): ``name, layer, head, roles``, one score
    column per detector, ``sink_alpha``, ``zero_delta``, ``mean_delta``, ``importance``,
    ``pruned_at`` (fraction of heads removed when pruning took it out).  The other tables are
    the stages' own (``None`` when the stage failed or was skipped).
    """

    model: str
    n_layers: int
    n_heads: int
    settings: dict[str, Any]
    stages: list[StageStatus]
    manifest: dict[str, Any]
    out_dir: Path | None = None
    scores: pd.DataFrame | None = None
    roles: pd.DataFrame | None = None
    sinks: pd.DataFrame | None = None
    sink_rates: pd.DataFrame | None = None
    ablation_zero: pd.DataFrame | None = None
    ablation_mean: pd.DataFrame | None = None
    pruning_curve: pd.DataFrame | None = None
    pruning_random: pd.DataFrame | None = None
    importance: pd.DataFrame | None = None
    examples: list[Example] = field(default_factory=list)
    thresholds: dict[str, float] = field(default_factory=dict)
    heads: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def ok(self) -> bool:
        """True when no stage failed."""
        return not self.failed

    @property
    def failed(self) -> list[StageStatus]:
        return [s for s in self.stages if s.status == "failed"]

    def stage(self, name: str) -> StageStatus:
        return next(s for s in self.stages if s.name == name)

    @property
    def metric_note(self) -> str | None:
        """Plain text for the page: what the embedding metric is and why it replaced the loss
        (``None`` when the stages measured loss)."""
        for name in ("ablation_zero", "ablation_mean", "pruning"):
            s = self.stage(name)
            if s.ok and s.info.get("metric") == "embedding":
                data = s.info.get("data") or {}
                why = str(s.info.get("metric_why") or "").rstrip(".")
                framing = data.get("framing") or {}
                framed = " and ".join(str(t) for t in (*framing.get("prefix", []), *framing.get("suffix", []))) or "no special tokens"
                return (
                    "Ablation and pruning measure the embedding change, not the loss: 1 - cosine between the sentence embedding "
                    f"(the last hidden state averaged over each sentence's tokens, {framed} included) and the unablated model's, "
                    f"averaged over {data.get('n_sentences', '?')} sentences of the evaluation text; the output head is not read"
                    + (f", because {why}." if why else ".")
                    + " Pruning ranks heads by this exact change (it has no gradient in the unablated model), and its threshold is an absolute change."
                )
        return None

    @property
    def sinks_note(self) -> str | None:
        """Plain text: sink analyses the sinks stage left out, and why (``None`` when none)."""
        s = self.stage("sinks")
        left = s.info.get("left_out") if s.ok else None
        if not left:
            return None
        return f"Left out: {' and '.join(map(str, left.get('analyses', [])))} ({left.get('why', '')})."

    def html(self) -> str:
        """The self-contained page (what ``report.html`` holds)."""
        from headlens.reports.page.html import render_html

        return render_html(self)

    def markdown(self) -> str:
        from headlens.reports.page.markdown import render_markdown

        return render_markdown(self)

    def _repr_html_(self) -> str:
        """Inline in a notebook: the page in a sandboxed iframe (its CSS and scripts stay inside)."""
        doc = html.escape(self.html(), quote=True)
        return f'<iframe srcdoc="{doc}" sandbox="allow-scripts" style="width:100%;height:820px;border:1px solid #ddd" title="headlens report"></iframe>'

    def write(self, out_dir: str | Path | None = None) -> tuple[Path, Path]:
        """Write ``report.html`` and ``report.md`` (atomically) into ``out_dir``."""
        from headlens.probes.outputs import write_text

        out = Path(out_dir) if out_dir is not None else self.out_dir
        if out is None:
            raise InputError("no output folder: pass out_dir")
        return write_text(out / "report.html", self.html()), write_text(out / "report.md", self.markdown())

    def __repr__(self) -> str:
        states = ", ".join(f"{s.name}={s.status}" for s in self.stages)
        return f"Report(model={self.model!r}, {self.n_layers}x{self.n_heads} heads, {states})"


def _head_table(r: Report) -> pd.DataFrame:
    """One row per head, joining every stage that finished."""
    rows = pd.DataFrame([{"layer": layer, "head": h} for layer in range(r.n_layers) for h in range(r.n_heads)], columns=["layer", "head"])
    rows.insert(0, "name", rows["layer"].astype(str) + "." + rows["head"].astype(str))
    rows["roles"] = ""
    if r.roles is not None:
        roles = r.roles.set_index(["layer", "head"])["roles"].fillna("")
        rows["roles"] = [roles.get((a, b), "") for a, b in zip(rows["layer"], rows["head"])]
    if r.scores is not None:
        wide = r.scores.pivot_table(index=["layer", "head"], columns="detector", values="score", sort=False)
        for det in dict.fromkeys(r.scores["detector"]):
            col = wide[det] if det in wide.columns else pd.Series(dtype=float)  # a detector that scored no head (all NaN) has no pivot column
            rows[det] = [col.get((a, b), np.nan) for a, b in zip(rows["layer"], rows["head"])]

    def join(df: pd.DataFrame | None, col: str, name: str) -> None:
        if df is None:
            return
        m = df.set_index(["layer", "head"])[col]
        rows[name] = [float(m.get((a, b), np.nan)) for a, b in zip(rows["layer"], rows["head"])]

    if r.sinks is not None:
        bos = bool(r.settings.get("prepend_bos", True))
        sub = r.sinks[r.sinks["bos"].astype(bool) == bos]
        join(sub if len(sub) else r.sinks.drop_duplicates(["layer", "head"]), "alpha_mean", "sink_alpha")
    join(r.ablation_zero, "delta", "zero_delta")
    join(r.ablation_mean, "delta", "mean_delta")
    join(r.importance, "importance", "importance")
    if r.pruning_curve is not None:
        from headlens.analyses.ablation.masks import parse_head

        when: dict[tuple[int, int], float] = {}
        for c in r.pruning_curve.itertuples():
            for name in str(c.removed_this_step if isinstance(c.removed_this_step, str) else "").split():
                when[parse_head(name, where="pruning curve")] = float(c.fraction_removed)
        rows["pruned_at"] = [when.get((a, b), np.nan) for a, b in zip(rows["layer"], rows["head"])]
    return rows


def _assemble(model_name: str, n_layers: int, n_heads: int, settings: ReportSettings, stages: list[StageStatus], loaded: dict[str, dict[str, Any]], manifest: dict[str, Any], out_dir: Path | None) -> Report:
    r = Report(model=model_name, n_layers=n_layers, n_heads=n_heads, settings=settings.to_json(), stages=stages, manifest=manifest, out_dir=out_dir)
    if "census" in loaded:
        r.scores, r.roles, r.thresholds = loaded["census"]["scores"], loaded["census"]["roles"], loaded["census"]["thresholds"]
    if "sinks" in loaded:
        r.sinks, r.sink_rates = loaded["sinks"]["census"], loaded["sinks"]["sink_rates"]
    if "ablation_zero" in loaded:
        r.ablation_zero = loaded["ablation_zero"]["table"]
    if "ablation_mean" in loaded:
        r.ablation_mean = loaded["ablation_mean"]["table"]
    if "pruning" in loaded:
        p = loaded["pruning"]
        r.pruning_curve, r.pruning_random, r.importance = p["curve"], p["random"], p["importance"]
    if "examples" in loaded:
        r.examples = loaded["examples"]["examples"]
    r.heads = _head_table(r)
    return r


# --------------------------------------------------------------------------- the output folder


def _read_manifest(out: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(obj, dict) and isinstance(obj.get("report"), dict) and obj["report"].get("format") == REPORT_FORMAT:
        return obj
    return None


def check_report_dir(out_dir: str | Path, identity: dict[str, Any], *, overwrite: bool) -> dict[str, Any] | None:
    """Refuse a folder that holds anything but a report of this model, unless ``overwrite``.

    Returns the folder's report manifest when it holds a report of this model (to resume).
    Writes nothing.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"output {out} exists and is not a folder", path=str(out))
    if not out.is_dir() or not any(out.iterdir()):
        return None
    manifest = _read_manifest(out)
    if manifest is not None and manifest["report"].get("identity") == identity:
        return manifest
    if overwrite:
        return None
    if manifest is not None:
        other = manifest["report"].get("identity") or {}
        raise OutputExistsError(f"output folder {out} holds the report of another model ({other.get('path')}); pass --overwrite to replace it", path=str(out))
    raise OutputExistsError(f"output folder {out} is not empty and holds no headlens report; pass --overwrite to write the report into it", path=str(out))


def _remove_old_report(out: Path) -> None:
    """With ``overwrite``: remove what an earlier report wrote (its stage folders and pages)."""
    for name in STAGES:
        d = out / name
        if d.is_dir() and (d / MARKER).is_file():
            shutil.rmtree(d)
    for name in ("report.html", "report.md", "manifest.json"):
        (out / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------- build


def _resolve(model: Any, device: str, dtype: str, revision: str | None) -> tuple[dict[str, Any], str, Any, str]:
    """``(identity, display name, LoadedModel or None, dtype)`` without loading anything."""
    from headlens.probes.loading import LoadedModel, resolve_source

    if isinstance(model, LoadedModel):
        return model_identity(model.source, model.path, model.config.revision), model.name, model, str(model.dtype).removeprefix("torch.")
    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, str) or not model:
        raise InputError(f"model must be a Hugging Face id, a checkpoint folder or a loaded model, got {type(model).__name__}")
    source, path = resolve_source(model)
    return model_identity(source, path, revision), model, None, dtype


def build_report(
    model: Any,
    out_dir: str | Path | None = None,
    *,
    quick: bool = False,
    example_prompts: Sequence[str] | None = None,
    prepend_bos: bool = True,
    seed: int = 0,
    batch_size: int = 8,
    skip: Sequence[str] = (),
    redo: Sequence[str] = (),
    overwrite: bool = False,
    device: str = "auto",
    dtype: str = "float32",
    revision: str | None = None,
    allow_new_weights: bool = False,
    progress: ReportProgress | bool | None = None,
    command: list[str] | None = None,
    text_file: str | Path | None = None,
) -> Report:
    """Run (or resume) every stage for ``model`` into ``out_dir``; write ``report.html``,
    ``report.md`` and ``manifest.json``; return the :class:`Report`.

    ``model``: a Hub id, a local checkpoint folder, or a :class:`headlens.probes.loading.LoadedModel`.
    ``out_dir``: default a new temporary folder.  ``skip``: stages not to run; ``redo``: stages
    to recompute even when finished (``"all"`` for every one).  ``progress=True`` writes
    stage lines to stderr.  Failed stages do not raise: check :attr:`Report.ok`.
    ``text_file``: the evaluation text of ablation and pruning (default the built-in English
    text), as ``headlens ablate --text-file``; its SHA-256 goes into the manifest.
    """
    settings = ReportSettings(
        text_file=str(text_file) if text_file is not None else None,
        quick=quick,
        prepend_bos=prepend_bos,
        seed=seed,
        batch_size=batch_size,
        example_prompts=tuple(example_prompts) if example_prompts is not None else DEFAULT_EXAMPLE_PROMPTS,
        skip=tuple(skip),
    )
    settings.eval_text_id()  # a missing or empty --text-file fails here, before anything loads or is written
    redo_set = set(STAGES) if "all" in redo else set(redo)
    bad = redo_set - set(STAGES)
    if bad:
        raise InputError(f"cannot redo {', '.join(map(repr, sorted(bad)))}: choose from all, {', '.join(STAGES)}")
    identity, model_name, loaded_model, dtype_name = _resolve(model, device, dtype, revision)
    if out_dir is None:
        import tempfile

        out_dir = tempfile.mkdtemp(prefix="headlens-report-")
    out = Path(out_dir)
    previous = check_report_dir(out, identity, overwrite=overwrite)
    reporter: ReportProgress | None = _StderrProgress() if progress is True else (progress or None)
    model_key = {**identity, "dtype": dtype_name, "weights": model_fingerprint(identity["source"], identity["path"], identity["revision"], loaded_model)}
    keys = {name: _stage_key(name, settings, model_key) for name in STAGES}

    def finished(name: str) -> dict[str, Any] | None:
        marker = _read_marker(out / name)
        if name in redo_set or marker is None or marker.get("status") != "done" or marker.get("key") != keys[name]:
            return None
        if not all((out / name / f).is_file() for f in marker.get("files", [])):
            return None
        return marker

    to_run = [n for n in STAGES if n not in settings.skip and finished(n) is None]
    state: dict[str, Any] = {"loaded": loaded_model}

    def get_model() -> Any:
        if state["loaded"] is None:
            from headlens.probes.config import ModelConfig
            from headlens.probes.loading import load_model

            t0 = time.perf_counter()
            state["loaded"] = load_model(ModelConfig(model=model_name, device=device, dtype=dtype, revision=revision, allow_new_weights=allow_new_weights))
            if reporter is not None:  # after loading: a model that fails to load leaves one error line
                reporter.message(f"loaded {model_name} in {time.perf_counter() - t0:.1f} s ({state['loaded'].device}, {dtype})")
        return state["loaded"]

    if to_run or previous is None:
        get_model()  # a model that does not load fails here, before anything is written
    if overwrite and out.is_dir():
        stale = _read_manifest(out)
        if stale is None or stale["report"].get("identity") != identity:
            _remove_old_report(out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = command if command is not None else ["headlens", *sys.argv[1:]]
    if previous is None:  # claim the folder before the first stage runs
        _write_report_manifest(out, state["loaded"], identity, settings, cmd, {}, previous=None)

    statuses: list[StageStatus] = []
    results: dict[str, dict[str, Any]] = {}
    n = len(STAGES)
    for i, name in enumerate(STAGES, start=1):
        label = f"stage {i}/{n} {name}"
        d = out / name

        def say(text: str, label: str = label) -> None:
            if reporter is not None:
                reporter.message(f"{label}: {text}")

        if name in settings.skip:
            statuses.append(StageStatus(name, "skipped"))
            say("skipped")
            continue
        marker = finished(name)
        if marker is not None:
            try:
                results[name] = _STAGE_DEFS[name].load(d, marker)
                statuses.append(StageStatus(name, "loaded", seconds=marker.get("seconds"), files=marker.get("files", []), info=marker.get("info", {})))
                say(f"finished earlier, loaded from {d}")
                continue
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:  # unreadable outputs: recompute
                log.warning("stage %s: cannot read its earlier outputs in %s (%s: %s); running it again", name, d, type(exc).__name__, exc)
        say("running")
        d.mkdir(parents=True, exist_ok=True)
        _clear_stage_dir(d)
        t0 = time.perf_counter()

        def step(sub: str, done: int, total: int, label: str = label) -> None:
            if reporter is not None:
                reporter.step(label, sub, done, total)

        quiet = reporter is None or bool(getattr(reporter, "quiet", False))
        ctx = _Ctx(name=name, dir=d, settings=settings, key=keys[name], model=get_model, step=step, command=cmd, quiet=quiet, say=say)
        try:
            info = _STAGE_DEFS[name].run(ctx)
            seconds = round(time.perf_counter() - t0, 3)
            files = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() and p.name not in (MARKER, JOURNAL) and not p.name.startswith("."))
            marker = {"format": f"{REPORT_FORMAT}.stage", "stage": name, "status": "done", "key": keys[name], "key_hash": _key_hash(keys[name]), "seconds": seconds, "finished_utc": _now(), "files": files, "info": _json_key(info)}
            _write_marker(d, marker)
            results[name] = _STAGE_DEFS[name].load(d, marker)
            statuses.append(StageStatus(name, "done", seconds=seconds, files=files, info=marker["info"]))
            say(f"done in {seconds:.1f} s")
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing stage is reported, the others still run
            seconds = round(time.perf_counter() - t0, 3)
            error = _one_line(exc)
            _write_marker(d, {"format": f"{REPORT_FORMAT}.stage", "stage": name, "status": "failed", "key": keys[name], "key_hash": _key_hash(keys[name]), "seconds": seconds, "finished_utc": _now(), "error": error})
            statuses.append(StageStatus(name, "failed", seconds=seconds, error=error))
            say(f"FAILED: {error}")

    loaded = state["loaded"]
    manifest = _write_report_manifest(out, loaded, identity, settings, cmd, {s.name: s for s in statuses}, previous=previous)
    model_info = manifest.get("model") or {}
    n_layers = int(model_info.get("n_layers") or 0)
    n_heads = int(model_info.get("n_heads") or 0)
    report = _assemble(model_name, n_layers, n_heads, settings, statuses, results, manifest, out)
    report.write(out)
    return report


def _write_report_manifest(out: Path, loaded: Any, identity: dict[str, Any], settings: ReportSettings, command: list[str], stages: dict[str, StageStatus], *, previous: dict[str, Any] | None) -> dict[str, Any]:
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import write_json

    report_info = {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "identity": identity,
        "quick": settings.quick,
        "eval_text": {"source": "built-in evaluation text"} if settings.text_file is None else {"source": "--text-file", **settings.eval_text_id()},
        "stages": {
            name: {"status": s.status, "seconds": s.seconds, "error": s.error, "files": [f"{name}/{f}" for f in s.files]}
            for name, s in stages.items()
        },
        "files": ["report.html", "report.md", "manifest.json"],
    }
    manifest = build_manifest(model=loaded, command=command, seed=settings.seed, prepend_bos=settings.prepend_bos, configs={"report": settings.to_json()}, extra={"report": report_info})
    if loaded is None and previous is not None:
        for k in ("model", "dtype", "device"):
            if k in previous:
                manifest[k] = previous[k]
    write_json(out / "manifest.json", manifest)
    return manifest


def load_report(out_dir: str | Path) -> Report:
    """Read a report folder written by :func:`build_report` (no model needed)."""
    out = Path(out_dir)
    manifest = _read_manifest(out)
    if manifest is None:
        raise InputError(f"{out} holds no headlens report (no report manifest.json)", path=str(out))
    info = manifest["report"]
    cfg = dict((manifest.get("config") or {}).get("report") or {})
    settings = ReportSettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items() if k in ReportSettings.__dataclass_fields__})
    statuses, results = [], {}
    for name in STAGES:
        rec = (info.get("stages") or {}).get(name)
        marker = _read_marker(out / name)
        if rec is None or rec.get("status") == "skipped":
            statuses.append(StageStatus(name, "skipped"))
        elif marker is not None and marker.get("status") == "done":
            results[name] = _STAGE_DEFS[name].load(out / name, marker)
            statuses.append(StageStatus(name, rec.get("status", "done"), seconds=marker.get("seconds"), files=marker.get("files", []), info=marker.get("info", {})))
        else:
            statuses.append(StageStatus(name, "failed", seconds=rec.get("seconds"), error=rec.get("error") or (marker or {}).get("error") or "no output"))
    model_info = manifest.get("model") or {}
    name = model_info.get("model") or str((info.get("identity") or {}).get("path"))
    return _assemble(name, int(model_info.get("n_layers") or 0), int(model_info.get("n_heads") or 0), settings, statuses, results, manifest, out)
