"""The demo recipe's head monitor: quick census-style scores of the best head per detector, for the training log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from headlens.analyses.demo.data import BOS_ID, VOCAB_SIZE
from headlens.analyses.stimuli import eval_text, random_repeated_tokens, text_windows

__all__ = ["head_monitor", "monitor_stimuli"]


@dataclass
class _MonitorStimuli:
    repeated: torch.Tensor  # [n, 1 + 2T]
    seq_len: int
    natural: torch.Tensor  # [n, 64]


def monitor_stimuli(tokenizer: Any) -> _MonitorStimuli:
    T = 50
    rep = random_repeated_tokens(20, T, 12345, VOCAB_SIZE, exclude={BOS_ID}, distinct=True)
    rep = torch.cat([torch.full((rep.shape[0], 1), BOS_ID), rep], dim=1)
    nat = text_windows(tokenizer, eval_text(), 64, 20, True, BOS_ID)
    return _MonitorStimuli(rep, T, nat)


@torch.no_grad()
def head_monitor(model: Any, stim: _MonitorStimuli) -> dict[str, Any]:
    """Quick census-style scores (BOS prepended) for the log: the best head per detector.

    induction: mean ``A[i, i-T+1]`` over second-copy queries of 50 repeated random tokens;
    previous_token: mean ``A[i, i-1]`` over i >= 1 of 64-token windows of the evaluation
    text; sink: mean ``A[i, 0]`` over all i of the same windows. 20 prompts each.
    """
    T = stim.seq_len
    att = model.transformer(input_ids=stim.repeated, output_attentions=True).attentions
    q = torch.arange(1 + T, 1 + 2 * T)
    induction = torch.stack([a[:, :, q, q - T + 1].mean((0, 2)) for a in att])  # [layer, head]
    att = model.transformer(input_ids=stim.natural, output_attentions=True).attentions
    i = torch.arange(1, stim.natural.shape[1])
    prev = torch.stack([a[:, :, i, i - 1].mean((0, 2)) for a in att])
    sink = torch.stack([a[:, :, :, 0].mean((0, 2)) for a in att])
    out: dict[str, Any] = {}
    for name, s in (("induction", induction), ("previous_token", prev), ("sink", sink)):
        flat = int(s.argmax())
        layer, head = divmod(flat, s.shape[1])
        out[name] = round(float(s.max()), 4)
        out[f"{name}_head"] = f"{layer}.{head}"
    return out
