"""The facts of ``MODEL_CARD.md`` for a demo checkpoint: data, licence, training, losses and its
head census, as data.

The census is the one ``headlens classify --model demo`` runs (default settings), with and
without BOS, on the checkpoint as saved: loaded back through
:func:`headlens.probes.loading.load_model` like any local folder.  The card's text is the
template ``model_card.md.j2`` next to this module, rendered by
:func:`headlens.reports.runs.demo_card.render_model_card` (nothing here formats text).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from safetensors import safe_open

from headlens.analyses.demo.replay import read_log
from headlens.analyses.heads.census import CensusConfig, run_census
from headlens.analyses.heads.classify import classify_heads, roles_of
from headlens.analyses.measure.evalset import text_eval_set, window_basis
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.measure.python_docs import heldout_text
from headlens.analyses.measure.texts import HELDOUT_TEXT
from headlens.probes.loading import load_model

__all__ = [
    "DETECTORS",
    "SINK_THRESHOLD",
    "TEMPLATE",
    "census_of",
    "card_facts",
    "template_text",
    "loss_bases",
    "heldout_text_losses",
]

log = logging.getLogger(__name__)

#: The detectors whose scores the card shows, in column order.
DETECTORS = ("previous_token", "duplicate_token", "induction", "sink", "referent")
#: The census's sink threshold (Gu et al.'s epsilon) the card counts heads against.
SINK_THRESHOLD = 0.3
#: The card's Markdown template, shipped in this package.
TEMPLATE = "model_card.md.j2"
#: The census runs the card reports, in order: (key, BOS prepended).
CENSUS_RUNS = (("bos", True), ("no_bos", False))


def loss_bases(recipe: dict[str, Any], final: dict[str, Any]) -> dict[str, str]:
    """What each loss of the training run is measured on, in the one wording of
    :func:`headlens.analyses.measure.evalset.window_basis`: ``heldout`` and ``eval_text`` (the
    final losses, every window of each stream), ``curve`` (the learning curve's evaluations)."""
    seq = int(recipe["seq_len"])
    stream = "token stream (its documents joined by <|endoftext|>, one opening it)"
    out = {
        "curve": window_basis(
            n_windows=int(recipe["eval_windows"]),
            window=seq,
            n_predictions=int(recipe["eval_windows"]) * (seq - 1),
            text="held-out split",
            how=f"the first windows of its {stream}",
        )
    }
    if final:
        out["heldout"] = window_basis(
            n_windows=int(final["heldout_windows"]),
            window=seq,
            n_predictions=int(final["heldout_targets"]),
            text="held-out split",
            how=f"every window of its {stream}",
        )
        out["eval_text"] = window_basis(
            n_windows=int(final["eval_text_windows"]),
            window=seq,
            n_predictions=int(final["eval_text_targets"]),
            text="headlens evaluation text (`analyses/data/eval_text.txt`)",
            how="every window",
        )
    return out


def heldout_text_losses(folder: str | Path, windows: Sequence[tuple[str, int, int]], *, batch_size: int = 8) -> list[dict[str, Any]]:
    """The checkpoint's loss on :func:`heldout_text` cut as the commands cut a ``--text-file``
    (:func:`headlens.analyses.measure.evalset.text_eval_set`, BOS, the same metric code):
    one row per ``(what, n_windows, window)`` with the mean, the standard deviation over
    windows and the basis line."""
    model = load_model(model=str(folder), device="cpu")
    text = heldout_text()
    rows = []
    for what, n_windows, window in windows:
        data = text_eval_set(
            model.tokenizer,
            text,
            n_windows=n_windows,
            window=window,
            prepend_bos=True,
            n_ctx=model.n_ctx,
            frame=model.frame(True),
            source=HELDOUT_TEXT,
        )
        with torch.inference_mode():
            values = torch.cat([model_values(model, *data.batch(r)[:2], data, r) for r in data.rows(batch_size)]).numpy()
        rows.append(
            {
                "what": what,
                "n_windows": n_windows,
                "window": window,
                "loss": float(values.mean()),
                "window_sd": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                "basis": data.basis(),
            }
        )
        log.info("demo card: %s: %.4f on %s", what, rows[-1]["loss"], rows[-1]["basis"])
    return rows


def template_text() -> str:
    """The text of :data:`TEMPLATE` (package data)."""
    return resources.files("headlens.analyses.demo").joinpath(TEMPLATE).read_text(encoding="utf-8")


def census_of(folder: str | Path, *, prepend_bos: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(scores, roles)`` of the checkpoint in ``folder``: default census, on CPU; ``roles`` is
    the long role table (one row per (head, role))."""
    model = load_model(model=str(folder), device="cpu")
    scores = run_census(model, CensusConfig(prepend_bos=prepend_bos)).scores
    return scores, classify_heads(scores).roles


def _census_facts(scores: pd.DataFrame, roles: pd.DataFrame) -> dict[str, Any]:
    """One census: every head's scores and roles, the uniform baselines, the strongest head per detector."""
    base = scores.groupby("detector")["baseline"].first()
    wide = scores.pivot_table(index=["layer", "head"], columns="detector", values="score")
    by_head = roles_of(roles)
    heads = [
        {
            "layer": int(layer),
            "head": int(head),
            "scores": [None if pd.isna(row.get(d)) else float(row.get(d)) for d in DETECTORS],
            "has_role": [d in by_head.get((layer, head), ()) for d in DETECTORS],
        }
        for (layer, head), row in wide.iterrows()
    ]
    best = []
    for det in DETECTORS:
        sub = scores[scores.detector == det]
        if sub.empty:
            continue
        top = sub.sort_values("score", ascending=False).iloc[0]
        best.append(
            {
                "detector": det,
                "layer": int(top.layer),
                "head": int(top["head"]),
                "score": float(top.score),
                "ci_low": float(top.ci_low),
                "ci_high": float(top.ci_high),
                "baseline": float(top.baseline),
                "n": int(top.n),
            }
        )
    values = [base.get(d) for d in DETECTORS]
    baseline = [None if v is None or pd.isna(v) else float(v) for v in values]
    return {"heads": heads, "roles": roles, "baseline": baseline, "best": best}


def _sink_facts(scores: pd.DataFrame) -> dict[str, Any]:
    sink = scores[scores.detector == "sink"]
    return {"over": int((sink.score > SINK_THRESHOLD).sum()), "heads": len(sink), "best": float(sink.score.max())}


def _count_params(weights: Path) -> int:
    """Parameters stored in a safetensors file (tied weights are stored once)."""
    with safe_open(str(weights), framework="pt") as fh:
        total = 0
        for key in fh.keys():
            n = 1
            for dim in fh.get_slice(key).get_shape():
                n *= dim
            total += n
        return total


def _curve(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The learning curve: every logged evaluation, with the mean training loss of the last 50 steps."""
    train_losses = {r["step"]: r["train_loss"] for r in rows if r.get("train_loss") is not None}
    out = []
    for r in rows:
        if r.get("heldout_loss") is None:
            continue
        recent = [train_losses[s] for s in range(max(1, r["step"] - 49), r["step"] + 1) if s in train_losses]
        out.append({**r, "train_loss_mean": sum(recent) / len(recent) if recent else None})
    return out


def card_facts(
    folder: str | Path, census: dict[str, tuple[pd.DataFrame, pd.DataFrame]], text_losses: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Everything the card states, from ``training_summary.json``, ``training_log.jsonl``, the
    weights file, ``census`` (``{"bos": (scores, roles), "no_bos": ...}``; either may be missing)
    and ``text_losses`` (:func:`heldout_text_losses`; None: not measured)."""
    folder = Path(folder)
    summary, rows = read_log(folder)
    rec = summary["recipe"]
    weights = folder / "model.safetensors"
    kinds = rec["kinds"]
    return {
        "summary": summary,
        "recipe": rec,
        "data": summary["data"],
        "final": summary["final"],
        "versions": summary["versions"],
        "size_mb": weights.stat().st_size / 1e6 if weights.exists() else float("nan"),
        "n_params": summary.get("n_params") or (_count_params(weights) if weights.exists() else None),
        "kind_counts": [(k, kinds.count(k)) for k in ("random", "natural", "span") if k in kinds],
        "curve": _curve(rows),
        "detectors": list(DETECTORS),
        "census": {key: _census_facts(*census[key]) for key, _ in CENSUS_RUNS if key in census},
        "sinks": {key: _sink_facts(census[key][0]) for key, _ in CENSUS_RUNS if key in census},
        "sink_threshold": SINK_THRESHOLD,
        "bases": loss_bases(rec, summary["final"]),
        "text_losses": text_losses or [],
        # the row of every window of the held-out text (the card's own figure, cut as a --text-file)
        "text_loss_all": next(
            (
                r
                for r in text_losses or []
                if summary["final"] and r["n_windows"] == summary["final"]["heldout_windows"] and r["window"] == rec["seq_len"]
            ),
            None,
        ),
        "heldout_text_name": HELDOUT_TEXT,
    }
