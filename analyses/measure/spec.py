"""What a study measures on, as a user gives it, defined once: :class:`EvalSpec` (metric, text or
task, windows, sentences, framing; ``ablate``, ``prune``, ``gqa``, ``projections``), the metrics
(:data:`METRICS`) and a task's prompt (:class:`TaskItem`).

:class:`EvalSpec` carries each setting's type, default, help text and range
(:func:`headlens.probes.settings.setting`): the study signatures of :mod:`headlens.reports.api`
repeat them as keyword parameters and the click options are generated from them.  Light (the
standard library and light parts of :mod:`headlens.probes`): ``headlens ablate --help`` reads this
module.  :func:`headlens.analyses.measure.setup.eval_setup` turns an :class:`EvalSpec` into the
evaluation set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headlens.probes.errors import InputError
from headlens.probes.settings import check_range, setting

__all__ = ["METRICS", "EvalSpec", "TaskItem"]

#: Metrics and their sign (+1: higher is worse; -1: lower is worse).
#: Metric name -> +1 when a higher value is worse (loss), -1 when a lower value is worse.
METRICS: dict[str, int] = {"loss": +1, "logit-diff": -1, "embedding": +1}


@dataclass(frozen=True)
class TaskItem:
    """One task prompt and its two single-token continuations."""

    prompt: str
    correct: str
    incorrect: str


@dataclass(frozen=True, kw_only=True)
class EvalSpec:
    """What an ablation, pruning or design study measures on, as a user gives it.

    ``metric``: ``loss``, ``logit-diff``, ``embedding`` or ``None`` (``logit-diff`` with a
    ``task``, else the model's default, :func:`~headlens.analyses.measure.setup.choose_metric`).
    ``text``: the evaluation text, or a named text (``"heldout"``: the model's own held-out text;
    ``"builtin"``: the built-in English text); ``None``: the model's own held-out text when it
    carries one (the demo model), else the built-in text
    (:func:`headlens.analyses.measure.texts.choose_text`, the one rule); ``text_file`` the file it
    was read from (outputs name the text by it); ``task``: prompts with a correct and an incorrect
    token (``logit-diff``) and ``task_file`` the file they were read from.
    ``n_windows`` x ``window`` tokens for the loss; ``n_sentences`` of at most ``window`` tokens
    for the embedding change, complete sentences only when ``complete_sentences`` (``None``:
    only for the built-in text).  ``prepend_bos``: the model's framing tokens or none.
    What the items are cut from: :func:`headlens.analyses.measure.setup.text_choice` and
    :func:`~headlens.analyses.measure.setup.eval_source`.
    """

    metric: str | None = setting(
        None,
        help="loss: next-token cross-entropy on text windows (default); logit-diff: logit(correct) - logit(incorrect) on --task "
        "prompts; embedding: 1 - cosine between the mean-pooled sentence embedding (last hidden state) and the unablated one, "
        "over sentences of the text (default when the model's output head is newly initialised or the model is an encoder; reads "
        "no output head).",
        choices=tuple(METRICS),
    )
    text: str | None = setting(
        None, help="The evaluation text itself, or heldout (the model's own held-out text) or builtin (the shipped text).", cli=False
    )
    text_file: str | None = setting(
        None,
        help="Evaluation text (default: the model's own held-out text when it carries one, as the demo model does, else the text "
        "that ships with headlens, analyses/data/eval_text.txt; the manifest says which and why); for the embedding metric it is "
        "cut into sentences (at line ends and after . ! ?), one item each.",
        path="file",
    )
    task: Sequence[TaskItem] | None = setting(
        None, help="Task prompts, each with a correct and an incorrect single-token continuation.", cli=False
    )
    task_file: str | None = setting(
        None,
        help='JSONL task: {"prompt": ..., "correct": " Mary", "incorrect": " John"} per line (single-token targets); implies '
        "--metric logit-diff.",
        flag="--task",
        path="file",
    )
    n_windows: int = setting(16, help="Evaluation windows cut from the text.", minimum=1)
    window: int = setting(
        128,
        help="Tokens per evaluation window (BOS included); for the embedding metric, the most tokens per sentence ([CLS]/[SEP] "
        "included; longer ones are cut).",
        minimum=2,
    )
    n_sentences: int = setting(
        64, help="--metric embedding: sentences measured (evenly spaced through the text when it holds more).", minimum=1
    )
    prepend_bos: bool = setting(
        True,
        help="Do not prepend BOS (TransformerLens prepends it; Hugging Face and most papers do not); for an encoder, no "
        "[CLS]/[SEP] either.",
        flag="--no-bos",
    )
    complete_sentences: bool | None = setting(
        None, help="Embedding metric: complete sentences only (default: only for the built-in text).", cli=False
    )

    def __post_init__(self) -> None:
        for name in ("n_windows", "window", "n_sentences"):  # the declared ranges, before any text is cut
            check_range(self, name)
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
