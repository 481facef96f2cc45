"""The seed measurement: for one text, per head, the last token's attention to the first token
against ``1/n`` (what a uniform head would give), strongest first; :func:`run_seed_text` measures it
for each BOS setting into a :class:`SeedTextRun`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from headlens.analyses.sinks.batches import frame_tokens, tokenize_framed
from headlens.probes.engine import Sums, batch_attention_mask, reduce_pass
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel

__all__ = ["SeedTextRun", "seed_measurement", "run_seed_text"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class SeedTextRun:
    """The seed measurement of one text (:func:`run_seed_text`): the text, the BOS settings as given, the
    seed the run records, and ``table`` (each setting's :func:`seed_measurement`, stacked, BOS first)."""

    text: str
    bos: tuple[bool, ...]
    seed: int
    table: pd.DataFrame


class _LastToFirst:
    """Reducer: prompt 0's attention from query ``last`` to key 0, per head (float32)."""

    name = "last_to_first"

    def __init__(self, last: int) -> None:
        self.last = last

    def partial(self, rows: Tensor, ctx: Any, q0: int) -> Sums:
        i = self.last - q0
        if 0 <= i < rows.shape[2]:
            return {"a": rows[0, :, i, 0].float()}
        return {"a": torch.zeros(rows.shape[1], device=rows.device)}

    def finish(self, sums: Sums, ctx: Any) -> Tensor:
        return sums["a"].float()


def seed_measurement(model: LoadedModel, text: str, *, prepend_bos: bool = True) -> pd.DataFrame:
    """Per head: the last token's attention to the first token, against ``1/n``; strongest first.

    The measurement quoted in the project's seed text ("one GPT-2 small head puts 61% of the last
    token's attention on the first token where a uniform head would give about 16%": 1/6, with
    a BOS before the five words).
    """
    batch = tokenize_framed(model, [text], prepend_bos, model.n_ctx, False)
    n = int(batch.lengths[0])
    # the last token: the last text token on an encoder (its [SEP] comes after)
    last = n - 1 - len(frame_tokens(model, prepend_bos)[1])
    if n < 2 or last < 1:
        raise InputError(f"text={text!r} is {n} token(s); the measurement needs at least 2 (a first and a last token)", text=text)
    last_to_first = torch.zeros(model.n_layers, model.n_heads)

    def keep(layer: int, out: dict[str, Tensor], ctx: Any) -> None:
        last_to_first[layer] = out[_LastToFirst.name].cpu()

    reduce_pass(model, batch.tokens, batch_attention_mask(batch), [_LastToFirst(last)], context=lambda view: None, on_layer=keep)
    rows = [
        {
            "bos": prepend_bos,
            "layer": layer,
            "head": head,
            "n_tokens": n,
            "first_token": batch.strings[0][0],
            "last_token": batch.strings[0][last],
            "attn_last_to_first": float(last_to_first[layer, head]),
            "uniform": 1.0 / n,
            "ratio": float(last_to_first[layer, head]) * n,
        }
        for layer in range(model.n_layers)
        for head in range(model.n_heads)
    ]
    table = pd.DataFrame(rows).sort_values(["attn_last_to_first", "layer", "head"], ascending=[False, True, True], kind="stable")
    return table.reset_index(drop=True)


def run_seed_text(model: LoadedModel, text: str, bos: Sequence[bool], *, seed: int = 0) -> SeedTextRun:
    """:func:`seed_measurement` for each BOS setting of ``bos``, stacked (BOS first), with the settings it ran with."""
    table = pd.concat([seed_measurement(model, text, prepend_bos=b) for b in sorted(set(bos), reverse=True)], ignore_index=True)
    return SeedTextRun(text=text, bos=tuple(bos), seed=seed, table=table)
