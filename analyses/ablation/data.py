"""What an ablation is measured on: an evaluation set and a per-item metric.

Three kinds of evaluation set:

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
* **sentences** (metric ``embedding``, :func:`embedding_eval_set`): one sentence per item,
  framed with the model's special tokens (``[CLS] ... [SEP]`` for BERT, see
  :meth:`headlens.probes.loading.LoadedModel.frame`).  An item's value is the **embedding change**
  ``1 - cos(e, e0)``: ``e`` is the sentence embedding of the run being measured, ``e0`` that of
  the unablated model (computed once, one sentence at a time, when the set is built).  The
  sentence embedding is the mean of the last hidden state over every real token, the framing
  tokens included, as sentence-transformers pools all-MiniLM-L6-v2 (its
  ``1_Pooling/config.json``: ``pooling_mode_mean_tokens``; the final normalisation does not
  change a cosine).  The last hidden state is the output of the last block for an encoder
  (BERT's final LayerNorm is inside its last block; equal to ``transformers.AutoModel``'s
  ``last_hidden_state``), the final norm's output for a decoder.  No output head is read, so
  the metric means something when the head is new (``LoadedModel.head_is_new``).  Its
  gradient is zero in the unablated model (``1 - cos`` is at its minimum, 0), so no gradient
  estimate (attribution, Michel importance) can be made from it.

Prompts are right-padded; padded positions never count in any value.  Encoders get the
attention mask in every forward (a bidirectional model would otherwise attend to the padding),
so a batch gives each item what it gets alone.

Loss and logit difference read the output head: :func:`check_metric` refuses them when the head
was newly initialised (random), and next-token loss on a bidirectional encoder.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.probes.errors import InputError, StimulusError, UnsupportedModelError
from headlens.probes.hooks import attached
from headlens.probes.jsonl import read_jsonl
from headlens.probes.prompts import tokenize_prompts

log = logging.getLogger(__name__)

__all__ = [
    "METRICS",
    "HEAD_METRICS",
    "METRIC_LABELS",
    "EMBEDDING_DEFINITION",
    "EvalSet",
    "TaskItem",
    "text_eval_set",
    "repeated_tokens_eval_set",
    "read_task",
    "task_eval_set",
    "split_sentences",
    "embedding_eval_set",
    "hidden_state_hook",
    "sentence_embeddings",
    "default_metric",
    "check_metric",
    "attention_mask",
    "mean_pool",
    "item_values",
    "metric_positions",
    "model_values",
    "worse_by",
]

#: Metric name -> +1 when a higher value is worse (loss), -1 when a lower value is worse.
METRICS: dict[str, int] = {"loss": +1, "logit-diff": -1, "embedding": +1}
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

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise InputError(f"unknown metric {self.metric!r}: choose from {', '.join(METRICS)}", metric=self.metric)
        if self.metric == "logit-diff" and (self.correct is None or self.incorrect is None):
            raise InputError("the logit-diff metric needs a correct and an incorrect token per prompt (--task FILE)")
        if self.metric == "embedding" and (self.reference is None or self.reference.shape[0] != self.tokens.shape[0]):
            raise InputError("the embedding metric needs the unablated sentence embeddings of every item (build the set with embedding_eval_set)")

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
    from headlens.analyses.stimuli import text_windows

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
    """Loss on ``n`` random token sequences repeated twice (``headlens.analyses.stimuli.random_repeated_tokens``).

    With ``second_half_only`` the loss counts only predictions inside the second copy, where
    a model can predict by copying (induction): predictions made at positions from the
    second copy's first token on (``T + 1`` with BOS, ``T`` without)."""
    from headlens.analyses.stimuli import random_repeated_tokens

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
    items: list[TaskItem] = []
    for lineno, obj in read_jsonl(path, what="task file"):
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


# --------------------------------------------------------------------------- sentences and embeddings

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+")


