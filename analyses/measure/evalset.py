"""Evaluation sets: what an ablation is measured on (text windows, repeated random tokens, task
prompts), with the metric each is measured by.  Sentence sets for the embedding metric are built
in :mod:`headlens.analyses.measure.embedding`; the per-item metric values in
:mod:`headlens.analyses.measure.metrics`.  :mod:`headlens.analyses.measure` documents
the three kinds and re-exports all of it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.analyses.measure.spec import METRICS, TaskItem
from headlens.analyses.stimuli import random_repeated_tokens, text_windows
from headlens.probes.errors import InputError, StimulusError
from headlens.probes.jsonl import read_jsonl
from headlens.probes.prompts import decoder_frame, tokenize_prompts

log = logging.getLogger(__name__)

__all__ = [
    "METRICS",
    "HEAD_METRICS",
    "METRIC_LABELS",
    "EMBEDDING_DEFINITION",
    "EvalSet",
    "TaskItem",
    "text_eval_set",
    "window_basis",
    "repeated_tokens_eval_set",
    "read_task",
    "task_eval_set",
]

#: Metrics computed from the output head's logits (meaningless when the head is new).
HEAD_METRICS: tuple[str, ...] = ("loss", "logit-diff")
#: How each metric is named in printed lines and pages.
METRIC_LABELS: dict[str, str] = {"loss": "loss", "logit-diff": "logit-diff", "embedding": "embedding change (1 - cosine)"}
EMBEDDING_DEFINITION = (
    "1 - cos(e, e0), e = mean over the real tokens (framing tokens included) of the last hidden state, "
    "e0 = the same for the unablated model; averaged over sentences"
)


@dataclass
class EvalSet:
    """Items to evaluate: right-padded tokens plus, for tasks, the two target tokens."""

    tokens: Int[Tensor, "item pos"]
    lengths: Int[Tensor, " item"]
    metric: str
    prepend_bos: bool
    correct: Int[Tensor, " item"] | None = None
    incorrect: Int[Tensor, " item"] | None = None
    source: dict[str, Any] = field(default_factory=dict)
    loss_start: int = 0  # loss counts the predictions made at positions >= loss_start
    #: embedding metric: the unablated model's sentence embeddings ``[item, d_model]`` (float64).
    reference: Float[Tensor, "item d_model"] | None = None
    #: how the items were cut from their source (text windows: token offsets, BOS counted in the
    #: window or not, stride): enough to rebuild every window, and so the loss, by hand
    cut: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise InputError(f"unknown metric {self.metric!r}: choose from {', '.join(METRICS)}", metric=self.metric)
        if self.metric == "logit-diff" and (self.correct is None or self.incorrect is None):
            raise InputError("the logit-diff metric needs a correct and an incorrect token per prompt (task=)")
        if self.metric == "embedding" and (self.reference is None or self.reference.shape[0] != self.tokens.shape[0]):
            raise InputError(
                "the embedding metric needs the unablated sentence embeddings of every item (build the set with embedding_eval_set)"
            )

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def aligned(self) -> bool:
        """True when every item has the same length (position-wise means are meaningful)."""
        return bool((self.lengths == self.lengths[0]).all())

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    def rows(self, batch_size: int) -> list[list[int]]:
        """Consecutive item batches (the same split every run: results are reproducible)."""
        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}", batch_size=batch_size)
        n = len(self)
        return [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]

    def batch(self, rows: Sequence[int]) -> tuple[Tensor, Tensor, int]:
        """``(tokens, lengths, width)`` of ``rows``, trimmed to their longest item."""
        lengths = self.lengths[list(rows)]
        width = int(lengths.max())
        return self.tokens[list(rows), :width], lengths, width

    def longest(self) -> tuple[Tensor, Tensor, int]:
        """:meth:`batch` of the longest item alone (the first of them): no padding, and the input on
        which a check of a shortcut sees the most positions."""
        return self.batch([int(self.lengths.argmax())])

    def fingerprint(self) -> str:
        """SHA-256 of the token ids, lengths and targets: identifies the data in a journal."""
        h = hashlib.sha256()
        for t in (self.tokens, self.lengths, self.correct, self.incorrect):
            if t is not None:
                h.update(t.to(torch.int64).contiguous().numpy().tobytes())
                h.update(b"|")
        h.update(f"{self.metric}|{self.loss_start}".encode())
        return h.hexdigest()

    @property
    def n_predictions(self) -> int:
        """Next-token predictions the loss averages over: positions ``loss_start <= t < length - 1``."""
        return int((self.lengths - 1 - self.loss_start).clamp(min=0).sum())

    def describe(self) -> dict[str, Any]:
        """What the set is, for manifests and journal keys: its source, size, fingerprint, and
        (``cut``) how its items were cut, so that a reader can rebuild them and the loss by hand."""
        out = {
            **self.source,
            "metric": self.metric,
            "n_items": len(self),
            "n_tokens": self.n_tokens,
            "prepend_bos": self.prepend_bos,
            "fingerprint": self.fingerprint(),
        }
        if self.metric == "loss":
            out["n_predictions"] = self.n_predictions
        if self.loss_start:
            out["loss_start"] = self.loss_start
        if self.cut:
            out["cut"] = self.cut
        out["basis"] = self.basis()
        return out

    def basis(self) -> str:
        """One line saying what a value measured on this set is measured on (printed beside every
        loss): e.g. ``16 windows x 128 tokens (BOS + 127 text tokens; 2,032 predictions) of the
        built-in evaluation text``."""
        src, n = self.source, len(self)
        kind = src.get("kind")
        if kind == "text":
            window = int(src.get("window", int(self.lengths.max())))
            framing = self.cut.get("framing") or {"prefix": ["BOS"] if self.prepend_bos else [], "suffix": []}
            return window_basis(
                n_windows=n,
                window=window,
                n_predictions=self.n_predictions,
                text=_source_name(src.get("text")),
                prefix=framing["prefix"],
                suffix=framing["suffix"],
            )
        if kind == "repeated_random_tokens":
            bos = "BOS + " if self.prepend_bos else "no BOS, "
            where = "the second copy" if src.get("second_half_only") else "every position"
            return (
                f"{n} sequences of {bos}{src.get('T')} random tokens repeated twice"
                f" (seed {src.get('seed')}; loss on {where}: {self.n_predictions:,} predictions)"
            )
        if kind == "task":
            return f"{n} prompts of {src.get('task')} ({'BOS + prompt' if self.prepend_bos else 'no BOS'}; last position)"
        if kind == "sentences":
            lo, hi = int(self.lengths.min()), int(self.lengths.max())
            return f"{n} sentences of the {_source_name(src.get('text'))} ({lo}-{hi} tokens, framing tokens included)"
        return f"{n} items ({src.get('text', 'unnamed source')})"


def window_basis(
    *,
    n_windows: int,
    window: int,
    n_predictions: int,
    text: str,
    prefix: Sequence[str] = ("BOS",),
    suffix: Sequence[str] = (),
    how: str = "consecutive from its first token",
) -> str:
    """The one wording of what a loss over text windows is measured on (:meth:`EvalSet.basis`;
    the demo model's card and training log use it for their own windows):
    ``"16 windows x 128 tokens (BOS + 127 text tokens; 2,032 predictions) of the <text>, <how>"``;
    ``prefix``/``suffix``: the framing tokens of each window (none: ``"128 text tokens, no BOS"``)."""
    n_text = window - len(prefix) - len(suffix)
    body = " + ".join([*prefix, f"{n_text} text tokens", *suffix]) if (prefix or suffix) else f"{window} text tokens, no BOS"
    return f"{n_windows:,} windows x {window} tokens ({body}; {n_predictions:,} predictions) of the {text}" + (f", {how}" if how else "")


def _framing_names(tokenizer: Any, prefix: list[int], suffix: list[int]) -> dict[str, list[str]]:
    """How the framing tokens are named in ``cut`` and :meth:`EvalSet.basis`: a lone prefix is the BOS."""
    if len(prefix) == 1 and not suffix:
        return {"prefix": ["BOS"], "suffix": []}
    convert: Callable[[list[int]], Iterable[Any]] | None = getattr(tokenizer, "convert_ids_to_tokens", None)

    def name(ids: list[int]) -> list[str]:
        return [str(t) for t in convert(ids)] if callable(convert) else [str(i) for i in ids]

    return {"prefix": name(prefix) if prefix else [], "suffix": name(suffix) if suffix else []}


def _source_name(label: Any) -> str:
    """``built-in evaluation text`` or ``text of --text-file F`` (for "... of the <name>")."""
    label = str(label or "text")
    return f"text of {label}" if label.startswith("--") else label


def text_eval_set(
    tokenizer: Any,
    text: str,
    *,
    n_windows: int,
    window: int,
    prepend_bos: bool,
    n_ctx: int,
    bos_id: int | None = None,
    source: str = "built-in evaluation text",
    frame: tuple[Sequence[int], Sequence[int]] | None = None,
) -> EvalSet:
    """``n_windows`` windows of ``window`` tokens (BOS included when ``prepend_bos``) cut from ``text``.

    ``frame``: the model's framing (:meth:`headlens.probes.loading.LoadedModel.frame`), which
    replaces ``prepend_bos``/``bos_id`` for the tokens; every caller holding a model passes it.

    Empty text, a window longer than the model's context, or a text too short for the
    windows asked for: one-line :class:`InputError` / :class:`StimulusError`.
    """
    if not text.strip():
        raise InputError(f"{source} is empty", source=source)
    if window > n_ctx:
        raise InputError(f"window={window} is longer than the model's context of {n_ctx} tokens", window=window)
    n_special = int(prepend_bos) if frame is None else len(frame[0]) + len(frame[1])
    if window < 2 + n_special:
        raise InputError(f"window={window} is too short: need at least {2 + n_special} tokens for one next-token prediction", window=window)
    try:
        tokens = text_windows(tokenizer, text, window, n_windows, prepend_bos=prepend_bos, bos_id=bos_id, frame=frame)
    except StimulusError as exc:
        raise StimulusError(f"{source}: {exc}; pass a longer text, or fewer/shorter windows (n_windows=, window=)") from exc
    lengths = torch.full((tokens.shape[0],), window, dtype=torch.long)
    n_pre, n_suf = (int(prepend_bos), 0) if frame is None else (len(frame[0]), len(frame[1]))
    per_window = window - n_pre - n_suf
    cut = {
        "scheme": (
            "the text tokenized once without special tokens, cut into consecutive non-overlapping windows from its first token;"
            " a trailing partial window is dropped"
        ),
        "window_includes_bos": n_pre > 0,
        "framing": _framing_names(tokenizer, tokens[0, :n_pre].tolist(), tokens[0, window - n_suf :].tolist() if n_suf else []),
        "text_tokens_per_window": per_window,
        "stride": per_window,
        "offsets": [i * per_window for i in range(int(tokens.shape[0]))],
        "offset_unit": "index of the window's first text token in the tokenized text",
        "predictions_per_window": window - 1,
        "scored": (
            "every position but the last predicts the next token (positions 0 .. window-2):"
            " the window's first token is context only, never a target"
        ),
    }
    return EvalSet(
        tokens=tokens,
        lengths=lengths,
        metric="loss",
        prepend_bos=prepend_bos,
        source={"kind": "text", "text": source, "n_windows": n_windows, "window": window},
        cut=cut,
    )


def repeated_tokens_eval_set(
    *,
    n: int,
    T: int,
    seed: int,
    vocab_size: int,
    bos_id: int | None,
    prepend_bos: bool = True,
    second_half_only: bool = True,
) -> EvalSet:
    """Loss on ``n`` random token sequences repeated twice (``headlens.analyses.stimuli.random_repeated_tokens``).

    With ``second_half_only`` the loss counts only predictions inside the second copy, where
    a model can predict by copying (induction): predictions made at positions from the
    second copy's first token on (``T + 1`` with BOS, ``T`` without)."""
    exclude = () if bos_id is None else (bos_id,)
    body = random_repeated_tokens(n, T, seed, vocab_size, exclude=exclude)
    if prepend_bos:
        if bos_id is None:
            raise InputError("prepend_bos needs a BOS token id")
        body = torch.cat([torch.full((n, 1), bos_id, dtype=torch.long), body], dim=1)
    start = (T + int(prepend_bos)) if second_half_only else 0
    lengths = torch.full((n,), body.shape[1], dtype=torch.long)
    return EvalSet(
        tokens=body,
        lengths=lengths,
        metric="loss",
        prepend_bos=prepend_bos,
        source={"kind": "repeated_random_tokens", "n": n, "T": T, "seed": seed, "second_half_only": second_half_only},
        loss_start=start,
        cut={
            "scheme": "T random token ids (seeded) then the same T again",
            "window_includes_bos": prepend_bos,
            "length": int(body.shape[1]),
            "loss_from_position": start,
        },
    )


def read_task(path: str | Path) -> list[TaskItem]:
    """Read a JSONL task file (``prompt``, ``correct``, ``incorrect`` string fields per line)."""
    items: list[TaskItem] = []
    for lineno, obj in read_jsonl(path, what="task file"):
        if not isinstance(obj, dict):
            raise InputError(
                f'{path}:{lineno}: each line must be a JSON object with "prompt", "correct" and "incorrect"', path=str(path), line=lineno
            )
        for key in ("prompt", "correct", "incorrect"):
            if not isinstance(obj.get(key), str) or not obj[key]:
                raise InputError(f'{path}:{lineno}: needs a non-empty string field "{key}"', path=str(path), line=lineno)
        if obj["correct"] == obj["incorrect"]:
            raise InputError(f"{path}:{lineno}: correct and incorrect are the same token {obj['correct']!r}", path=str(path), line=lineno)
        items.append(TaskItem(prompt=obj["prompt"], correct=obj["correct"], incorrect=obj["incorrect"]))
    if not items:
        raise InputError(f"task file {path} holds no prompt", path=str(path))
    return items


def _single_token(tokenizer: Any, text: str, *, where: str, key: str) -> int:
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise InputError(
            f"{where}: {key} {text!r} is {len(ids)} tokens {pieces}, not one; use a single-token word (with its leading space, e.g. ' "
            "Mary')",
            key=key,
            text=text,
        )
    return int(ids[0])


def task_eval_set(
    tokenizer: Any,
    items: Sequence[TaskItem],
    *,
    prepend_bos: bool,
    n_ctx: int,
    source: str = "task",
    frame: tuple[Sequence[int], Sequence[int]] | None = None,
) -> EvalSet:
    """Tokenize task prompts (right-padded) and check that every target is one token.

    ``frame``: the model's framing (:meth:`headlens.probes.loading.LoadedModel.frame`; every
    caller holding a model passes it); without it, a bare decoder tokenizer's
    (:func:`headlens.probes.prompts.decoder_frame`)."""
    correct, incorrect = [], []
    for i, item in enumerate(items, start=1):
        where = f"{source} prompt {i}"
        correct.append(_single_token(tokenizer, item.correct, where=where, key="correct"))
        incorrect.append(_single_token(tokenizer, item.incorrect, where=where, key="incorrect"))
    batch = tokenize_prompts(
        tokenizer,
        [it.prompt for it in items],
        prepend_bos=prepend_bos,
        n_ctx=n_ctx,
        frame=decoder_frame(tokenizer, prepend_bos) if frame is None else frame,
    )
    return EvalSet(
        tokens=batch.tokens,
        lengths=batch.lengths,
        metric="logit-diff",
        prepend_bos=prepend_bos,
        correct=torch.tensor(correct, dtype=torch.long),
        incorrect=torch.tensor(incorrect, dtype=torch.long),
        source={"kind": "task", "task": source, "n_prompts": len(items)},
    )
