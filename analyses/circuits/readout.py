"""A logit difference read from the output head's input: exact patching's forwards skip the vocabulary.

Under ``metric="logit-diff"`` an item's value is ``logits[last, correct] - logits[last, incorrect]``.
When the logits are a plain linear map of the head's input ``h`` (``unembed.hook_in``; the head a
``torch.nn.Linear``, nothing after it), that is ``h[last] . W[correct] + b[correct] - (h[last] .
W[incorrect] + b[incorrect])``: two rows of the head's weight per item instead of the whole
vocabulary (50257 rows on GPT-2, most of a small model's patched forward).
:func:`~headlens.probes.reader_rows.readout_hook` keeps ``h`` at each row's last position and hands the
head zero positions, so it does no work.

Whether "nothing after it" holds (logit soft-capping, a scale after the head) is not read from the
config: exact patching reads the base run's head input too (:func:`capture_hook`, :func:`at_last`),
compares those values with the full forward's logits on every pair, and subtracts them, not the full
forward's, from the patched ones, so an edge that changes nothing scores exactly 0
(:mod:`headlens.analyses.circuits.exact`).
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.probes.hooks import HookFn
from headlens.probes.loading import LoadedModel
from headlens.probes.reader_rows import READOUT_HOOK

__all__ = ["AFTER_HEAD", "Readout", "readout_of", "capture_hook", "at_last"]


class Readout:
    """The head's weight ``[d_vocab, d_model]`` and bias of a model whose logits are ``h @ W.T + b``."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        self.weight, self.bias = weight.detach(), None if bias is None else bias.detach()

    def values(
        self, h: Float[Tensor, "row d_model"], correct: Int[Tensor, " row"], incorrect: Int[Tensor, " row"]
    ) -> Float[Tensor, " row"]:
        """Each row's ``logit[correct] - logit[incorrect]`` (float64, each logit rounded to the head's dtype first, as
        the full forward's are)."""
        dev = self.weight.device
        h = h.to(device=dev, dtype=self.weight.dtype)
        c, w = correct.to(dev), incorrect.to(dev)

        def logit(tok: Tensor) -> Tensor:
            x = (h.float() * self.weight[tok].float()).sum(-1)
            if self.bias is not None:
                x = x + self.bias[tok].float()
            return x.to(self.weight.dtype)

        return logit(c).double() - logit(w).double()


#: Config fields of Hugging Face models that change the logits after the head (soft-capping: Gemma 2/3; a scale:
#: Cohere, Granite); a model with one set is read through its head.  Others are caught by the base run's check.
AFTER_HEAD = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def readout_of(model: LoadedModel, metric: str) -> Readout | None:
    """The model's :class:`Readout` under ``metric``, or None: another metric, no ``unembed.hook_in``, a head
    that is not a ``torch.nn.Linear``, or a config that changes the logits after the head (:data:`AFTER_HEAD`)."""
    if metric != "logit-diff":
        return None
    hf_config = getattr(getattr(model.bridge, "original_model", None), "config", None)
    if any(getattr(hf_config, f, None) not in (None, 1, 1.0) for f in AFTER_HEAD):
        return None
    head = getattr(getattr(model.bridge, "unembed", None), "original_component", None)
    if not isinstance(head, torch.nn.Linear) or READOUT_HOOK not in model.bridge.hook_dict:
        return None
    return Readout(head.weight, head.bias)


def capture_hook(store: dict[str, Tensor]) -> tuple[str, HookFn]:
    """Hook on the head's input keeping it (unchanged) in ``store["x"]``: the base run's, for :func:`at_last`."""

    def fn(x: Tensor, hook: Any = None) -> None:
        store["x"] = x.detach()

    return READOUT_HOOK, fn


def at_last(x: Float[Tensor, "row kept d_model"], lengths: Int[Tensor, " row"], width: int) -> Float[Tensor, "row d_model"]:
    """Each row's head input at its last position ``lengths - 1``, from a forward's head input ``x``: at every position
    (``kept == width``) or, under ``logits_to_keep``, at the sorted distinct last positions only."""
    last = [int(n) - 1 for n in lengths]
    if x.shape[1] == width:
        idx = last
    else:
        positions = sorted(set(last))
        if x.shape[1] != len(positions):
            raise ValueError(f"the output head's input has {x.shape[1]} positions: neither all {width} nor the {len(positions)} last ones")
        where = {p: i for i, p in enumerate(positions)}
        idx = [where[p] for p in last]
    return x[torch.arange(x.shape[0], device=x.device), torch.tensor(idx, device=x.device)]
