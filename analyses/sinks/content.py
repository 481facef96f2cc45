"""Position or content: the sink score when the first token is varied.

Every variant is built from the same text bodies (``window - 1`` tokens of the evaluation text,
no BOS; on an encoder ``window - 2``, each followed by its ``[SEP]``), so only the first token
differs:

==============  ===========================================================================
variant         sequence
==============  ===========================================================================
``bos``         BOS, body                      (TransformerLens' default; ``[CLS]`` on an encoder)
``frequent``    " the", body                   (GPT-2's most frequent token; another
                                               tokenizer's encoding of " the" otherwise)
``punctuation`` ".", body
``newline``     "\\n", body
``random``      a random token (seeded, not BOS), body; a different one per prompt
``text``        body only (its own first text token at position 0; one token shorter)
``bos_second``  body[0], BOS, body[1:]         (BOS moved to position 1)
==============  ===========================================================================

A variant the tokenizer cannot express is skipped, not fatal: ``" the"``, ``"."`` or ``"\n"``
encoding to no token or to more than one (BERT's WordPiece has no token for a newline), or a
BOS variant without a BOS.  :func:`variant_batches` reports each skipped variant and why
(``headlens sinks`` puts them in the summary and the manifest).

For each variant and head: ``alpha_first`` (Gu et al. alpha of key 0) and ``alpha_second``
(key 1).  A head **sinks** in a variant when ``alpha_first > eps``.  Per head, ``verdict``:

* ``position``: sinks in every variant, whatever token stands first;
* ``BOS``: sinks with BOS first, not in every variant, and follows BOS to position 1
  (``alpha_second > eps`` in ``bos_second``);
* ``first token``: sinks in some variants only (depends on which token stands first);
* ``none``: sinks in no variant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from headlens.probes.errors import InputError
from headlens.probes.prompts import TokenBatch

__all__ = ["VARIANTS", "variant_batches", "content_verdicts"]

VARIANTS: tuple[str, ...] = ("bos", "frequent", "punctuation", "newline", "random", "text", "bos_second")

_WORDS = {"frequent": " the", "punctuation": ".", "newline": "\n"}


def _one_token_or_why(tokenizer: Any, text: str) -> tuple[int | None, str]:
    """``(id, "")`` when ``text`` is one token, else ``(None, reason)``."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) == 1:
        return int(ids[0]), ""
    what = "no token" if not ids else f"{len(ids)} tokens"
    return None, f"the tokenizer encodes {text!r} as {what}; the variant needs exactly one"


def _batch(tokens: Tensor, n_suffix: int = 0) -> TokenBatch:
    n, width = tokens.shape
    kwargs: dict[str, Any] = {
        "tokens": tokens,
        "lengths": torch.full((n,), width, dtype=torch.long),
        "strings": [[] for _ in range(n)],
        "prepend_bos": False,
        "pad_id": 0,
    }
    names = {f.name for f in dataclasses.fields(TokenBatch)}
    if "n_prefix" in names:
        kwargs.update(n_prefix=0, n_suffix=n_suffix)  # position 0 is what each variant varies
    return TokenBatch(**kwargs)


def variant_batches(
    body: Tensor,
    tokenizer: Any,
    bos_id: int | None,
    *,
    vocab_size: int,
    seed: int,
    suffix: Sequence[int] = (),
    skipped: dict[str, str] | None = None,
    avoid_special: bool = False,
) -> dict[str, TokenBatch]:
    """The variants of the module docstring, built on ``body`` ``[n, window - 1 - len(suffix)]`` (no BOS).

    ``bos_id``: the token of the ``bos`` variants (an encoder's ``[CLS]``); variants that need it
    are left out when it is None.  ``suffix`` (an encoder's ``[SEP]``) ends every variant.  A
    variant the tokenizer cannot express is left out; with ``skipped`` given, its name and the
    reason are added there, otherwise it is an :class:`InputError` (the earlier behaviour).
    The random first token is never ``bos_id``; with ``avoid_special`` (encoders) never any
    special token of the tokenizer (decoders keep the draws of earlier versions).
    """
    n = body.shape[0]
    out: dict[str, TokenBatch] = {}
    tail = torch.tensor([int(t) for t in suffix], dtype=torch.long).expand(n, -1)

    def batch(tokens: Tensor) -> TokenBatch:
        return _batch(torch.cat([tokens, tail], dim=1) if len(suffix) else tokens, len(suffix))

    def first(token: int | Tensor) -> Tensor:
        col = token if isinstance(token, Tensor) else torch.full((n,), token, dtype=torch.long)
        return torch.cat([col[:, None], body], dim=1)

    def skip(name: str, reason: str) -> None:
        if skipped is None:
            raise InputError(f"first-token variant {name!r}: {reason}", variant=name)
        skipped[name] = reason

    if bos_id is not None:
        out["bos"] = batch(first(bos_id))
    elif skipped is not None:
        skipped["bos"] = "the tokenizer has no BOS token"
    for name, word in _WORDS.items():
        token, why = _one_token_or_why(tokenizer, word)
        if token is None:
            skip(name, why)
        else:
            out[name] = batch(first(token))
    gen = torch.Generator().manual_seed(seed)
    rand = torch.randint(0, vocab_size - 1, (n,), generator=gen)
    if bos_id is not None:
        rand = rand + (rand >= bos_id).long()  # skip BOS
    special = {int(t) for t in getattr(tokenizer, "all_special_ids", []) or [] if 0 <= int(t) < vocab_size} - (
        {bos_id} if bos_id is not None else set()
    )
    if special and avoid_special:  # an encoder's [SEP], [PAD], [MASK]...: draw among the rest
        allowed = torch.tensor([t for t in range(vocab_size) if t not in special and t != bos_id], dtype=torch.long)
        rand = allowed[torch.randint(0, len(allowed), (n,), generator=torch.Generator().manual_seed(seed))]
    out["random"] = batch(first(rand))
    out["text"] = batch(body.clone())
    if bos_id is not None and body.shape[1] >= 2:
        out["bos_second"] = batch(torch.cat([body[:, :1], torch.full((n, 1), bos_id, dtype=torch.long), body[:, 1:]], dim=1))
    elif skipped is not None:
        skipped["bos_second"] = "the tokenizer has no BOS token" if bos_id is None else "the text body is shorter than 2 tokens"
    return out


def content_verdicts(table: pd.DataFrame, eps: float) -> pd.DataFrame:
    """One row per head: in how many variants it sinks, and the verdict of the module docstring."""
    rows = []
    for _, g in table.groupby(["layer", "head"], sort=True):
        layer, head = g["layer"].iloc[0], g["head"].iloc[0]
        sinks = g.set_index("variant")["alpha_first"] > eps
        n_sink = int(sinks.sum())
        follows_bos = bool((g.loc[g["variant"] == "bos_second", "alpha_second"] > eps).any())
        bos_sinks = bool(sinks.get("bos", False))
        if n_sink == len(sinks):
            verdict = "position"
        elif n_sink == 0:
            verdict = "none"
        elif bos_sinks and follows_bos:
            verdict = "BOS"
        else:
            verdict = "first token"
        rows.append(
            {
                "layer": int(layer),
                "head": int(head),
                "variants_sinking": n_sink,
                "variants": len(sinks),
                "sinks_in": ",".join(v for v, s in sinks.items() if s),
                "follows_bos_to_position_1": follows_bos,
                "verdict": verdict,
            }
        )
    return pd.DataFrame(rows)
