"""The report's settings (:class:`ReportSettings`) and each stage's configuration derived from them."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from headlens.analyses.ablation.pruning import PruneConfig
from headlens.analyses.ablation.study import AblationConfig
from headlens.analyses.heads.census import CensusConfig
from headlens.analyses.measure.texts import TEXT_RULE
from headlens.analyses.sinks.config import SinkConfig
from headlens.probes.errors import InputError
from headlens.reports.api.eval_text import text_choice
from headlens.reports.api.text_files import read_text_file
from headlens.reports.runs.report.report_config import DEFAULT_EXAMPLE_PROMPTS, MAX_EXAMPLE_PROMPTS, ReportConfig
from headlens.reports.runs.report.stages import STAGES

log = logging.getLogger(__name__)

__all__ = ["ReportSettings", "DEFAULT_EXAMPLE_PROMPTS", "MAX_EXAMPLE_PROMPTS", "SMOKE_STAGES", "check_example_prompts"]

#: The stages whose ``--quick`` settings are a smoke test (a few windows, prompts or orders):
#: they show that the stage runs and state no finding (:mod:`headlens.analyses.measure.verdicts`).  The
#: census keeps classify's defaults under ``--quick``; the examples hold no statistic.
SMOKE_STAGES = ("evidence", "sinks", "ablation_zero", "ablation_mean", "pruning", "design")


@dataclass(frozen=True, kw_only=True)
class ReportSettings(ReportConfig):
    """What the stages run with (:class:`~headlens.reports.runs.report.report_config.ReportConfig`'s
    fields: ``quick`` shrinks every stage to a smoke run) and each stage's configuration derived from them."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "example_prompts", tuple(self.example_prompts))
        object.__setattr__(self, "skip", tuple(dict.fromkeys(self.skip)))
        check_example_prompts(self.example_prompts)
        unknown = [s for s in self.skip if s not in STAGES]
        if unknown:
            raise InputError(f"cannot skip {', '.join(map(repr, unknown))}: choose from {', '.join(STAGES)}", skip=self.skip)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise InputError(f"--batch-size must be at least 1, got {self.batch_size}")

    def smoke_test(self, stage: str) -> bool:
        """True when ``stage`` runs with smoke-test settings (``--quick``): it states no finding."""
        return self.quick and stage in SMOKE_STAGES

    # Each stage's configuration (also its resume key).

    def census(self) -> CensusConfig:
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

    def sinks(self) -> SinkConfig:
        if self.quick:
            return SinkConfig(
                bos=(self.prepend_bos,),
                n_prompts=8,
                seed=self.seed,
                batch_size=self.batch_size,
                skip=("content", "secondary", "value_norm", "removal", "windowed"),
            )
        return SinkConfig(bos=(False, True), seed=self.seed, batch_size=self.batch_size)

    def eval_data(self, n_ctx: int) -> dict[str, Any]:
        """Where ablation and pruning measure the loss: windows of the evaluation text."""
        window = 32 if self.quick else 128
        return {"n_windows": 2 if self.quick else 16, "window": min(window, n_ctx), "prepend_bos": self.prepend_bos, **self.eval_text_id()}

    def sentence_data(self, n_ctx: int) -> dict[str, Any]:
        """Where ablation and pruning measure the embedding change (models without a trained
        output head, encoders): sentences of the shipped evaluation text."""
        return {
            "n_sentences": 4 if self.quick else 64,
            "max_tokens": min(32 if self.quick else 128, n_ctx),
            "prepend_bos": self.prepend_bos,
            **self.eval_text_id(),
        }

    def eval_source(self, model: Any = None) -> tuple[str, str]:
        """``(text, label)``: the evaluation text of ablation, pruning and the design stage on
        ``model`` and how the page names it (:func:`headlens.analyses.measure.texts.choose_text`:
        ``--text-file``, else the model's own held-out text when it carries one, else the built-in text)."""
        choice = self.text_choice(model)
        return choice.text, choice.label

    def text_choice(self, model: Any = None) -> Any:
        """The :class:`~headlens.analyses.measure.texts.TextChoice` of ``model`` (None: a model without its own text)."""
        return text_choice(model, self.text_file)

    def eval_text_id(self) -> dict[str, Any]:
        """``--text-file`` and its text's SHA-256 (first 16 hex digits), for resume keys and the
        manifest; without it the default's rule (:data:`~headlens.analyses.measure.texts.TEXT_RULE`:
        which text follows from the model, whose identity the keys hold)."""
        if self.text_file is None:
            return {"text": TEXT_RULE}
        text = read_text_file(self.text_file)
        return {"text_file": self.text_file, "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]}

    def eval_text_record(self, model: Any, previous: dict[str, Any] | None = None) -> dict[str, Any]:
        """The report manifest's ``eval_text``: the ``--text-file`` and its hash, or the default's
        rule and the text it chose for ``model`` (no model loaded: the ``previous`` manifest's record)."""
        if self.text_file is not None:
            return {"source": "--text-file", **self.eval_text_id()}
        if model is None:
            return ((previous or {}).get("report") or {}).get("eval_text") or {"source": "default", "rule": TEXT_RULE}
        return {"source": "default", "rule": TEXT_RULE, **self.text_choice(model).describe()}

    def ablation(self, method: str) -> AblationConfig:
        return AblationConfig(
            method=method, batch_size=self.batch_size, n_bootstrap=200 if self.quick else 1000, seed=self.seed, attribution=not self.quick
        )

    def pruning(self) -> PruneConfig:
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
