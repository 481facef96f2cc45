"""Tasks of pairs: a clean and a corrupted text of the same token length, and the two answers.

A task file is JSONL, one object a line: ``{"clean": ..., "corrupt": ..., "correct": ...,
"incorrect": ...}`` (other keys are ignored).  ``clean`` and ``corrupt`` are framed as every
prompt is (:meth:`headlens.probes.loading.LoadedModel.frame`) and must tokenize to the same
length; ``correct`` and ``incorrect`` must each be one token (with the leading space the model
sees, e.g. ``" Mary"``).  Anything else is refused in one line naming the line number.

The metric of a pair (:func:`pair_eval_sets`) is the one of :mod:`headlens.analyses.measure`:
``logit-diff`` at the last real position on decoders whose output head was loaded; the
embedding metric ``1 - cos(e, e_clean)`` (``e_clean`` the clean text's sentence embedding) on
encoders and on models whose output head is new.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from headlens.analyses.measure.embedding import sentence_embeddings
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.metrics import default_metric
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.jsonl import read_jsonl

log = logging.getLogger(__name__)

__all__ = [
    "MIN_PAIRS",
    "PairItem",
    "PairTask",
    "check_pairs",
    "read_pair_file",
    "pair_items",
    "TaskSource",
    "tokenize_pairs",
    "padded_pairs",
    "pair_task",
    "pair_eval_sets",
]

_KEYS = ("clean", "corrupt", "correct", "incorrect")
#: What ``task=`` takes (:func:`pair_items`): a JSONL file's path, or the pairs in memory (a list of
#: dicts with the four keys, or a DataFrame with those columns).
TaskSource: TypeAlias = str | os.PathLike[str] | Sequence[Mapping[str, Any]] | pd.DataFrame
#: The fewest pairs a task may hold: an effect's interval over pairs needs two.
MIN_PAIRS = 2
#: Bytes a pair costs besides its token rows (its Python objects, its values per head).
_PAIR_OVERHEAD = 2048


def check_pairs(n: object, *, width: int = 64, subject: str | None = None) -> int:
    """The one rule on how many pairs a task holds, a built-in task's ``n_pairs`` or a task
    file's lines alike: at least :data:`MIN_PAIRS`, and within
    :func:`headlens.probes.counts.check_count`'s bounds for pairs of ``width`` tokens
    (``subject``: how the error names the count, e.g. ``"task file t.jsonl holds 1 pair"``)."""
    return check_count(
        "n_pairs",
        n,
        minimum=MIN_PAIRS,
        bytes_each=4 * 8 * max(int(width), 1) + _PAIR_OVERHEAD,
        why="an effect's interval over pairs needs two",
        subject=subject,
    )


@dataclass(frozen=True)
class PairItem:
    """One pair as written: texts and answers, and where it came from (``"line 3"``, ``"pair 3"``)."""

    clean: str
    corrupt: str
    correct: str
    incorrect: str
    where: str = ""


@dataclass
class PairTask:
    """Token ids of the pairs, right-padded; clean and corrupt rows have the same length."""

    clean: Int[Tensor, "pair pos"]
    corrupt: Int[Tensor, "pair pos"]
    lengths: Int[Tensor, " pair"]
    correct: Int[Tensor, " pair"]
    incorrect: Int[Tensor, " pair"]
    prepend_bos: bool
    source: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.clean.shape[0])

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for t in (self.clean, self.corrupt, self.lengths, self.correct, self.incorrect):
            h.update(t.to(torch.int64).contiguous().numpy().tobytes())
            h.update(b"|")
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        return {
            **self.source,
            "n_pairs": len(self),
            "width": int(self.clean.shape[1]),
            "prepend_bos": self.prepend_bos,
            "fingerprint": self.fingerprint(),
        }


def _pair_item(obj: Any, where: str, **at: Any) -> PairItem:
    """One pair from a JSON object or a row: the four non-empty string fields, two different answers."""
    if not isinstance(obj, Mapping):
        raise InputError(f'{where}: each pair must be an object with "clean", "corrupt", "correct" and "incorrect"', **at)
    for key in _KEYS:
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise InputError(f'{where}: needs a non-empty string field "{key}"', **at)
    if obj["correct"] == obj["incorrect"]:
        raise InputError(f"{where}: correct and incorrect are the same text {obj['correct']!r}", **at)
    return PairItem(obj["clean"], obj["corrupt"], obj["correct"], obj["incorrect"], where=where)


def read_pair_file(path: str | os.PathLike[str]) -> list[PairItem]:
    """The pairs of a JSONL task file; one-line :class:`InputError` naming ``path:line`` otherwise."""
    rows = read_jsonl(Path(path), what="task file")
    items = [_pair_item(obj, f"{path}:{lineno}", path=str(path), line=lineno) for lineno, obj in rows]
    if not items:
        raise InputError(f"task file {path} holds no pair", path=str(path))
    return items


def pair_items(task: TaskSource) -> tuple[list[PairItem], dict[str, Any]]:
    """The pairs ``task=`` names and how the manifest records them, read and checked before any
    model is needed: a JSONL file's path (str or Path), or the pairs in memory, a list of dicts
    (or :class:`PairItem`) or a DataFrame with the columns ``clean``, ``corrupt``, ``correct``,
    ``incorrect`` (others ignored).  The pair count meets :func:`check_pairs`'s rule."""
    if isinstance(task, (str, os.PathLike)):
        items = read_pair_file(task)
        said, source = f"task file {task}", {"kind": "file", "task": str(task)}
    else:
        if isinstance(task, pd.DataFrame):
            rows: Any = task.to_dict("records")
        elif isinstance(task, Sequence) and not isinstance(task, (bytes, Mapping)):
            rows = task
        else:
            raise InputError(
                "task= takes a JSONL file's path or the pairs: a list of dicts with clean, corrupt, correct and incorrect, or a "
                f"DataFrame with those columns; got {type(task).__name__}",
                parameter="task",
            )
        items = [r if isinstance(r, PairItem) else _pair_item(r, f"task[{i}]", parameter="task") for i, r in enumerate(rows)]
        said, source = "task=", {"kind": "pairs", "task": f"{len(items)} pairs given in memory"}
    check_pairs(len(items), subject=f"{said} holds {len(items)} pair{'s' if len(items) != 1 else ''}")
    return items, source


