"""The ``sinks`` stage: attention sinks (:func:`headlens.reports.api.sinks.sinks`); on a
model without a trained output head, or an encoder, the loss-based parts are left out."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.probes.outputs import write_text
from headlens.reports.api.sinks import sinks
from headlens.reports.render.figures.report import sink_alpha_heatmap
from headlens.reports.render.figures.sinks import sink_figures
from headlens.reports.render.sinks_tables import summary_markdown
from headlens.reports.render.verdict_text import figure_smoke_note
from headlens.reports.runs.report.context import Stage, StageContext

if TYPE_CHECKING:  # result.py imports the stages (Example): the type only
    from headlens.reports.runs.report.result import Report

log = logging.getLogger(__name__)

__all__ = ["STAGE"]


def _run_sinks(ctx: StageContext) -> dict[str, Any]:
    loaded = ctx.model()
    config = ctx.settings.sinks()
    left_out = _loss_analyses(loaded, config)
    if left_out:
        config = dataclasses.replace(config, skip=tuple(dict.fromkeys((*config.skip, *left_out))))
        ctx.say(f"left out {' and '.join(left_out)}: they measure loss, which {_why_no_loss(loaded)}")
    result = sinks(loaded, config, progress=ctx.step, command=ctx.command)
    report = result.run
    files = result.write_tables(ctx.dir)
    if not ctx.settings.quick:
        files += sink_figures(report.tables, ctx.dir, config.eps)
    census = report.tables["census"]
    rates = report.tables["sink_rates"]
    n_sequences = (
        int(rates.loc[rates["bos"] == ctx.settings.prepend_bos, "n_sequences"].iloc[0])
        if (rates["bos"] == ctx.settings.prepend_bos).any()
        else None
    )
    note = figure_smoke_note(f"the sink census only, on {n_sequences} sequences") if ctx.settings.smoke_test("sinks") else None
    files += sink_alpha_heatmap(
        census[census["bos"] == ctx.settings.prepend_bos],
        ctx.dir / "sink_alpha",
        eps=config.eps,
        bos=ctx.settings.prepend_bos,
        n_sequences=n_sequences,
        note=note,
    )
    files.append(
        write_text(
            ctx.dir / "summary.md", summary_markdown(report, model_name=loaded.name, figures=[p for p in files if p.suffix == ".png"])
        )
    )
    info = {"sinks": report.info, "eps": config.eps, "bos": list(config.bos)}
    if left_out:
        info["left_out"] = {"analyses": list(left_out), "why": f"they measure loss, which {_why_no_loss(loaded)}"}
    return info


#: Parts of the sinks stage that measure next-token loss.
_SINK_LOSS_ANALYSES = ("removal", "windowed")


def _loss_analyses(loaded: Any, config: Any) -> tuple[str, ...]:
    """The loss-based sink analyses ``config`` would run that mean nothing on ``loaded`` (a new
    output head, or an encoder): they are left out."""
    if not (getattr(loaded, "head_is_new", False) or getattr(loaded, "is_encoder", False)):
        return ()
    return tuple(a for a in _SINK_LOSS_ANALYSES if a not in config.skip)


def _why_no_loss(loaded: Any) -> str:
    if getattr(loaded, "head_is_new", False):
        return "would be read from the newly initialised (random) output head"
    return "a bidirectional encoder does not model (next-token prediction)"


def _load_sinks(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    out = {"census": pd.read_csv(d / "census.csv"), "sink_rates": pd.read_csv(d / "sink_rates.csv")}
    for name in ("removal", "windowed", "content_verdicts"):
        if (d / f"{name}.csv").is_file():
            out[name] = pd.read_csv(d / f"{name}.csv")
    return out


def _apply(report: Report, loaded: dict[str, Any]) -> None:
    report.sinks, report.sink_rates = loaded["census"], loaded["sink_rates"]


STAGE = Stage("sinks", "attention sinks", _run_sinks, _load_sinks, lambda s: dict(dataclasses.asdict(s.sinks())), _apply)
