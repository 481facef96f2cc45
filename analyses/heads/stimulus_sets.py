"""The census's stimulus sets (:class:`StimulusSet`) and how their prompts are wrapped and batched:
the special tokens around every prompt (BOS, or an encoder's [CLS] ... [SEP]) as
:meth:`LoadedModel.frame` gives them, and right-padded :class:`TokenBatch` es built from framed
rows of ids.

The census reads ids and positions only, never a token's text, so its batches carry no decoded
strings (``TokenBatch.strings`` is one empty list per prompt; decoding the 52,061 distinct ids of
4,000 random-token prompts took 0.31 s, a tenth of a plain forward of them on a tiny model):
decode ``tokens`` where text is wanted."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch

__all__ = ["StimulusSet", "model_frame", "model_framing", "batch_from_rows", "batch_from_tokens", "wrap_note"]


@dataclass
class StimulusSet:
    kind: str
    batch: TokenBatch
    seq_len: int | None = None
    positions: dict[str, Tensor] = field(default_factory=dict)
    source: str = ""
    #: special tokens before the text (BOS, [CLS]) and after it ([SEP]) in every prompt
    n_prefix: int = 0
    n_suffix: int = 0
    #: per-prompt labels (referent: ``pair``, ``frame``, ``kind`` of each sentence)
    meta: dict[str, list[Any]] = field(default_factory=dict)
    #: what else the stimuli info (summary, manifest) should say about this set
    info: dict[str, Any] = field(default_factory=dict)


def model_frame(model: LoadedModel, prepend_bos: bool) -> tuple[list[int], list[int]]:
    """``(prefix ids, suffix ids)`` that wrap every prompt (:meth:`LoadedModel.frame`; an
    :class:`InputError` when the tokenizer lacks them)."""
    frame = getattr(model, "frame", None)
    if frame is not None:
        prefix, suffix = frame(prepend_bos)
        return [int(t) for t in prefix], [int(t) for t in suffix]
    if not prepend_bos:
        return [], []
    if model.bos_id is None:
        raise InputError("this model's tokenizer has no BOS token; run with prepend_bos=False")
    return [int(model.bos_id)], []


def model_framing(model: LoadedModel, prepend_bos: bool) -> dict[str, Any]:
    """Manifest entry: the special tokens around every prompt (:meth:`LoadedModel.framing`)."""
    framing = getattr(model, "framing", None)
    if framing is not None:
        return framing(prepend_bos)
    prefix, suffix = model_frame(model, prepend_bos)
    return {"prefix_ids": prefix, "suffix_ids": suffix}


def _token_batch(**kwargs: Any) -> TokenBatch:
    """A TokenBatch; ``n_prefix``/``n_suffix`` are dropped where TokenBatch does not have them."""
    names = {f.name for f in dataclasses.fields(TokenBatch)}
    return TokenBatch(**{k: v for k, v in kwargs.items() if k in names})


def batch_from_rows(rows: list[list[int]], tokenizer: Any, prepend_bos: bool, n_prefix: int | None = None, n_suffix: int = 0) -> TokenBatch:
    """Rows of ids of any lengths, right-padded (:func:`batch_from_tokens`)."""
    width = max(len(r) for r in rows)
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.bos_token_id or 0))
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows])
    return batch_from_tokens(tokens, lengths, tokenizer, prepend_bos, n_prefix, n_suffix)


def batch_from_tokens(
    tokens: Int[Tensor, "prompt pos"],
    lengths: Int[Tensor, " prompt"],
    tokenizer: Any,
    prepend_bos: bool,
    n_prefix: int | None = None,
    n_suffix: int = 0,
) -> TokenBatch:
    """A :class:`TokenBatch` of right-padded ``tokens`` (``lengths[i]`` real tokens in row ``i``,
    the rest the tokenizer's pad id), with no decoded strings (one empty list per prompt: the
    census never reads them)."""
    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.bos_token_id or 0))
    pos = torch.arange(tokens.shape[1])
    real = pos[None, :] < lengths[:, None]
    tokens = torch.where(real, tokens, torch.full_like(tokens, pad))
    return _token_batch(
        tokens=tokens,
        lengths=lengths,
        strings=[[] for _ in range(len(tokens))],
        prepend_bos=prepend_bos,
        pad_id=pad,
        n_prefix=(1 if prepend_bos else 0) if n_prefix is None else n_prefix,
        n_suffix=n_suffix,
    )


def wrap_note(model: LoadedModel, prefix: list[int], suffix: list[int]) -> str:
    """``", each [CLS] ... [SEP]"`` for a framing with a suffix (an encoder's); empty for decoders."""
    if not suffix:
        return ""
    conv = model.tokenizer.convert_ids_to_tokens
    return ", each " + " ".join([*(conv(t) for t in prefix), "...", *(conv(t) for t in suffix)])
