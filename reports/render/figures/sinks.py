"""Figures of the attention-sink investigation, each written as PNG and SVG.

Figures are drawn on their own Agg canvas (:mod:`headlens.reports.render.figures.common`).  SVGs are
deterministic (fixed hash salt, no date).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LinearSegmentedColormap, Normalize
from matplotlib.ticker import MaxNLocator

from headlens.reports.render.figures.common import _pyplot, save_figure

__all__ = [
    "sink_figures", "sink_figure_makers", "alpha_figure", "layer_rate_figure", "value_norm_figure", "content_figure", "content_heatmap",
    "windowed_figure", "lengths_plot", "lengths_figure",
]  # fmt: skip


def _plt() -> Any:
    return _pyplot()


def _save(fig: Any, out_dir: Path, stem: str) -> list[Path]:
    return save_figure(fig, out_dir / stem, ("png", "svg"))


def _bos_label(bos: bool) -> str:
    return "with BOS" if bos else "no BOS"


def _grid(df: pd.DataFrame, value: str) -> pd.DataFrame:
    return df.pivot(index="layer", columns="head", values=value).sort_index()


def _panel_size(df: pd.DataFrame) -> tuple[float, float]:
    n_layers, n_heads = df["layer"].nunique(), df["head"].nunique()
    return max(5.0, 2.5 + 0.5 * n_heads), max(2.8, 1.6 + 0.4 * n_layers)


def _heatmap(
    ax: Any, grid: pd.DataFrame, *, title: str, vmin: float = 0.0, vmax: float = 1.0, cmap: str = "viridis", label: str = ""
) -> None:
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    annot = grid.size <= 16 * 16
    sns.heatmap(
        grid,
        ax=ax,
        vmin=vmin,
        vmax=vmax,
        cmap=cmap,
        annot=annot,
        fmt=".2f",
        annot_kws={"size": 6 if grid.size > 64 else 8},
        cbar_kws={"label": label},
    )
    ax.set_title(title)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")


def alpha_figure(census: pd.DataFrame, eps: float) -> Any:
    """Layer x head heatmap of the mean sink alpha, one panel per BOS setting."""
    plt = _plt()
    settings = list(dict.fromkeys(census["bos"]))
    w, h = _panel_size(census)
    fig, axes = plt.subplots(1, len(settings), figsize=(w * len(settings), h), squeeze=False)
    for ax, bos in zip(axes[0], settings, strict=True):
        sub = census[census["bos"] == bos]
        uniform = float(sub["uniform_alpha"].iloc[0])
        _heatmap(
            ax,
            _grid(sub, "alpha_mean"),
            title=f"sink alpha, {_bos_label(bos)} (eps {eps:g}, uniform {uniform:.3f})",
            label="mean alpha (attention to position 0)",
        )
    fig.tight_layout()
    return fig


def layer_rate_figure(by_layer: pd.DataFrame, eps: float) -> Any:
    """Line plot of the sink rate by layer, one line per BOS setting, with the uniform baseline."""
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    plt = _plt()
    df = by_layer.copy()
    df["setting"] = df["bos"].map(_bos_label)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    sns.lineplot(data=df, x="layer", y="sink_rate", hue="setting", marker="o", ax=ax)

    baselines = df.groupby("bos")["uniform_sink_rate"].first()
    if baselines.nunique() == 1:
        ax.plot(
            sorted(df["layer"].unique()),
            [baselines.iloc[0]] * df["layer"].nunique(),
            linestyle="--",
            color="grey",
            label="uniform attention",
        )
    else:
        for bos, sub in df.groupby("bos"):
            ax.plot(
                sub["layer"], sub["uniform_sink_rate"], linestyle="--", color="grey", label=f"uniform attention ({_bos_label(bool(bos))})"
            )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel(f"sink rate (alpha > {eps:g})")
    ax.set_title("Fraction of (sequence, head) that sink, by layer")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def value_norm_figure(value_norm: pd.DataFrame) -> Any:
    """Attention share and value-norm share of the sink, layer x head, per BOS setting."""
    plt = _plt()
    settings = list(dict.fromkeys(value_norm["bos"]))
    w, h = _panel_size(value_norm)
    fig, axes = plt.subplots(len(settings), 2, figsize=(2 * w, h * len(settings)), squeeze=False)
    for row, bos in zip(axes, settings, strict=True):
        sub = value_norm[value_norm["bos"] == bos]
        _heatmap(row[0], _grid(sub, "attn_share"), title=f"attention share of position 0, {_bos_label(bos)}", label="mean A[i,0], i >= 1")
        _heatmap(
            row[1],
            _grid(sub, "value_norm_share"),
            title=f"value-norm share of position 0, {_bos_label(bos)}",
            label="||A[i,0] v0 W_O|| / sum_j ||A[i,j] vj W_O||",
        )
    fig.tight_layout()
    return fig


#: Most heads in one row of the content heatmap: a 12-inch figure whose labels stay 9 pt when
#: the page shows it at its width.
CONTENT_COLUMNS_PER_ROW = 16

#: Font sizes (points) of the content heatmap's tick labels and cell values.
LABEL_PT, CELL_PT = 9, 7


def content_figure(content: pd.DataFrame, eps: float, max_heads: int = 48) -> Any:
    """Sink alpha per first-token variant (rows) and head (columns); the strongest heads when there are many.

    Heads are wrapped into rows of at most :data:`CONTENT_COLUMNS_PER_ROW` (one shared colour
    bar), so the figure keeps a readable width and its labels a fixed size (:data:`LABEL_PT`)."""
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    plt = _plt()
    df = content.copy()
    df["name"] = df["layer"].astype(str) + "." + df["head"].astype(str)
    grid = df.pivot_table(index="variant", columns="name", values="alpha_first", observed=True, sort=False)
    n_all = grid.shape[1]
    if n_all > max_heads:
        grid = grid[grid.max().sort_values(ascending=False).index[:max_heads]]
    else:
        order = df.drop_duplicates("name").sort_values(["layer", "head"])["name"]
        grid = grid[list(order)]
    n_rows = math.ceil(grid.shape[1] / CONTENT_COLUMNS_PER_ROW)
    per_row = math.ceil(grid.shape[1] / n_rows)
    longest = max(len(str(c)) for c in grid.columns)
    cell_w = max(0.5, 0.08 * longest + 0.1)  # inches: a label of 9 pt fits across its cell
    label_w = 0.08 * max(len(str(v)) for v in grid.index) + 0.6
    panel_h = 0.36 * grid.shape[0] + 0.75
    fig, axes = plt.subplots(n_rows, 1, figsize=(label_w + cell_w * per_row + 1.3, panel_h * n_rows + 0.8), squeeze=False)
    fig.set_layout_engine("constrained")
    for k, ax in enumerate(axes[:, 0]):
        part = grid.iloc[:, k * per_row : (k + 1) * per_row]
        sns.heatmap(part, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=True, fmt=".2f", annot_kws={"size": CELL_PT}, cbar=False)
        ax.set_xlabel("head (layer.head)" if k == n_rows - 1 else "", fontsize=LABEL_PT)
        ax.set_ylabel("first token", fontsize=LABEL_PT)
        ax.tick_params(axis="x", labelsize=LABEL_PT, labelrotation=0)
        ax.tick_params(axis="y", labelsize=LABEL_PT, labelrotation=0)
    fig.colorbar(
        ScalarMappable(norm=Normalize(0, 1), cmap="viridis"),
        ax=axes[:, 0].tolist(),
        label="alpha (attention to position 0)",
        fraction=0.04,
        aspect=25 * min(n_rows, 2),
        pad=0.02,
    )
    shown = f"the {grid.shape[1]} strongest of {n_all} heads, strongest first" if n_all > grid.shape[1] else f"all {n_all} heads"
    fig.suptitle(f"Position or content: sink alpha by first token (sink when > {eps:g}); {shown}", fontsize=10)
    return fig


def windowed_figure(windowed: pd.DataFrame) -> Any:
    """Loss against window size, one line per number of kept first tokens, full attention dashed."""
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    plt = _plt()
    settings = list(dict.fromkeys(windowed["bos"]))
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4), squeeze=False)
    for ax, bos in zip(axes[0], settings, strict=True):
        sub = windowed[windowed["bos"] == bos]
        win = sub[~sub["full_attention"]].copy()
        win["kept first tokens"] = win["keep_first"].astype(str)
        sns.lineplot(data=win, x="window", y="loss", hue="kept first tokens", marker="o", ax=ax)
        full = sub[sub["full_attention"]]
        if len(full):
            ax.axhline(float(full["loss"].iloc[0]), linestyle="--", color="grey", label="full attention")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("window (most recent keys each query sees)")
        ax.set_ylabel("mean next-token loss")
        ax.set_title(f"Windowed attention, {_bos_label(bos)}, {int(sub['seq_tokens'].iloc[0])}-token sequences")
        ax.legend(fontsize=8, title="first tokens kept", title_fontsize=8)
    fig.tight_layout()
    return fig


def content_heatmap(content: pd.DataFrame, out_dir: Path, eps: float, max_heads: int = 48) -> list[Path]:
    """``content_heatmap.png`` and ``.svg``: :func:`content_figure`."""
    return _save(content_figure(content, eps, max_heads), out_dir, "content_heatmap")


def sink_figure_makers(tables: dict[str, pd.DataFrame], eps: float) -> dict[str, Callable[[], Any]]:
    """A function making each figure whose table is present, by file stem."""
    makers: dict[str, Callable[[], Any]] = {}
    if "census" in tables:
        makers["sink_alpha_heatmap"] = functools.partial(alpha_figure, tables["census"], eps)
    if "sink_rate_by_layer" in tables:
        makers["sink_rate_by_layer"] = functools.partial(layer_rate_figure, tables["sink_rate_by_layer"], eps)
    if "value_norm" in tables:
        makers["value_norm_heatmap"] = functools.partial(value_norm_figure, tables["value_norm"])
    if "content" in tables:
        makers["content_heatmap"] = functools.partial(content_figure, tables["content"], eps)
    if "windowed" in tables:
        makers["windowed_loss"] = functools.partial(windowed_figure, tables["windowed"])
    return makers


def sink_figures(tables: dict[str, pd.DataFrame], out_dir: str | Path, eps: float) -> list[Path]:
    """Every figure whose table is present (:func:`sink_figure_makers`); returns the files written."""
    return [path for stem, make in sink_figure_makers(tables, eps).items() for path in _save(make(), Path(out_dir), stem)]


#: The panels of ``sink_lengths``: column, title, y label, uniform-attention column (or None).
_LENGTH_PANELS = (
    ("alpha_all", "alpha (all queries, Gu et al.)", "mean A[i, 0] over all i", "uniform_alpha_all"),
    ("sink_rate_all", "sink rate", "share of sequences, alpha > eps", None),
    ("first_share_all", "first-token share", "mean A[i, 0] over i >= 1", None),
    ("value_norm_share_all", "value-norm share", "||A[i,0] f_0|| / sum_j ||A[i,j] f_j||", None),
)
_VISIBLE_PANEL = ("alpha", "alpha over the queries i < w (window layers)", "mean A[i, 0] over i < window", "uniform_alpha")


def _layer_colors(layers: list[int]) -> dict[int, Any]:
    cmap = colormaps["viridis"]
    span = max(len(layers) - 1, 1)
    return {layer: cmap(0.9 * k / span) for k, layer in enumerate(layers)}


def _lengths_panel(ax: Any, part: pd.DataFrame, panel: tuple[str, str, str, str | None], colors: dict[int, Any]) -> None:
    """One quantity against length: one line per layer (mean over heads), the uniform head dashed grey."""
    column, title, ylabel, uniform = panel
    by = part.groupby(["layer", "length"], as_index=False)[[column, *([uniform] if uniform else [])]].mean()
    top = float(by[column].max())
    for _, rows in by.groupby("layer"):
        layer = int(rows["layer"].iloc[0])
        ax.plot(rows["length"], rows[column], marker="o", markersize=3, linewidth=1.4, color=colors[layer], label=f"layer {layer}")
    if uniform:
        base = by.groupby("length", as_index=False)[uniform].agg(["min", "max"])
        ax.plot(base["length"], base["max"], linestyle="--", color="grey", linewidth=1, label="uniform attention")
        if (base["min"] < base["max"]).any():  # layers of another window: their uniform alpha too
            ax.plot(base["length"], base["min"], linestyle="--", color="grey", linewidth=1)
        top = max(top, float(base["max"].max()))
    ax.set_ylim(0, 1.0 if column.startswith("sink_rate") else max(1.15 * top, 1e-3))
    ax.set_xscale("log", base=2)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=8)


def lengths_figure(table: pd.DataFrame, eps: float) -> Any:
    """Small multiples of ``sink_lengths``: one panel per quantity (rows) and BOS setting
    (columns), one line per layer (mean over heads, coloured by depth), length on a log-2 axis,
    the uniform-attention alpha dashed.  All panels use the all-queries means (Gu et al.); where
    a sliding window hides token 0 from some queries, a last row gives the window layers' alpha
    over the queries that see it (the table's ``queries = visible`` columns)."""
    plt = _plt()
    settings = sorted(table["bos"].unique()) if "bos" in table else [None]
    windowed = "queries" in table and (table["queries"] == "visible").any()
    panels = _LENGTH_PANELS + ((_VISIBLE_PANEL,) if windowed else ())
    layers = sorted(int(x) for x in table["layer"].unique())
    colors = _layer_colors(layers)
    fig, axes = plt.subplots(
        len(panels), len(settings), figsize=(4.4 * len(settings) + 1.0, 2.3 * len(panels) + 1.2), squeeze=False, sharex=True
    )
    fig.set_layout_engine("constrained")
    for col, bos in enumerate(settings):
        part = table if bos is None else table[table["bos"] == bos]
        for ax, panel in zip(axes[:, col], panels, strict=True):
            sub = part[part["window"].notna()] if panel is _VISIBLE_PANEL else part
            _lengths_panel(ax, sub, panel, colors)
            if bos is not None:
                ax.set_title(f"{panel[1]}, {_bos_label(bool(bos))}", fontsize=10)
        axes[-1, col].set_xlabel("sequence length (tokens)", fontsize=9)
    lengths = sorted(int(n) for n in table["length"].unique())
    for row, panel in zip(axes, panels, strict=True):  # one y range per quantity, so the BOS settings compare at a glance
        top = max(ax.get_ylim()[1] for ax in row)
        for ax in row:
            ax.set_ylim(0, top)
            if panel[0] in ("alpha_all", "alpha") and eps <= top:
                ax.axhline(eps, color="black", linewidth=0.8, linestyle=":", label=f"eps {eps:g}")
            elif panel[0] in ("alpha_all", "alpha"):
                ax.text(
                    0.98, 0.96, f"eps {eps:g} above the range", transform=ax.transAxes, ha="right", va="top", fontsize=8, color="dimgrey"
                )
            ax.set_xticks(lengths, [str(n) for n in lengths])
            ax.minorticks_off()
    entries: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if len(layers) > 12:  # a colour bar instead of a legend entry per layer
        cmap = LinearSegmentedColormap.from_list("layers", [colors[layer] for layer in layers])
        fig.colorbar(
            ScalarMappable(norm=Normalize(layers[0], layers[-1]), cmap=cmap), ax=axes, label="layer", fraction=0.03, pad=0.02, shrink=0.6
        )
        entries = {k: v for k, v in entries.items() if not k.startswith("layer ")}
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncol=min(len(entries), 6), fontsize=9, frameon=False)
    fig.suptitle("Attention to the first token against sequence length\n(mean over heads, one line per layer)", fontsize=11)
    return fig


def lengths_plot(table: pd.DataFrame, out_dir: str | Path, eps: float) -> list[Path]:
    """``sink_lengths.png`` and ``.svg``: :func:`lengths_figure`."""
    return _save(lengths_figure(table, eps), Path(out_dir), "sink_lengths")
