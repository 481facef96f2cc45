"""Reading prompts and turning them into right-padded token batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from headlens.probes.errors import InputError
from headlens.probes.jsonl import read_jsonl, read_text

__all__ = ["TokenBatch", "read_prompts", "tokenize_prompts", "decoder_frame", "token_strings", "iter_batches"]


@dataclass
class TokenBatch:
    """Prompts as token ids, right-padded to the longest.

    ``tokens[i, :lengths[i]]`` are the real tokens of prompt ``i``: the model's framing
    around the text (:meth:`headlens.probes.loading.LoadedModel.frame`: ``[BOS]`` first on decoders,
    ``[CLS] ... [SEP]`` on encoders, nothing with ``prepend_bos=False``); everything after
    is padding and must never count, nor be attended to (pass :attr:`attention_mask` to
    every forward).  The first ``n_prefix`` and the last ``n_suffix`` real tokens of every
    prompt are the special tokens of the framing; :attr:`text_mask` marks the rest.

    ``n_prefix=None`` (a batch built by hand) means the decoder convention: 1 when
    ``prepend_bos``, else 0.
    """

    tokens: Int[Tensor, "prompt pos"]
    lengths: Int[Tensor, " prompt"]
    strings: list[list[str]]
    prepend_bos: bool
    pad_id: int
    #: Special tokens before the text of every prompt (``[BOS]`` or ``[CLS]``: 1; none: 0).
    n_prefix: int | None = None
    #: Special tokens after the text of every prompt (``[SEP]`` on encoders: 1; decoders: 0).
    n_suffix: int = 0

    def __post_init__(self) -> None:
        if self.n_prefix is None:
            self.n_prefix = 1 if self.prepend_bos else 0

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def mask(self) -> Tensor:
        """Boolean ``[prompt, pos]``: True on real tokens (special tokens of the framing included)."""
        pos = torch.arange(self.tokens.shape[1], device=self.lengths.device)
        return pos[None, :] < self.lengths[:, None]

    @property
    def attention_mask(self) -> Tensor:
        """0/1 ``[prompt, pos]`` (``torch.long``): 1 on real tokens, 0 on padding.

        What every batched forward must pass (``model.bridge(tokens, attention_mask=...)``,
        or :func:`headlens.probes.capture.run_forward`), so that no real token attends to padding.
        """
        return self.mask.long()

    @property
    def text_mask(self) -> Tensor:
        """Boolean ``[prompt, pos]``: True on the prompt's own text tokens (neither framing nor padding)."""
        pos = torch.arange(self.tokens.shape[1], device=self.lengths.device)
        return (pos[None, :] >= int(self.n_prefix or 0)) & (pos[None, :] < self.lengths[:, None] - self.n_suffix)

    @property
    def framing(self) -> dict[str, int]:
        """``{"n_prefix": ..., "n_suffix": ...}``: how many special tokens wrap each prompt."""
        return {"n_prefix": int(self.n_prefix or 0), "n_suffix": int(self.n_suffix)}

    def select(self, index: Sequence[int] | slice) -> TokenBatch:
        """A sub-batch, trimmed to its own longest prompt."""
        idx = list(range(len(self)))[index] if isinstance(index, slice) else list(index)
        lengths = self.lengths[idx]
        width = int(lengths.max()) if len(idx) else 0
        return TokenBatch(
            tokens=self.tokens[idx, :width],
            lengths=lengths,
            strings=[self.strings[i] for i in idx],
            prepend_bos=self.prepend_bos,
            pad_id=self.pad_id,
            n_prefix=self.n_prefix,
            n_suffix=self.n_suffix,
        )


def read_prompts(path: str | Path) -> list[str]:
    """Prompts from a file: JSONL with a ``text`` field (``.jsonl``), else one prompt per line.

    Blank lines are skipped.  An empty file, a file that cannot be read as UTF-8 text,
    or a JSONL line without a string ``text`` field is an :class:`InputError` naming the line.
    """
    raw = read_text(path, what="prompt file")
    prompts: list[str] = []
    if Path(path).suffix.lower() in (".jsonl", ".ndjson"):
        for lineno, obj in read_jsonl(path, what="prompt file", text=raw):
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise InputError(f'{path}:{lineno}: each JSONL line needs a string field "text"', path=str(path), line=lineno)
            if not obj["text"]:
                raise InputError(f"{path}:{lineno}: empty text", path=str(path), line=lineno)
            prompts.append(obj["text"])
    else:
        prompts = [line for line in raw.splitlines() if line.strip()]
    if not prompts:
        raise InputError(f"prompt file {path} holds no prompt", path=str(path))
    return prompts