def split_sentences(text: str, *, complete_only: bool = False) -> list[str]:
    """Sentences of ``text``: every line is cut after ``.``, ``!`` or ``?`` (a closing quote or
    bracket may follow) and the whitespace after it; blank pieces are dropped.

    ``complete_only`` keeps only pieces that end with sentence punctuation and have at least
    three words (the built-in evaluation text's headings are not sentences)."""
    out = []
    for line in text.splitlines():
        for piece in _SENTENCE_END.split(line.strip()):
            piece = " ".join(piece.split())
            if not piece:
                continue
            if complete_only and (len(piece.split()) < 3 or not re.search(r"[.!?][\"')\]]?$", piece)):
                continue
            out.append(piece)
    return out


def attention_mask(model: Any, lengths: Int[Tensor, " batch"], width: int, copies: int = 1) -> Tensor | None:
    """``[copies * batch, width]`` 0/1 mask of real tokens for an encoder; ``None`` for a decoder,
    whose causal mask already keeps right padding away from every real token (and whose
    results stay exactly what they were without one)."""
    if not getattr(model, "is_encoder", False):
        return None
    mask = (torch.arange(width)[None, :] < lengths.cpu()[:, None]).long()
    return mask.repeat(copies, 1).to(model.device)


def hidden_state_hook(model: Any) -> str:
    """The hook point holding the last hidden state (what sentence embeddings pool).

    Encoder: the last block's ``hook_resid_post`` (BERT's final LayerNorm is the last block's
    own output norm; the bridge's ``ln_final`` is the MLM head's transform).  Decoder: the
    final norm's output (``ln_final.hook_out``) when the bridge has one, else the last block's
    ``hook_resid_post``.  Both equal ``transformers.AutoModel``'s ``last_hidden_state``.
    """
    last = f"blocks.{model.n_layers - 1}.hook_resid_post"
    if getattr(model, "is_encoder", False):
        return last
    return "ln_final.hook_out" if "ln_final.hook_out" in model.bridge.hook_dict else last


class _StopForward(Exception):
    """Raised by the hook that has seen the last hidden state: the output head never runs."""


def _last_hidden(model: Any, toks: Tensor, mask: Tensor | None, run: Any) -> Float[Tensor, "batch pos d_model"]:
    store: dict[str, Tensor] = {}

    def grab(x: Tensor, hook: Any = None) -> None:  # noqa: ARG001
        store["h"] = x
        raise _StopForward

    kwargs = {} if mask is None else {"attention_mask": mask}
    try:
        with attached(model.bridge, [(hidden_state_hook(model), grab)]):
            run(toks, **kwargs)
    except _StopForward:
        pass
    if "h" not in store:
        raise RuntimeError(f"the forward pass never reached {hidden_state_hook(model)}")
    return store["h"]


def mean_pool(hidden: Float[Tensor, "batch pos d_model"], lengths: Int[Tensor, " batch"]) -> Float[Tensor, "batch d_model"]:
    """Mean over positions ``< length`` of each row (float64)."""
    real = (torch.arange(hidden.shape[1], device=hidden.device)[None, :] < lengths.to(hidden.device)[:, None]).to(torch.float64)
    return (hidden.double() * real[:, :, None]).sum(1) / real.sum(1, keepdim=True).clamp(min=1)


def sentence_embeddings(model: Any, tokens: Int[Tensor, "batch pos"], lengths: Int[Tensor, " batch"], *, run: Any = None) -> Float[Tensor, "batch d_model"]:
    """Mean-pooled last hidden state of each row (float64), with whatever hooks are attached;
    the pass stops at the last hidden state (the output head never runs)."""
    run = run or (lambda t, **kw: model.bridge(t, return_type=None, **kw))
    width = int(tokens.shape[1])
    hidden = _last_hidden(model, tokens.to(model.device), attention_mask(model, lengths, width), run)
    return mean_pool(hidden, lengths)


