"""What an ablation is measured on: an evaluation set and a per-item metric.

Two kinds of evaluation set:

* **text** (metric ``loss``): ``n_windows`` non-overlapping windows of ``window`` tokens cut
  from a text (by default the evaluation text that ships with headlens, see
  ``analyses/data/SOURCES.md``).  An item is a window; its value is the mean next-token
  cross-entropy (nats) over the window's ``window - 1`` predictions.  All windows have the
  same length, so the mean over items is also the mean over tokens.
* **task** (metric ``logit-diff``): JSONL prompts, one object a line,
  ``{"prompt": "When Mary and John went to the store, John gave a drink to",
  "correct": " Mary", "incorrect": " John"}``.  ``correct`` and ``incorrect`` must each be
  exactly one token (write the leading space the model sees).  An item's value is
  ``logit[correct] - logit[incorrect]`` at the prompt's last token.

Prompts are right-padded; padded positions never count in any value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from probes.errors import InputError, StimulusError
from probes.prompts import tokenize_prompts

__all__ = [
    "METRICS",
    "EvalSet",
    "TaskItem",
    "text_eval_set",
    "repeated_tokens_eval_set",
    "read_task",
    "task_eval_set",
    "item_values",
    "metric_positions",
    "model_values",
    "worse_by",
]

#: Metric name -> +1 when a higher value is worse (loss), -1 when a lower value is worse.
METRICS: dict[str, int] = {"loss": +1, "logit-diff": -1}


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

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise InputError(f"unknown metric {self.metric!r}: choose from {', '.join(METRICS)}", metric=self.metric)
        if self.metric == "logit-diff" and (self.correct is None or self.incorrect is None):
            raise InputError("the logit-diff metric needs a correct and an incorrect token per prompt (--task FILE)")

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

    def fingerprint(self) -> str:
        """SHA-256 of the token ids, lengths and targets: identifies the data in a journal."""
        h = hashlib.sha256()
        for t in (self.tokens, self.lengths, self.correct, self.incorrect):
            if t is not None:
                h.update(t.to(torch.int64).contiguous().numpy().tobytes())
                h.update(b"|")
        h.update(f"{self.metric}|{self.loss_start}".encode())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        out = {**self.source, "metric": self.metric, "n_items": len(self), "n_tokens": self.n_tokens, "prepend_bos": self.prepend_bos, "fingerprint": self.fingerprint()}
        if self.loss_start:
            out["loss_start"] = self.loss_start
        return out


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
) -> EvalSet:
    """``n_windows`` windows of ``window`` tokens (BOS included when ``prepend_bos``) cut from ``text``.

    Empty text, a window longer than the model's context, or a text too short for the
    windows asked for: one-line :class:`InputError` / :class:`StimulusError`.
    """
    if not text.strip():
        raise InputError(f"{source} is empty", source=source)
    if window > n_ctx:
        raise InputError(f"--window {window} is longer than the model's context of {n_ctx} tokens", window=window)
    if window < 2 + int(prepend_bos):
        raise InputError(f"--window {window} is too short: need at least {2 + int(prepend_bos)} tokens for one next-token prediction", window=window)
    from analyses.stimuli import text_windows

    try:
        tokens = text_windows(tokenizer, text, window, n_windows, prepend_bos=prepend_bos, bos_id=bos_id)
    except StimulusError as exc:
        raise StimulusError(f"{source}: {exc}; pass a longer text, or fewer/shorter windows (--n-windows, --window)") from exc
    lengths = torch.full((tokens.shape[0],), window, dtype=torch.long)
    return EvalSet(tokens=tokens, lengths=lengths, metric="loss", prepend_bos=prepend_bos, source={"kind": "text", "text": source, "n_windows": n_windows, "window": window})


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
    """Loss on ``n`` random token sequences repeated twice (``analyses.stimuli.random_repeated_tokens``).

    With ``second_half_only`` the loss counts only predictions inside the second copy, where
    a model can predict by copying (induction): predictions made at positions from the
    second copy's first token on (``T + 1`` with BOS, ``T`` without)."""
    from analyses.stimuli import random_repeated_tokens

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
    )


@dataclass(frozen=True)
class TaskItem:
    """One task prompt and its two single-token continuations."""

    prompt: str
    correct: str
    incorrect: str


