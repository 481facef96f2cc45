"""Model + settings -> evaluation set and metric, in one place.

``headlens ablate``, ``headlens prune``, ``headlens gqa``, ``headlens projections``, the
report's ablation, pruning and design stages and the Python studies all choose what they
measure on here: :class:`EvalSpec` holds the settings a user gives (metric, text or task,
windows, sentences, framing) and is checked before any model loads; :func:`eval_setup` turns
it and a loaded model into an :class:`EvalSetup` (the :class:`EvalSet`, the metric and why it
was chosen).  Reading files is the caller's (the text and task arrive read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from headlens.analyses.measure.embedding import embedding_eval_set, split_sentences
from headlens.analyses.measure.evalset import EMBEDDING_DEFINITION, EvalSet, task_eval_set, text_eval_set
from headlens.analyses.measure.metrics import check_metric, default_metric
from headlens.analyses.measure.spec import EvalSpec
from headlens.analyses.measure.texts import BUILTIN_TEXT, TextChoice, choose_text

log = logging.getLogger(__name__)

__all__ = ["BUILTIN_TEXT", "EvalSpec", "EvalSetup", "choose_metric", "eval_setup", "text_choice", "eval_source"]


def text_choice(spec: EvalSpec, model: Any) -> TextChoice | None:
    """The text ``model`` is measured on and why (:func:`~headlens.analyses.measure.texts.choose_text`); None for a task."""
    return None if spec.task is not None else choose_text(model, spec.text, text_file=spec.text_file)


def eval_source(spec: EvalSpec, model: Any = None) -> tuple[Any, str]:
    """``(text or task items, label)``: what the items of ``spec`` are cut from and how outputs name it
    (``model``: the model the default text is chosen for; None: a model without its own text)."""
    if spec.task is not None:
        return list(spec.task), spec.task_file or "task"
    choice = text_choice(spec, model)
    assert choice is not None  # no task
    return choice.text, choice.label


@dataclass(frozen=True, kw_only=True)
class EvalSetup:
    """An evaluation set and its metric: ``chosen`` says how the metric was chosen,
    ``why`` why a default other than loss was (``None`` otherwise)."""

    data: EvalSet
    metric: str
    chosen: str
    why: str | None = None
    #: the text the items were cut from and why it was chosen (None for a task)
    text: TextChoice | None = None

    def manifest_fields(self) -> dict[str, Any]:
        """Manifest fields that say what the metric is and why it was chosen, and which text and why."""
        out: dict[str, Any] = {"metric_chosen": self.chosen}
        if self.metric == "embedding":
            out["metric_definition"] = EMBEDDING_DEFINITION
        if self.text is not None:
            out["text"] = self.text.describe()
        return out


def choose_metric(model: Any, metric: str | None) -> tuple[str, str, str | None]:
    """``(metric, how it was chosen, why)``: ``metric``, or the default for ``model`` when
    ``None`` (``why``: the reason when the default is not loss), refused when it means nothing
    on this model (:func:`headlens.analyses.measure.metrics.check_metric`)."""
    why = None
    chosen = f"asked for (metric={metric!r})"
    if metric is None:
        metric, why = default_metric(model)
        chosen = "default" if why is None else f"default for this model: {why}"
    check_metric(model, metric)
    return metric, chosen, why


def eval_setup(model: Any, spec: EvalSpec, *, check: bool = True) -> EvalSetup:
    """The evaluation set of ``spec`` on ``model`` and its metric.

    ``check=False``: text windows for the loss whatever the model (a caller that decides itself
    what the loss is worth, e.g. the report's design stage, which leaves out the loss parts on a
    model without a trained output head).
    """
    choice = text_choice(spec, model)
    source: Any
    source, label = (choice.text, choice.label) if choice is not None else eval_source(spec, model)
    if not check:
        metric, chosen, why = "loss", "asked for (metric='loss')", None
    else:
        metric, chosen, why = choose_metric(model, spec.asked_metric)
    prepend_bos = spec.prepend_bos
    if metric == "logit-diff":
        data = task_eval_set(
            model.tokenizer, source, prepend_bos=prepend_bos, n_ctx=model.n_ctx, source=label, frame=model.frame(prepend_bos)
        )
    elif metric == "embedding":
        complete = label == BUILTIN_TEXT if spec.complete_sentences is None else spec.complete_sentences
        sentences = split_sentences(source, complete_only=complete)
        data = embedding_eval_set(
            model, sentences, n_sentences=spec.n_sentences, max_tokens=min(spec.window, model.n_ctx), prepend_bos=prepend_bos, source=label
        )
    else:
        data = text_eval_set(
            model.tokenizer,
            source,
            n_windows=spec.n_windows,
            window=spec.window,
            prepend_bos=prepend_bos,
            n_ctx=model.n_ctx,
            source=label,
            frame=model.frame(prepend_bos),
        )
    return EvalSetup(data=data, metric=metric, chosen=chosen, why=why, text=choice)
