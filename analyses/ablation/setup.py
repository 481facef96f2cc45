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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from headlens.analyses.ablation.embedding import embedding_eval_set, split_sentences
from headlens.analyses.ablation.evalset import EMBEDDING_DEFINITION, METRICS, EvalSet, TaskItem, task_eval_set, text_eval_set
from headlens.analyses.ablation.metrics import check_metric, default_metric
from headlens.analyses.ablation.texts import BUILTIN_TEXT, TextChoice, choose_text
from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["BUILTIN_TEXT", "EvalSpec", "EvalSetup", "choose_metric", "eval_setup"]


@dataclass(frozen=True, kw_only=True)
class EvalSpec:
    """What an ablation, pruning or design study measures on, as a user gives it.

    ``metric``: ``loss``, ``logit-diff``, ``embedding`` or ``None`` (``logit-diff`` with a
    ``task``, else the model's default, :func:`choose_metric`).  ``text``: the evaluation text,
    or a named text (``"heldout"``: the model's own held-out text; ``"builtin"``: the built-in
    English text); ``None``: the model's own held-out text when it carries one (the demo model),
    else the built-in text (:func:`headlens.analyses.ablation.texts.choose_text`, the one rule);
    ``text_file`` the file it was read from (outputs name the text by it); ``task``: prompts
    with a correct and an incorrect token (``logit-diff``) and ``task_file`` the file they were
    read from.
    ``n_windows`` x ``window`` tokens for the loss; ``n_sentences`` of at most ``window`` tokens
    for the embedding change, complete sentences only when ``complete_sentences`` (``None``:
    only for the built-in text).  ``prepend_bos``: the model's framing tokens or none.
    """

    metric: str | None = None
    text: str | None = None
    text_file: str | None = None
    task: Sequence[TaskItem] | None = None
    task_file: str | None = None
    n_windows: int = 16
    window: int = 128
    n_sentences: int = 64
    prepend_bos: bool = True
    complete_sentences: bool | None = None

    def __post_init__(self) -> None:
        text, task = ("text_file" if self.text_file else "text"), ("task_file" if self.task_file else "task")
        if self.metric is not None and self.metric not in METRICS:
            raise InputError(f"metric={self.metric!r} is not a metric: choose from {', '.join(METRICS)}", metric=self.metric)
        if self.metric == "logit-diff" and self.task is None:
            raise InputError("metric='logit-diff' needs task= (prompts with a correct and an incorrect token)", metric=self.metric)
        if self.metric in ("loss", "embedding") and self.task is not None:
            raise InputError(f"{task}= prompts are scored with metric='logit-diff', not {self.metric}", metric=self.metric)
        if self.text is not None and self.task is not None:
            raise InputError(f"give either {text}= (loss, embedding) or {task}= (logit-diff), not both", text=text, task=task)
        if self.task is not None and not self.task:
            raise InputError(f"{task}= holds no prompt", task=task)

    @property
    def asked_metric(self) -> str | None:
        """The metric asked for: ``logit-diff`` with a task, ``None`` when the model decides."""
        return "logit-diff" if self.metric is None and self.task is not None else self.metric

    def text_choice(self, model: Any) -> TextChoice | None:
        """The text ``model`` is measured on and why (:func:`~headlens.analyses.ablation.texts.choose_text`); None for a task."""
        return None if self.task is not None else choose_text(model, self.text, text_file=self.text_file)

    def source(self, model: Any = None) -> tuple[Any, str]:
        """``(text or task items, label)``: what the items are cut from and how outputs name it
        (``model``: the model the default text is chosen for; None: a model without its own text)."""
        if self.task is not None:
            return list(self.task), self.task_file or "task"
        choice = self.text_choice(model)
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
    on this model (:func:`headlens.analyses.ablation.metrics.check_metric`)."""
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
    choice = spec.text_choice(model)
    source: Any
    source, label = (choice.text, choice.label) if choice is not None else spec.source(model)
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
