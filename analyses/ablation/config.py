"""The settings of ablation, pruning and what they are measured on, defined once.

:class:`AblationConfig` (``headlens ablate``), :class:`PruneConfig` (``headlens prune``) and
:class:`EvalSpec` (what a study measures on: metric, text or task, windows, sentences, framing;
``ablate``, ``prune``, ``gqa``, ``projections``) carry each setting's type, default, help text and
range (:func:`headlens.probes.settings.setting`): the study signatures of
:mod:`headlens.reports.api` repeat them as keyword parameters and the click options are generated
from them.  Light (the standard library and light parts of :mod:`headlens.probes`): ``headlens
ablate --help`` reads this module; the modules that run the studies re-export these classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.head_lists import as_heads
from headlens.probes.settings import check_range, check_seed, seed_setting, setting

__all__ = ["METHODS", "METRICS", "AblationConfig", "PruneConfig", "EvalSpec", "TaskItem"]

#: How an ablated head's ``z`` is replaced.
METHODS = ("zero", "mean", "resample")
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
class AblationConfig:
    """How to run an ablation study.

    ``heads``/``layers`` restrict the table (default: every head not removed by the mask).
    ``batch_size`` items go through the model at once; ``heads_per_forward`` heads of one layer
    are ablated in one forward (one per copy of the batch; ``None`` = as many as keep a forward
    under ``AUTO_TOKENS_PER_FORWARD`` tokens).  ``prefix_reuse`` runs each ablation from its
    layer on (checked against a full forward once; off = one full forward per head).
    ``n_bootstrap`` resamples of the items give the ``ci`` interval of each delta (``seed``).
    ``seed`` also draws the resample sources.  ``attribution`` is skipped, with a note in
    ``AblationRun.info["attribution"]``, for the embedding metric (its gradient is zero).
    """

    method: str = setting(
        "zero",
        help="How an ablated head's z is replaced: zeros, its mean over the evaluation set, or z from another item (seeded).",
        choices=METHODS,
    )
    heads: tuple[tuple[int, int], ...] | None = setting(
        None, help="Heads to ablate, one at a time, as LAYER.HEAD, e.g. 5.1,5.5 (default: all)."
    )
    layers: tuple[int, ...] | None = setting(None, help="Only heads in these layers, e.g. 0,3.")
    batch_size: int = setting(8, help="Windows, prompts or sentences per forward.", minimum=1)
    heads_per_forward: int | None = setting(
        None,
        help="Heads of one layer ablated per forward, one per batch copy (default: as many as fit 2048 tokens).",
        minimum=1,
    )
    prefix_reuse: bool = setting(
        True, help="Run each ablation from its layer on, from the stored residual stream (off: a full forward per head).", cli=False
    )
    n_bootstrap: int = setting(1000, help="Bootstrap resamples of the items for the 95% interval of each delta.", minimum=0)
    ci: float = setting(0.95, help="Confidence level of the intervals.", minimum=0, maximum=1, min_open=True, max_open=True, cli=False)
    seed: int = seed_setting(0, help="Seed of the bootstrap, of resample sources and of the attribution's rank-correlation test.")
    attribution: bool = setting(True, help="Skip the first-order (gradient) estimate.", flag="--no-attribution")

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.heads is not None:
            object.__setattr__(self, "heads", as_heads(self.heads, name="heads"))
        if self.method not in METHODS:
            raise InputError(f"unknown ablation method {self.method!r}: choose from {', '.join(METHODS)}", method=self.method)
        for name in ("batch_size", "heads_per_forward", "ci"):  # the declared ranges, in the parameters' names
            check_range(self, name)
        check_count("n_bootstrap", self.n_bootstrap, minimum=0)


@dataclass(frozen=True, kw_only=True)
class PruneConfig:
    """``step``: fraction of the remaining heads removed per step; ``max_increase``: largest
    relative degradation accepted for the removable fraction; ``random_seeds``: random orders
    in the control (seeded from ``seed``); ``max_fraction``: stop once this fraction is removed."""

    step: float = setting(0.1, help="Fraction of the remaining heads removed per step.", minimum=0, maximum=1, min_open=True)
    max_increase: float = setting(
        0.05,
        help="Largest relative worsening of the metric for the removable fraction (0.05 = 5% of the unablated loss); for --metric "
        "embedding the largest embedding change itself (0.05 = cosine to the unablated embedding at least 0.95).",
        minimum=0,
    )
    random_seeds: int = setting(3, help="Random pruning orders in the control.", minimum=0)
    seed: int = seed_setting(0, help="Seed of the random orders.")
    max_fraction: float = setting(1.0, help="Stop once this fraction of heads is removed.", minimum=0, maximum=1, min_open=True)
    batch_size: int = setting(8, help="Windows, prompts or sentences per forward.", minimum=1)

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if not 0 < self.step <= 1:
            raise InputError(f"step must be in (0, 1], got {self.step}", step=self.step)
        if self.max_increase < 0:
            raise InputError(f"max_increase must be >= 0, got {self.max_increase}", max_increase=self.max_increase)
        check_count("random_seeds", self.random_seeds, minimum=0)
        if not 0 < self.max_fraction <= 1:
            raise InputError(f"max_fraction must be in (0, 1], got {self.max_fraction}", max_fraction=self.max_fraction)
        check_range(self, "batch_size")


@dataclass(frozen=True, kw_only=True)
class EvalSpec:
    """What an ablation, pruning or design study measures on, as a user gives it.

    ``metric``: ``loss``, ``logit-diff``, ``embedding`` or ``None`` (``logit-diff`` with a
    ``task``, else the model's default, :func:`~headlens.analyses.ablation.setup.choose_metric`).
    ``text``: the evaluation text, or a named text (``"heldout"``: the model's own held-out text;
    ``"builtin"``: the built-in English text); ``None``: the model's own held-out text when it
    carries one (the demo model), else the built-in text
    (:func:`headlens.analyses.ablation.texts.choose_text`, the one rule); ``text_file`` the file it
    was read from (outputs name the text by it); ``task``: prompts with a correct and an incorrect
    token (``logit-diff``) and ``task_file`` the file they were read from.
    ``n_windows`` x ``window`` tokens for the loss; ``n_sentences`` of at most ``window`` tokens
    for the embedding change, complete sentences only when ``complete_sentences`` (``None``:
    only for the built-in text).  ``prepend_bos``: the model's framing tokens or none.
    What the items are cut from: :func:`headlens.analyses.ablation.setup.text_choice` and
    :func:`~headlens.analyses.ablation.setup.eval_source`.
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