def embedding_eval_set(
    model: Any,
    sentences: str | Sequence[str],
    *,
    n_sentences: int | None = 64,
    max_tokens: int = 128,
    prepend_bos: bool = True,
    source: str = "sentences",
) -> EvalSet:
    """Sentences for the ``embedding`` metric, framed by ``model.frame(prepend_bos)``
    (``[CLS] ... [SEP]`` for BERT) and right-padded, with the unablated model's embedding of
    each (computed here, one sentence at a time, no hook attached).

    ``sentences``: a list (one item each) or a text, cut by :func:`split_sentences`.  With more
    than ``n_sentences`` of them, ``n_sentences`` evenly spaced through the list are used
    (``None``: all).  A sentence longer than ``max_tokens`` (framing included) is cut to it, the
    closing token kept, as a tokenizer's truncation does.  Items are ordered by length (shortest
    first, ties in text order), so a batch holds sentences of similar length.
    """
    if isinstance(sentences, str):
        sentences = split_sentences(sentences)
    sentences = [" ".join(str(s).split()) for s in sentences]
    sentences = [s for s in sentences if s]
    if not sentences:
        raise InputError(f"{source} holds no sentence", source=source)
    if n_sentences is not None and (isinstance(n_sentences, bool) or not isinstance(n_sentences, int) or n_sentences < 1):
        raise InputError(f"--n-sentences must be a positive integer, got {n_sentences!r}")
    prefix, suffix = model.frame(prepend_bos)
    n_ctx = int(model.n_ctx)
    if max_tokens > n_ctx:
        raise InputError(f"--window {max_tokens} (tokens per sentence) is longer than the model's context of {n_ctx} tokens", window=max_tokens)
    if max_tokens < len(prefix) + len(suffix) + 1:
        raise InputError(f"--window {max_tokens} leaves no room for a sentence between the framing tokens", window=max_tokens)
    total = len(sentences)
    if n_sentences is not None and total > n_sentences:
        picks = [0] if n_sentences == 1 else [round(i * (total - 1) / (n_sentences - 1)) for i in range(n_sentences)]
        sentences = [sentences[i] for i in picks]
    tok = model.tokenizer
    rows, cut = [], 0
    room = max_tokens - len(prefix) - len(suffix)
    for s in sentences:
        ids = [int(i) for i in tok(s, add_special_tokens=False)["input_ids"]]
        if not ids:
            continue
        if len(ids) > room:
            ids, cut = ids[:room], cut + 1
        rows.append(prefix + ids + suffix)
    if not rows:
        raise InputError(f"{source}: no sentence has a token", source=source)
    rows.sort(key=len)  # stable: similar lengths share a batch (less padding); the mean over items is unchanged
    pad = getattr(tok, "pad_token_id", None)
    pad = int(pad if pad is not None else 0)
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    with torch.inference_mode():
        reference = torch.cat([sentence_embeddings(model, tokens[i : i + 1, : int(lengths[i])], lengths[i : i + 1]).cpu() for i in range(len(rows))])
    conv = tok.convert_ids_to_tokens
    info = {
        "kind": "sentences",
        "text": source,
        "sentences_available": total,
        "n_sentences": len(rows),
        "max_tokens": max_tokens,
        "truncated": cut,
        "framing": {"prefix": [conv(i) for i in prefix], "suffix": [conv(i) for i in suffix]},
        "embedding": {"definition": EMBEDDING_DEFINITION, "hook": hidden_state_hook(model), "pooling": "mean over real tokens (framing tokens included), attention mask in every forward"},
    }
    return EvalSet(tokens=tokens, lengths=lengths, metric="embedding", prepend_bos=prepend_bos, source=info, reference=reference)


# --------------------------------------------------------------------------- which metric


def default_metric(model: Any) -> tuple[str, str | None]:
    """``(metric, why)``: ``embedding`` when the output head is new or the model is an encoder
    (``why`` says which), else ``loss`` (``why`` None)."""
    name = getattr(getattr(model, "config", None), "model", None) or "the model"
    if getattr(model, "head_is_new", False):
        return "embedding", f"the output head of {name} was newly initialised (it is not in the checkpoint), so a loss would come from random weights"
    if getattr(model, "is_encoder", False):
        return "embedding", f"{name} is a bidirectional encoder, which next-token loss does not apply to"
    return "loss", None


