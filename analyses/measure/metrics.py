"""Which metric, and each item's value of it: the metric a model can be measured by
(:func:`default_metric`, :func:`check_metric`), the per-item loss / logit difference / embedding
change of a forward (:func:`item_values`, :func:`model_values`) and the degradation relative to a
baseline (:func:`worse_by`).  Definitions: :mod:`headlens.analyses.measure`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.analyses.measure.embedding import attention_mask, last_hidden, mean_pool
from headlens.analyses.measure.evalset import HEAD_METRICS, METRICS, EvalSet
from headlens.probes.errors import InputError, UnsupportedModelError

log = logging.getLogger(__name__)

_NLL_ROWS = 4  # positions per float64 log_softmax: 4 x 50k logits stay in a core's cache

__all__ = ["default_metric", "check_metric", "metric_positions", "item_values", "model_values", "worse_by", "token_nll"]


def default_metric(model: Any) -> tuple[str, str | None]:
    """``(metric, why)``: ``embedding`` when the output head is new or the model is an encoder
    (``why`` says which), else ``loss`` (``why`` None)."""
    name = getattr(getattr(model, "config", None), "model", None) or "the model"
    if getattr(model, "head_is_new", False):
        return (
            "embedding",
            f"the output head of {name} was newly initialised (it is not in the checkpoint), so a loss would come from random weights",
        )
    if getattr(model, "is_encoder", False):
        return "embedding", f"{name} is a bidirectional encoder, which next-token loss does not apply to"
    return "loss", None


def check_metric(model: Any, metric: str) -> None:
    """Refuse a metric that means nothing on ``model`` (:class:`UnsupportedModelError`, exit 2):
    loss or logit difference when the output head was newly initialised, next-token loss or a
    last-position logit difference on a bidirectional encoder."""
    if metric not in METRICS:
        raise InputError(f"unknown metric {metric!r}: choose from {', '.join(METRICS)}", metric=metric)
    name = getattr(getattr(model, "config", None), "model", None) or "this model"
    if metric in HEAD_METRICS and getattr(model, "head_is_new", False):
        raise UnsupportedModelError(
            f"metric={metric!r} reads the output head of {name}, which was newly initialised (it is not in the checkpoint), so every "
            "value would come from random weights; use metric='embedding' (change in the mean-pooled sentence embedding)",
            metric=metric,
        )
    if metric == "logit-diff" and getattr(model, "is_encoder", False):
        raise UnsupportedModelError(
            f"metric='logit-diff' reads the next-token logits at a prompt's last position, which {name}, a bidirectional encoder, does "
            "not predict; use metric='embedding'",
            metric=metric,
        )
    if metric == "loss" and getattr(model, "is_encoder", False):
        raise UnsupportedModelError(
            f"metric='loss' is next-token cross-entropy, which {name}, a bidirectional encoder, does not model (its output at a position "
            "sees the next token); use metric='embedding' (change in the mean-pooled sentence embedding)",
            metric=metric,
        )


def metric_positions(data: EvalSet, lengths: Int[Tensor, " batch"]) -> list[int] | None:
    """Positions whose logits the metric reads: all of them for loss (``None``), the distinct
    last positions for logit-diff."""
    if data.metric == "loss":
        return None
    return sorted({int(n) - 1 for n in lengths})


def item_values(
    logits: Float[Tensor, "batch pos vocab"],
    tokens: Int[Tensor, "batch pos"],
    lengths: Int[Tensor, " batch"],
    data: EvalSet,
    rows: Sequence[int],
    *,
    positions: Sequence[int] | None = None,
) -> Float[Tensor, " batch"]:
    """The metric of each item (float64), from the logits of a forward on ``tokens``.

    ``loss``: mean over real positions ``loss_start <= t < length - 1`` of ``-log softmax(logits[t])[tokens[t+1]]``.
    ``logit-diff``: ``logits[length-1, correct] - logits[length-1, incorrect]``.
    ``logits`` may hold several copies of the batch stacked on dim 0 (``copies x batch``), and,
    when ``positions`` is given, only the logits of those positions (dim 1).
    """
    n = tokens.shape[0]
    copies = logits.shape[0] // n
    dev = logits.device
    lengths = lengths.to(dev)
    if data.metric == "loss":
        targets = tokens[:, 1:].to(dev).repeat(copies, 1)  # [copies*batch, pos-1]
        pos = torch.arange(tokens.shape[1] - 1, device=dev)[None, :]
        valid = ((pos < (lengths[:, None] - 1)) & (pos >= data.loss_start)).repeat(copies, 1)
        out = torch.empty(logits.shape[0], dtype=torch.float64, device=dev)
        for i in range(logits.shape[0]):  # one item at a time: the float32 [pos, vocab] temporaries stay small
            x = logits[i, :-1].float()
            top = x.max(-1).values
            sum_exp = torch.exp(x - top[:, None]).sum(-1)
            # -log p(y) = (max - x_y) + log(sum exp(x - max)); the log and the sum of the two parts
            # in float64, so a loss near 10 nats keeps ~1e-7 absolute precision instead of float32's ~1e-6
            nll = (top - x.gather(-1, targets[i][:, None]).squeeze(-1)).double() + torch.log(sum_exp.double())
            out[i] = (nll * valid[i]).sum() / valid[i].sum().clamp(min=1)
        return out
    assert data.correct is not None and data.incorrect is not None
    last = (lengths - 1).repeat(copies)
    if positions is not None:
        where = {p: i for i, p in enumerate(positions)}
        last = torch.tensor([where[int(p)] for p in last], device=dev)
    idx = torch.arange(logits.shape[0], device=dev)
    final = logits[idx, last]  # [copies*batch, vocab]
    c = data.correct[list(rows)].to(dev).repeat(copies)
    w = data.incorrect[list(rows)].to(dev).repeat(copies)
    return final[idx, c].double() - final[idx, w].double()


def model_values(
    model: Any,
    tokens: Int[Tensor, "batch pos"],
    lengths: Int[Tensor, " batch"],
    data: EvalSet,
    rows: Sequence[int],
    *,
    copies: int = 1,
    run: Any = None,
) -> Float[Tensor, " batch"]:
    """Run the model on ``tokens`` repeated ``copies`` times and return each copy's item values.

    ``run(tokens, **kwargs)`` performs the forward (default: the bridge); for logit-diff it is
    asked for the logits of the needed positions only (``logits_to_keep``, when the model
    supports it: the unembedding of every other position is skipped).  For ``embedding`` the
    pass is stopped at the last hidden state (the output head never runs).  Encoders get the
    attention mask (``attention_mask=`` passed to ``run``).  A metric that means nothing on
    ``model`` is refused (:func:`check_metric`).
    """
    check_metric(model, data.metric)
    toks = tokens.repeat(copies, 1).to(model.device)
    mask = attention_mask(model, lengths, int(tokens.shape[1]), copies)
    if data.metric == "embedding":
        assert data.reference is not None
        run = run or (lambda t, **kw: model.bridge(t, return_type=None, **kw))
        emb = mean_pool(last_hidden(model, toks, mask, run), lengths.repeat(copies))
        ref = data.reference[list(rows)].to(device=emb.device, dtype=torch.float64).repeat(copies, 1)
        cos = (emb * ref).sum(-1) / (emb.norm(dim=-1) * ref.norm(dim=-1)).clamp(min=1e-300)
        return 1.0 - cos
    if mask is not None:
        run_plain = run or (lambda t, **kw: model.bridge(t, return_type="logits", **kw))
        run = lambda t, **kw: run_plain(t, attention_mask=mask, **kw)  # noqa: E731
    run = run or (lambda t, **kw: model.bridge(t, return_type="logits", **kw))
    positions = metric_positions(data, lengths)
    if positions is not None and model.extra.get("logits_to_keep", True):
        try:
            logits = run(toks, logits_to_keep=torch.tensor(positions, device=model.device))
        except TypeError as exc:
            if "logits_to_keep" not in str(exc):
                raise  # a TypeError from inside the forward is a bug, not a missing keyword
            log.debug("the model's forward takes no logits_to_keep (%s): computing the logits at every position", exc)
            model.extra["logits_to_keep"] = False
        else:
            if logits.shape[1] == len(positions):
                return item_values(logits, tokens, lengths, data, rows, positions=positions)
            log.debug(
                "the model ignored logits_to_keep (%d positions asked, %d came back): computing the logits at every position",
                len(positions),
                logits.shape[1],
            )
            model.extra["logits_to_keep"] = False  # ignored by this model
    logits = run(toks)
    return item_values(logits, tokens, lengths, data, rows)


def worse_by(metric: str, value: float, baseline: float) -> float:
    """Degradation: relative, ``(value - baseline) / |baseline|``, for loss (the opposite sign for
    logit-diff); absolute, ``value - baseline``, for the embedding change, whose unablated value
    is 0 (0.05 = the cosine to the unablated embedding fell by 0.05)."""
    if metric == "embedding":
        return value - baseline
    if baseline == 0:
        return float("inf") if METRICS[metric] * (value - baseline) > 0 else 0.0
    return METRICS[metric] * (value - baseline) / abs(baseline)


def token_nll(logits: Float[Tensor, "batch pos vocab"], target: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos"]:
    """Each position's loss of ``target`` under ``logits`` (float64, on the CPU): the one next-token loss
    of the knockout and evidence tests.  A few positions at a time: log_softmax is per position, so this
    equals the whole batch at once bit for bit, without a float64 copy of every logit (hundreds of MB on a
    50k vocabulary, about 5x slower on a CPU)."""
    target = target[..., None].to(logits.device)
    out = torch.empty(logits.shape[:2], dtype=torch.float64, device=logits.device)
    for i in range(logits.shape[0]):
        for j in range(0, logits.shape[1], _NLL_ROWS):
            rows = slice(j, j + _NLL_ROWS)
            out[i, rows] = -torch.log_softmax(logits[i, rows].double(), -1).gather(-1, target[i, rows]).squeeze(-1)
    return out.cpu()