def _one_token(tokenizer: Any, text: str, where: str, key: str) -> int:
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) != 1:
        pieces = [tokenizer.decode([i]) for i in ids]
        raise InputError(
            f"{where}: {key} {text!r} is {len(ids)} tokens {pieces}, not one;"
            " use a single-token word (with its leading space, e.g. ' Mary')",
            key=key,
        )
    return int(ids[0])


def _longest_token_chars(tokenizer: Any) -> int | None:
    """Characters of the tokenizer's longest vocabulary entry (as written in its vocabulary: at least
    the text characters one token covers), or None when its vocabulary cannot be read."""
    try:
        return max((len(k) for k in tokenizer.get_vocab()), default=None)
    except (AttributeError, TypeError, NotImplementedError):
        return None


def _check_chars(item: PairItem, where: str, n_ctx: int, longest: int | None) -> None:
    """Refuse a text that cannot fit the context before it is tokenized (a 20 MB line took 66 s and
    3.3 GB to tokenize): its non-space characters need more than ``n_ctx`` tokens of ``longest``."""
    if not longest:
        return
    limit = n_ctx * longest
    for key in ("clean", "corrupt"):
        text = getattr(item, key)
        if len(text) > limit and len("".join(text.split())) > limit:
            raise InputError(
                f"{where}: {key} is {len(text):,} characters, more than the model's context of {n_ctx} tokens can hold "
                f"(at most {limit:,} non-space characters at {longest} per token, this tokenizer's longest)",
                where=where,
            )


