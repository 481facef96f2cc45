"""Position or content: the sink score when the first token is varied.

Every variant is built from the same text bodies (``window - 1`` tokens of the evaluation text,
no BOS), so only the first token differs:

==============  ===========================================================================
variant         sequence
==============  ===========================================================================
``bos``         BOS, body                      (TransformerLens' default)
``frequent``    " the", body                   (GPT-2's most frequent token; another
                                               tokenizer's encoding of " the" otherwise)
``punctuation`` ".", body
``newline``     "\\n", body
``random``      a random token (seeded, not BOS), body; a different one per prompt
``text``        body only (its own first text token at position 0; one token shorter)
``bos_second``  body[0], BOS, body[1:]         (BOS moved to position 1)
==============  ===========================================================================

For each variant and head: ``alpha_first`` (Gu et al. alpha of key 0) and ``alpha_second``
(key 1).  A head **sinks** in a variant when ``alpha_first > eps``.  Per head, ``verdict``:

* ``position``: sinks in every variant, whatever token stands first;
* ``BOS``: sinks with BOS first, not in every variant, and follows BOS to position 1
  (``alpha_second > eps`` in ``bos_second``);
* ``first token``: sinks in some variants only (depends on which token stands first);
* ``none``: sinks in no variant.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch
from torch import Tensor

from probes.errors import InputError
from probes.prompts import TokenBatch

__all__ = ["VARIANTS", "variant_batches", "content_verdicts"]

VARIANTS: tuple[str, ...] = ("bos", "frequent", "punctuation", "newline", "random", "text", "bos_second")

_WORDS = {"frequent": " the", "punctuation": ".", "newline": "\n"}


def _single_token(tokenizer: Any, text: str) -> int:
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if len(ids) != 1:
        raise InputError(f"the tokenizer encodes {text!r} as {len(ids)} tokens; the first-token variants need one", text=text)
    return int(ids[0])


def _batch(tokens: Tensor) -> TokenBatch:
    n, width = tokens.shape
    return TokenBatch(tokens=tokens, lengths=torch.full((n,), width, dtype=torch.long), strings=[[] for _ in range(n)], prepend_bos=False, pad_id=0)


def variant_batches(body: Tensor, tokenizer: Any, bos_id: int | None, *, vocab_size: int, seed: int) -> dict[str, TokenBatch]:
    """The variants of the module docstring, built on ``body`` ``[n, window - 1]`` (no BOS).

    Variants that need BOS are left out when the tokenizer has none.
    """
    n = body.shape[0]
    out: dict[str, TokenBatch] = {}

    def first(token: int | Tensor) -> Tensor:
        col = token if isinstance(token, Tensor) else torch.full((n,), token, dtype=torch.long)
        return torch.cat([col[:, None], body], dim=1)

    if bos_id is not None:
        out["bos"] = _batch(first(bos_id))
    for name, word in _WORDS.items():
        out[name] = _batch(first(_single_token(tokenizer, word)))
    gen = torch.Generator().manual_seed(seed)
    rand = torch.randint(0, vocab_size - 1, (n,), generator=gen)
    if bos_id is not None:
        rand = rand + (rand >= bos_id).long()  # skip BOS
    out["random"] = _batch(first(rand))
    out["text"] = _batch(body.clone())
    if bos_id is not None and body.shape[1] >= 2:
        out["bos_second"] = _batch(torch.cat([body[:, :1], torch.full((n, 1), bos_id, dtype=torch.long), body[:, 1:]], dim=1))
    return out


def content_verdicts(table: pd.DataFrame, eps: float) -> pd.DataFrame:
    """One row per head: in how many variants it sinks, and the verdict of the module docstring."""
    rows = []
    for (layer, head), g in table.groupby(["layer", "head"], sort=True):
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