def read_task(path: str | Path) -> list[TaskItem]:
    """Read a JSONL task file (``prompt``, ``correct``, ``incorrect`` string fields per line)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"task file {path} {'is a folder' if p.is_dir() else 'does not exist'}", path=str(path))
    try:
        raw = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read task file {path}: {exc}".splitlines()[0], path=str(path)) from exc
    items: list[TaskItem] = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{lineno}: not valid JSON ({exc.msg})", path=str(path), line=lineno) from exc
        if not isinstance(obj, dict):
            raise InputError(f'{path}:{lineno}: each line must be a JSON object with "prompt", "correct" and "incorrect"', path=str(path), line=lineno)
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
            f"{where}: {key} {text!r} is {len(ids)} tokens {pieces}, not one; use a single-token word (with its leading space, e.g. ' Mary')",
            key=key,
            text=text,
        )
    return int(ids[0])


def task_eval_set(tokenizer: Any, items: Sequence[TaskItem], *, prepend_bos: bool, n_ctx: int, source: str = "task") -> EvalSet:
    """Tokenize task prompts (right-padded) and check that every target is one token."""
    correct, incorrect = [], []
    for i, item in enumerate(items, start=1):
        where = f"{source} prompt {i}"
        correct.append(_single_token(tokenizer, item.correct, where=where, key="correct"))
        incorrect.append(_single_token(tokenizer, item.incorrect, where=where, key="incorrect"))
    batch = tokenize_prompts(tokenizer, [it.prompt for it in items], prepend_bos=prepend_bos, n_ctx=n_ctx)
    return EvalSet(
        tokens=batch.tokens,
        lengths=batch.lengths,
        metric="logit-diff",
        prepend_bos=prepend_bos,
        correct=torch.tensor(correct, dtype=torch.long),
        incorrect=torch.tensor(incorrect, dtype=torch.long),
        source={"kind": "task", "task": source, "n_prompts": len(items)},
    )


def metric_positions(data: EvalSet, lengths: Int[Tensor, " batch"]) -> list[int] | None:
    """Positions whose logits the metric reads: all of them for loss (``None``), the distinct
    last positions for logit-diff."""
    if data.metric == "loss":
        return None
    return sorted({int(n) - 1 for n in lengths})


def item_values(
    logits: Float[Tensor, "batch pos vocab"],
    tokens: Int[Tensor, "batch pos"],
    lengths: Int[Tensor, " batch"],
    data: EvalSet,
    rows: Sequence[int],
    *,
    positions: Sequence[int] | None = None,
) -> Float[Tensor, " batch"]:
    """The metric of each item (float64), from the logits of a forward on ``tokens``.

    ``loss``: mean over real positions ``loss_start <= t < length - 1`` of ``-log softmax(logits[t])[tokens[t+1]]``.
    ``logit-diff``: ``logits[length-1, correct] - logits[length-1, incorrect]``.
    ``logits`` may hold several copies of the batch stacked on dim 0 (``copies x batch``), and,
    when ``positions`` is given, only the logits of those positions (dim 1).
    """
    n = tokens.shape[0]
    copies = logits.shape[0] // n
    dev = logits.device
    lengths = lengths.to(dev)
    if data.metric == "loss":
        targets = tokens[:, 1:].to(dev).repeat(copies, 1)  # [copies*batch, pos-1]
        pos = torch.arange(tokens.shape[1] - 1, device=dev)[None, :]
        valid = ((pos < (lengths[:, None] - 1)) & (pos >= data.loss_start)).repeat(copies, 1)
        out = torch.empty(logits.shape[0], dtype=torch.float64, device=dev)
        for i in range(logits.shape[0]):  # one item at a time: the float32 [pos, vocab] temporaries stay small
            x = logits[i, :-1].float()
            top = x.max(-1).values
            sum_exp = torch.exp(x - top[:, None]).sum(-1)
            # -log p(y) = (max - x_y) + log(sum exp(x - max)); the log and the sum of the two parts
            # in float64, so a loss near 10 nats keeps ~1e-7 absolute precision instead of float32's ~1e-6
            nll = (top - x.gather(-1, targets[i][:, None]).squeeze(-1)).double() + torch.log(sum_exp.double())
            out[i] = (nll * valid[i]).sum() / valid[i].sum().clamp(min=1)
        return out
    assert data.correct is not None and data.incorrect is not None
    last = (lengths - 1).repeat(copies)
    if positions is not None:
        where = {p: i for i, p in enumerate(positions)}
        last = torch.tensor([where[int(p)] for p in last], device=dev)
    idx = torch.arange(logits.shape[0], device=dev)
    final = logits[idx, last]  # [copies*batch, vocab]
    c = data.correct[list(rows)].to(dev).repeat(copies)
    w = data.incorrect[list(rows)].to(dev).repeat(copies)
    return final[idx, c].double() - final[idx, w].double()


def model_values(
    model: Any,
    tokens: Int[Tensor, "batch pos"],
    lengths: Int[Tensor, " batch"],
    data: EvalSet,
    rows: Sequence[int],
    *,
    copies: int = 1,
    run: Any = None,
) -> Float[Tensor, " batch"]:
    """Run the model on ``tokens`` repeated ``copies`` times and return each copy's item values.

    ``run(tokens, **kwargs)`` performs the forward (default: the bridge); for logit-diff it is
    asked for the logits of the needed positions only (``logits_to_keep``, when the model
    supports it: the unembedding of every other position is skipped).
    """
    run = run or (lambda t, **kw: model.bridge(t, return_type="logits", **kw))
    toks = tokens.repeat(copies, 1).to(model.device)
    positions = metric_positions(data, lengths)
    if positions is not None and model.extra.get("logits_to_keep", True):
        try:
            logits = run(toks, logits_to_keep=torch.tensor(positions, device=model.device))
        except TypeError:
            model.extra["logits_to_keep"] = False
        else:
            if logits.shape[1] == len(positions):
                return item_values(logits, tokens, lengths, data, rows, positions=positions)
            model.extra["logits_to_keep"] = False  # ignored by this model
    logits = run(toks)
    return item_values(logits, tokens, lengths, data, rows)


def worse_by(metric: str, value: float, baseline: float) -> float:
    """Relative degradation: ``(value - baseline) / |baseline|`` for loss, the opposite sign for logit-diff."""
    if baseline == 0:
        return float("inf") if METRICS[metric] * (value - baseline) > 0 else 0.0
    return METRICS[metric] * (value - baseline) / abs(baseline)