def check_metric(model: Any, metric: str) -> None:
    """Refuse a metric that means nothing on ``model`` (:class:`UnsupportedModelError`, exit 2):
    loss or logit difference when the output head was newly initialised, next-token loss or a
    last-position logit difference on a bidirectional encoder."""
    if metric not in METRICS:
        raise InputError(f"unknown metric {metric!r}: choose from {', '.join(METRICS)}", metric=metric)
    name = getattr(getattr(model, "config", None), "model", None) or "this model"
    if metric in HEAD_METRICS and getattr(model, "head_is_new", False):
        raise UnsupportedModelError(
            f"--metric {metric} reads the output head of {name}, which was newly initialised (it is not in the checkpoint), so every value would come from random weights; use --metric embedding (change in the mean-pooled sentence embedding)",
            metric=metric,
        )
    if metric == "logit-diff" and getattr(model, "is_encoder", False):
        raise UnsupportedModelError(
            f"--metric logit-diff reads the next-token logits at a prompt's last position, which {name}, a bidirectional encoder, does not predict; use --metric embedding",
            metric=metric,
        )
    if metric == "loss" and getattr(model, "is_encoder", False):
        raise UnsupportedModelError(
            f"--metric loss is next-token cross-entropy, which {name}, a bidirectional encoder, does not model (its output at a position sees the next token); use --metric embedding (change in the mean-pooled sentence embedding)",
            metric=metric,
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
    supports it: the unembedding of every other position is skipped).  For ``embedding`` the
    pass is stopped at the last hidden state (the output head never runs).  Encoders get the
    attention mask (``attention_mask=`` passed to ``run``).  A metric that means nothing on
    ``model`` is refused (:func:`check_metric`).
    """
    check_metric(model, data.metric)
    toks = tokens.repeat(copies, 1).to(model.device)
    mask = attention_mask(model, lengths, int(tokens.shape[1]), copies)
    if data.metric == "embedding":
        assert data.reference is not None
        run = run or (lambda t, **kw: model.bridge(t, return_type=None, **kw))
        emb = mean_pool(_last_hidden(model, toks, mask, run), lengths.repeat(copies))
        ref = data.reference[list(rows)].to(device=emb.device, dtype=torch.float64).repeat(copies, 1)
        cos = (emb * ref).sum(-1) / (emb.norm(dim=-1) * ref.norm(dim=-1)).clamp(min=1e-300)
        return 1.0 - cos
    if mask is not None:
        run_plain = run or (lambda t, **kw: model.bridge(t, return_type="logits", **kw))
        run = lambda t, **kw: run_plain(t, attention_mask=mask, **kw)  # noqa: E731
    run = run or (lambda t, **kw: model.bridge(t, return_type="logits", **kw))
    positions = metric_positions(data, lengths)
    if positions is not None and model.extra.get("logits_to_keep", True):
        try:
            logits = run(toks, logits_to_keep=torch.tensor(positions, device=model.device))
        except TypeError as exc:
            if "logits_to_keep" not in str(exc):
                raise  # a TypeError from inside the forward is a bug, not a missing keyword
            log.debug("the model's forward takes no logits_to_keep (%s): computing the logits at every position", exc)
            model.extra["logits_to_keep"] = False
        else:
            if logits.shape[1] == len(positions):
                return item_values(logits, tokens, lengths, data, rows, positions=positions)
            log.debug("the model ignored logits_to_keep (%d positions asked, %d came back): computing the logits at every position", len(positions), logits.shape[1])
            model.extra["logits_to_keep"] = False  # ignored by this model
    logits = run(toks)
    return item_values(logits, tokens, lengths, data, rows)


def worse_by(metric: str, value: float, baseline: float) -> float:
    """Degradation: relative, ``(value - baseline) / |baseline|``, for loss (the opposite sign for
    logit-diff); absolute, ``value - baseline``, for the embedding change, whose unablated value
    is 0 (0.05 = the cosine to the unablated embedding fell by 0.05)."""
    if metric == "embedding":
        return value - baseline
    if baseline == 0:
        return float("inf") if METRICS[metric] * (value - baseline) > 0 else 0.0
    return METRICS[metric] * (value - baseline) / abs(baseline)
