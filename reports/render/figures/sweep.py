"""Figures of a sweep: heads over training, and across model sizes. Plotting imports are lazy.

* ``over_training-MODEL.{png,svg}`` (one per model with training steps): one panel per
  detector with every head's score against the step (heads that hold the role at some
  checkpoint in colour and named, the others grey), then the number of heads per role, then
  the held-out loss, all on one step axis, so that a phase change lines up across panels;
* ``across_models.{png,svg}`` (when the sweep has several models): heads per role and the
  held-out loss against the step (one line per model), or against the parameter count when
  the checkpoints have no steps (a sweep over sizes).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from headlens.analyses.heads.classify import default_thresholds
from headlens.reports.render.figures.common import _pyplot, save_figure

log = logging.getLogger(__name__)

__all__ = ["sweep_figures", "role_counts", "distinct_lines"]

#: matplotlib's default cycle, for the lines of the models in ``across_models``.
_MODEL_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


def role_counts(data: pd.DataFrame) -> pd.DataFrame:
    """Heads per role: ``model, step, label, detector, n_heads`` (zero where no head has it)."""
    keys = ["model", "step", "label", "detector"]
    counts = data.assign(role=data["role"].astype(int)).groupby(keys, dropna=False, sort=False)["role"].sum()
    return counts.rename("n_heads").reset_index()


#: Line style, marker, marker size and width of the n-th line of a panel: several lines often hold
#: the same values (0 heads for most roles early in training; two models with equal losses), so
#: each line differs from the others in dash pattern and marker, and the markers shrink so that
#: coinciding ones nest.
_LINE_STYLES = [
    ("-", "o", 8.0, 2.6),
    ("--", "s", 6.0, 2.0),
    (":", "^", 5.0, 1.8),
    ("-.", "D", 3.6, 1.4),
    ((0, (5, 1, 1, 1, 1, 1)), "v", 3.0, 1.2),
]


def distinct_lines(ax, series: Mapping[str, pd.Series], colours: Sequence[str]) -> None:
    """One line per ``series`` item (index: x), told apart where they coincide: each its
    own colour, dash pattern and marker (hollow, nested by size), drawn widest first; a line equal to an
    earlier one at every x says so in the legend (``= NAME``)."""
    shown: dict[str, pd.Series] = {}
    for i, (name, c) in enumerate(series.items()):
        ls, marker, ms, lw = _LINE_STYLES[i % len(_LINE_STYLES)]
        same = [other for other, o in shown.items() if o.index.equals(c.index) and (o.to_numpy() == c.to_numpy()).all()]
        label = f"{name} (= {same[0]})" if same else name
        colour = colours[i % len(colours)]
        ax.plot(c.index, c.values, ls=ls, lw=lw, marker=marker, ms=ms, mfc="none", mew=1.3, color=colour, label=label, zorder=2 + i)
        shown[name] = c


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def _over_training(
    data: pd.DataFrame, checkpoints: pd.DataFrame, model: str, out: Path, formats: Sequence[str], thresholds: Mapping[str, float]
) -> list[Path]:
    plt = _pyplot()
    d = data[(data["model"] == model) & data["step"].notna()].copy()
    d["step"] = d["step"].astype(float)
    measured = d.groupby("detector", sort=False)["score"].apply(lambda s: s.notna().any())
    detectors = [det for det in dict.fromkeys(d["detector"]) if measured[det]]  # next_token on causal attention: NaN throughout
    loss = checkpoints[(checkpoints["model"] == model) & checkpoints["step"].notna()].copy()
    loss["step"] = loss["step"].astype(float)
    has_loss = loss["heldout_loss"].notna().any()
    n_panels = len(detectors) + 1 + int(has_loss)
    fig, axes = plt.subplots(n_panels, 1, figsize=(7.5, 2.1 * n_panels + 0.6), sharex=True, squeeze=False)
    axes = axes[:, 0]
    colours = ["#1b6ca8", "#d1495b", "#2e933c", "#edae49", "#7b2cbf", "#00798c", "#9c6644", "#e76f51"]
    for ax, det in zip(axes, detectors, strict=False):
        g = d[d["detector"] == det]
        holders = g[g["role"]].drop_duplicates(["layer", "head"])[["layer", "head"]].itertuples(index=False)
        named = sorted((int(a), int(b)) for a, b in holders)
        for (layer, head), h in g.groupby(["layer", "head"]):
            h = h.sort_values("step")
            if (layer, head) in named:
                i = named.index((layer, head))
                ax.plot(h["step"], h["score"], marker="o", ms=3, lw=1.8, color=colours[i % len(colours)], label=f"{layer}.{head}")
                on = h[h["role"]]
                ax.scatter(on["step"], on["score"], s=28, facecolors="none", edgecolors=colours[i % len(colours)], lw=1.2)
            else:
                ax.plot(h["step"], h["score"], lw=0.7, color="0.75", zorder=0)
        if det in thresholds:
            ax.axhline(thresholds[det], ls="--", color="0.45", lw=0.8, label="role threshold")
        base = g.groupby("step")["baseline"].mean()
        ax.plot(base.index, base.values, ls=":", color="0.3", lw=1, label="uniform baseline")
        ax.set_ylim(min(0.0, float(g["score"].min())), max(1.0, float(g["score"].max())) * 1.02)
        ax.set_ylabel(f"{det}\nscore")
        if named:
            ax.legend(
                fontsize=7,
                ncol=min(4, len(named) + 1),
                loc="upper left",
                frameon=False,
                title="heads with the role (circles: at that step)",
                title_fontsize=7,
            )
    counts = role_counts(d)
    ax = axes[len(detectors)]
    distinct_lines(ax, {det: counts[counts["detector"] == det].groupby("step")["n_heads"].sum().sort_index() for det in detectors}, colours)
    ax.set_ylim(-0.3, max(1, int(counts["n_heads"].max()) if len(counts) else 1) + 0.5)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("heads\nwith the role")
    ax.legend(fontsize=7, ncol=3, frameon=False, loc="upper left")
    if has_loss:
        ax = axes[-1]
        loss = loss.sort_values("step")
        ax.plot(loss["step"], loss["heldout_loss"], marker="o", ms=3, color="black")
        ax.set_ylabel("held-out loss\n(nats/token)")
    axes[-1].set_xlabel("training step")
    axes[0].set_title(f"{model}: heads over training ({loss['step'].nunique() if len(loss) else d['step'].nunique()} checkpoints)")
    fig.tight_layout()
    return save_figure(fig, out / f"over_training-{_safe(model)}", formats)


def _across_models(data: pd.DataFrame, checkpoints: pd.DataFrame, out: Path, formats: Sequence[str]) -> list[Path]:
    plt = _pyplot()
    by_step = data["step"].notna().all()
    x = "step" if by_step else "n_params"
    counts = role_counts(data).merge(checkpoints[["model", "label", "n_params"]], on=["model", "label"], how="left")
    detectors = list(dict.fromkeys(data["detector"]))
    has_loss = checkpoints["heldout_loss"].notna().any()
    n_panels = len(detectors) + int(has_loss)
    fig, axes = plt.subplots(n_panels, 1, figsize=(7.5, 1.9 * n_panels + 0.6), sharex=True, squeeze=False)
    axes = axes[:, 0]
    models = list(dict.fromkeys(checkpoints["model"]))
    for ax, det in zip(axes, detectors, strict=False):
        c = counts[counts["detector"] == det]
        if by_step:
            distinct_lines(
                ax,
                {
                    m: c[c["model"] == m].assign(step=lambda f: f["step"].astype(float)).set_index("step")["n_heads"].sort_index()
                    for m in models
                },
                _MODEL_COLOURS,
            )
            ax.legend(fontsize=7, frameon=False)
        else:
            cs = c.sort_values("n_params")
            ax.plot(cs["n_params"], cs["n_heads"], marker="o", color="0.3")
            for r in cs.itertuples():
                ax.annotate(r.model.split("/")[-1], (r.n_params, r.n_heads), fontsize=6, xytext=(2, 2), textcoords="offset points")
        ax.set_ylabel(f"{det}\nheads")
    if has_loss:
        ax = axes[-1]
        distinct_lines(
            ax,
            {
                m: checkpoints[checkpoints["model"] == m].assign(x=lambda f: f[x].astype(float)).set_index("x")["heldout_loss"].sort_index()
                for m in models
            },
            _MODEL_COLOURS,
        )
        if by_step:
            ax.legend(fontsize=7, frameon=False)
        ax.set_ylabel("held-out loss")
    if not by_step:
        axes[-1].set_xscale("log")
    axes[-1].set_xlabel("training step" if by_step else "parameters")
    axes[0].set_title("heads per role across models")
    fig.tight_layout()
    return save_figure(fig, out / "across_models", formats)


def sweep_figures(
    data: pd.DataFrame,
    checkpoints: pd.DataFrame,
    out: str | Path,
    formats: Sequence[str] = ("png", "svg"),
    *,
    thresholds: Mapping[str, float] | None = None,
) -> list[Path]:
    """Write the sweep's figures to ``out``; returns their paths.  ``thresholds``: each detector's
    role threshold, drawn as a dashed line (default: the detectors' own)."""
    if thresholds is None:
        thresholds = default_thresholds()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for model in dict.fromkeys(checkpoints["model"]):
        steps = checkpoints.loc[checkpoints["model"] == model, "step"]
        if steps.notna().sum() >= 2:
            paths += _over_training(data, checkpoints, model, out, formats, thresholds)
        else:
            log.info("%s: fewer than two checkpoints with a training step; no over-training figure", model)
    if checkpoints["model"].nunique() > 1:
        paths += _across_models(data, checkpoints, out, formats)
    return paths