def tokenize_prompts(
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    prepend_bos: bool,
    n_ctx: int,
    frame: tuple[Sequence[int], Sequence[int]],
    truncate: bool = False,
) -> TokenBatch:
    """Tokenize without special tokens, wrap each prompt in ``frame``, right-pad with ``pad_id``.

    ``frame`` is ``(prefix ids, suffix ids)``: :meth:`headlens.probes.loading.LoadedModel.frame`
    (``([CLS], [SEP])`` on BERT, ``([BOS], [])`` on decoders, ``([], [])`` with
    ``prepend_bos=False``), the one rule for how a prompt is framed; it is required, as the
    tokenizer alone cannot tell (TransformerLens gives BERT's tokenizer a BOS that is ``[UNK]``).
    :func:`headlens.probes.capture.tokenize_for` passes the model's.  A prompt longer than
    ``n_ctx`` tokens (framing included) is an error unless ``truncate``, which cuts the text and
    keeps the whole framing.
    """
    if not prompts:
        raise InputError("no prompt given")
    bos = tokenizer.bos_token_id
    prefix, suffix = [int(t) for t in frame[0]], [int(t) for t in frame[1]]
    room = n_ctx - len(prefix) - len(suffix)
    ids: list[list[int]] = []
    for i, text in enumerate(prompts):
        if not isinstance(text, str) or not text:
            raise InputError(f"prompt {i + 1} is empty", prompt=i)
        body = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if not body and not (prefix or suffix):
            raise InputError(f"prompt {i + 1} has no tokens", prompt=i)
        if len(body) > room:
            total = len(prefix) + len(body) + len(suffix)
            if not truncate:
                raise InputError(
                    f"prompt {i + 1} is {total} tokens, longer than the model's context of {n_ctx}; shorten it or pass truncate=True",
                    prompt=i,
                    length=total,
                )
            if room < 1:
                raise InputError(
                    f"a context of {n_ctx} tokens leaves no room for text beside {len(prefix) + len(suffix)} special tokens", n_ctx=n_ctx
                )
            body = body[:room]
        ids.append(prefix + body + suffix)
    pad = tokenizer.pad_token_id
    pad_id = int(pad if pad is not None else (bos if bos is not None else 0))
    width = max(len(r) for r in ids)
    tokens = torch.full((len(ids), width), pad_id, dtype=torch.long)
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in ids], dtype=torch.long)
    strings = [token_strings(tokenizer, r) for r in ids]
    return TokenBatch(
        tokens=tokens,
        lengths=lengths,
        strings=strings,
        prepend_bos=prepend_bos,
        pad_id=pad_id,
        n_prefix=len(prefix),
        n_suffix=len(suffix),
    )


def decoder_frame(tokenizer: Any, prepend_bos: bool) -> tuple[list[int], list[int]]:
    """``([BOS], [])`` (``([], [])`` without ``prepend_bos``): a decoder's framing, for a caller
    holding a bare decoder tokenizer and no :class:`~headlens.probes.loading.LoadedModel`.

    Never for a model: :meth:`LoadedModel.frame` is the rule there (an encoder's tokenizer has
    a ``bos_token_id`` that is ``[UNK]`` once TransformerLens has set it up).
    """
    if not prepend_bos:
        return [], []
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        raise InputError("this tokenizer has no BOS token; run with prepend_bos=False")
    return [int(bos)], []


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token decoded on its own (``" raised"``, ``"<|endoftext|>"``), as the model saw it."""
    return [tokenizer.decode([int(t)]) for t in ids]


def iter_batches(batch: TokenBatch, batch_size: int) -> list[tuple[list[int], TokenBatch]]:
    """Split into sub-batches of similar length (less padding); each comes with its row indices."""
    if batch_size < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}", batch_size=batch_size)
    order = sorted(range(len(batch)), key=lambda i: (-int(batch.lengths[i]), i))
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [(idx, batch.select(idx)) for idx in chunks]