def tokenize_pairs(model: Any, items: Sequence[PairItem], *, prepend_bos: bool = True, source: dict[str, Any] | None = None) -> PairTask:
    """Frame and tokenize ``items``; refuse (naming the item) pairs of different token lengths,
    answers that are not one token, and pairs longer than the model's context."""
    if not items:
        raise InputError("the task holds no pair")
    prefix, suffix = model.frame(prepend_bos)
    tok = model.tokenizer
    longest = _longest_token_chars(tok)
    rows_c, rows_k, correct, incorrect = [], [], [], []
    for i, item in enumerate(items, start=1):
        where = item.where or f"pair {i}"
        _check_chars(item, where, model.n_ctx, longest)
        a = prefix + [int(t) for t in tok(item.clean, add_special_tokens=False)["input_ids"]] + suffix
        b = prefix + [int(t) for t in tok(item.corrupt, add_special_tokens=False)["input_ids"]] + suffix
        if len(a) != len(b):
            raise InputError(f"{where}: clean is {len(a)} tokens and corrupt {len(b)}; a pair must have the same token length", where=where)
        if len(a) > model.n_ctx:
            raise InputError(f"{where}: {len(a)} tokens, longer than the model's context of {model.n_ctx}", where=where)
        if a == b:
            log.warning("%s: clean and corrupt are the same tokens", where)
        rows_c.append(a)
        rows_k.append(b)
        correct.append(_one_token(tok, item.correct, where, "correct"))
        incorrect.append(_one_token(tok, item.incorrect, where, "incorrect"))
    return padded_pairs(tok, rows_c, rows_k, correct, incorrect, prepend_bos=prepend_bos, source=dict(source or {"kind": "pairs"}))


def padded_pairs(
    tokenizer: Any,
    clean_rows: Sequence[Sequence[int]],
    corrupt_rows: Sequence[Sequence[int]],
    correct: Sequence[int],
    incorrect: Sequence[int],
    *,
    prepend_bos: bool,
    source: dict[str, Any],
) -> PairTask:
    """A :class:`PairTask` of framed token rows (each clean row as long as its corrupt one),
    right-padded with the tokenizer's pad id (0 without one)."""
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = int(pad if pad is not None else 0)
    width = max(len(r) for r in clean_rows)
    clean = torch.full((len(clean_rows), width), pad, dtype=torch.long)
    corrupt = clean.clone()
    for i, (a, b) in enumerate(zip(clean_rows, corrupt_rows, strict=True)):
        clean[i, : len(a)] = torch.tensor(a)
        corrupt[i, : len(b)] = torch.tensor(b)
    return PairTask(
        clean=clean,
        corrupt=corrupt,
        lengths=torch.tensor([len(r) for r in clean_rows], dtype=torch.long),
        correct=torch.tensor(list(correct), dtype=torch.long),
        incorrect=torch.tensor(list(incorrect), dtype=torch.long),
        prepend_bos=prepend_bos,
        source=source,
    )


def pair_task(model: Any, task: TaskSource, *, prepend_bos: bool = True) -> PairTask:
    """:func:`pair_items` then :func:`tokenize_pairs`: a file or the pairs in memory; fewer than
    :data:`MIN_PAIRS` pairs are refused by the rule that refuses ``n_pairs=1`` (:func:`check_pairs`)."""
    items, source = pair_items(task)
    return tokenize_pairs(model, items, prepend_bos=prepend_bos, source=source)


def pair_eval_sets(model: Any, task: PairTask, *, batch_size: int = 8) -> tuple[EvalSet, EvalSet]:
    """``(clean, corrupt)`` evaluation sets measured by the same metric (see the module doc)."""
    metric, why = default_metric(model)
    if metric == "embedding":
        log.info("patching measures the embedding metric: %s", why)
        with torch.inference_mode():
            ref = torch.cat(
                [
                    sentence_embeddings(
                        model,
                        task.clean[i : i + batch_size, : int(task.lengths[i : i + batch_size].max())],
                        task.lengths[i : i + batch_size],
                    ).cpu()
                    for i in range(0, len(task), batch_size)
                ]
            )
        return _embedding_set(task, task.clean, ref), _embedding_set(task, task.corrupt, ref)
    return _logit_diff_set(task, task.clean), _logit_diff_set(task, task.corrupt)


def _embedding_set(task: PairTask, tokens: Tensor, reference: Tensor) -> EvalSet:
    return EvalSet(
        tokens=tokens, lengths=task.lengths, metric="embedding", prepend_bos=task.prepend_bos, reference=reference, source=task.source
    )


def _logit_diff_set(task: PairTask, tokens: Tensor) -> EvalSet:
    return EvalSet(
        tokens=tokens,
        lengths=task.lengths,
        metric="logit-diff",
        prepend_bos=task.prepend_bos,
        correct=task.correct,
        incorrect=task.incorrect,
        source=task.source,
    )
