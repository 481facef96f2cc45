"""``heldout``: a model's mean next-token loss over windows of a held-out text and, with
``ablation``, each head's zero ablation on the same windows: what ``headlens sweep`` records for
each checkpoint beside its census (:mod:`headlens.reports.runs.sweep.task`).

The windows are cut from ``text_file`` or the built-in evaluation text (not a model's own
held-out text: every checkpoint of a sweep is scored on the same text), ``window`` tokens each
with BOS counted in the window, framed as the model frames every sequence.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pandas as pd

from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.measure.evalset import EvalSet, text_eval_set
from headlens.analyses.sinks.intervene import mean_loss
from headlens.analyses.stimuli import eval_text
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch
from headlens.reports.api.text_files import read_text_file

log = logging.getLogger(__name__)

__all__ = ["heldout", "HeldoutLoss", "BUILTIN_SOURCE"]

#: How the windows' source is named when no ``text_file`` is given.
BUILTIN_SOURCE = "built-in evaluation text"


@dataclass(frozen=True)
class HeldoutLoss:
    """``loss``: mean next-token loss (nats) over ``tokens`` predicted tokens of the windows ``data``;
    ``ablation``: the single-head zero-ablation table on those windows (with its
    ``unablated_value`` column), when asked for.  No windows (``n_windows=0``, or an encoder, which
    has no next-token loss): ``data``, ``loss`` and ``ablation`` are None and ``note`` says why
    (None for ``n_windows=0``)."""

    data: EvalSet | None
    loss: float | None
    tokens: int
    note: str | None = None
    ablation: pd.DataFrame | None = None


def heldout(
    model: LoadedModel,
    /,
    *,
    text_file: str | None = None,
    n_windows: int = 32,
    window: int = 128,
    batch_size: int = 16,
    ablation: AblationConfig | None = None,
) -> HeldoutLoss:
    """The held-out loss of ``model`` on ``n_windows`` windows of ``window`` tokens (at most its
    context) of ``text_file`` (else the built-in evaluation text), ``batch_size`` windows per
    forward pass; with ``ablation`` (e.g. ``AblationConfig(method="zero")``) also each head
    ablated alone on the same windows."""
    if n_windows == 0:
        return HeldoutLoss(data=None, loss=None, tokens=0)
    if getattr(model, "is_encoder", False):
        log.info("%s is an encoder: no next-token loss to measure", model.name)
        return HeldoutLoss(data=None, loss=None, tokens=0, note="encoder: no next-token loss")
    text, source = (read_text_file(text_file), text_file) if text_file else (eval_text(), BUILTIN_SOURCE)
    data = text_eval_set(
        model.tokenizer,
        text,
        n_windows=n_windows,
        window=min(window, model.n_ctx),
        prepend_bos=True,
        n_ctx=model.n_ctx,
        source=source,
        frame=model.frame(True),
    )
    batch = TokenBatch(
        tokens=data.tokens, lengths=data.lengths, strings=[[] for _ in range(len(data.lengths))], prepend_bos=True, pad_id=model.bos_id or 0
    )
    loss, count = mean_loss(model, batch, batch_size=batch_size)
    table = None
    if ablation is not None:
        run = run_ablation(model, data, ablation)
        table = run.table.copy()
        table["unablated_value"] = run.unablated_value
    return HeldoutLoss(data=data, loss=loss, tokens=count, ablation=table)
