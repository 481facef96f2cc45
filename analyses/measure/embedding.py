"""Sentence embeddings: the last hidden state, mean-pooled over real tokens, and the sentence
sets of the ``embedding`` metric (see :mod:`headlens.analyses.measure` for the definition).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.analyses.measure.evalset import EMBEDDING_DEFINITION, EvalSet
from headlens.probes.engine_forward import StopForward, stopping
from headlens.probes.errors import InputError
from headlens.probes.hooks import attached

log = logging.getLogger(__name__)

__all__ = [
    "split_sentences",
    "attention_mask",
    "hidden_state_hook",
    "last_hidden",
    "mean_pool",
    "sentence_embeddings",
    "embedding_eval_set",
]

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


def last_hidden(model: Any, toks: Tensor, mask: Tensor | None, run: Any) -> Float[Tensor, "batch pos d_model"]:
    store: dict[str, Tensor] = {}

    def grab(x: Tensor, hook: Any = None) -> None:
        store["h"] = x
        raise StopForward  # the output head never runs

    kwargs = {} if mask is None else {"attention_mask": mask}
    with stopping(), attached(model.bridge, [(hidden_state_hook(model), grab)]):
        run(toks, **kwargs)
    if "h" not in store:
        raise RuntimeError(f"the forward pass never reached {hidden_state_hook(model)}")
    return store["h"]


def mean_pool(hidden: Float[Tensor, "batch pos d_model"], lengths: Int[Tensor, " batch"]) -> Float[Tensor, "batch d_model"]:
    """Mean over positions ``< length`` of each row (float64)."""
    real = (torch.arange(hidden.shape[1], device=hidden.device)[None, :] < lengths.to(hidden.device)[:, None]).to(torch.float64)
    return (hidden.double() * real[:, :, None]).sum(1) / real.sum(1, keepdim=True).clamp(min=1)


def sentence_embeddings(
    model: Any, tokens: Int[Tensor, "batch pos"], lengths: Int[Tensor, " batch"], *, run: Any = None
) -> Float[Tensor, "batch d_model"]:
    """Mean-pooled last hidden state of each row (float64), with whatever hooks are attached;
    the pass stops at the last hidden state (the output head never runs)."""
    run = run or (lambda t, **kw: model.bridge(t, return_type=None, **kw))
    width = int(tokens.shape[1])
    hidden = last_hidden(model, tokens.to(model.device), attention_mask(model, lengths, width), run)
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
        raise InputError(f"n_sentences must be a positive integer, got {n_sentences!r}", n_sentences=n_sentences)
    prefix, suffix = model.frame(prepend_bos)
    n_ctx = int(model.n_ctx)
    if max_tokens > n_ctx:
        raise InputError(
            f"window={max_tokens} (tokens per sentence) is longer than the model's context of {n_ctx} tokens", window=max_tokens
        )
    if max_tokens < len(prefix) + len(suffix) + 1:
        raise InputError(f"window={max_tokens} leaves no room for a sentence between the framing tokens", window=max_tokens)
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
        reference = torch.cat(
            [sentence_embeddings(model, tokens[i : i + 1, : int(lengths[i])], lengths[i : i + 1]).cpu() for i in range(len(rows))]
        )
    conv = tok.convert_ids_to_tokens
    info = {
        "kind": "sentences",
        "text": source,
        "sentences_available": total,
        "n_sentences": len(rows),
        "max_tokens": max_tokens,
        "truncated": cut,
        "framing": {"prefix": [conv(i) for i in prefix], "suffix": [conv(i) for i in suffix]},
        "embedding": {
            "definition": EMBEDDING_DEFINITION,
            "hook": hidden_state_hook(model),
            "pooling": "mean over real tokens (framing tokens included), attention mask in every forward",
        },
    }
    return EvalSet(tokens=tokens, lengths=lengths, metric="embedding", prepend_bos=prepend_bos, source=info, reference=reference)
