"""Figures of the attention-sink investigation, each written as PNG and SVG.

seaborn and matplotlib are imported inside the functions (Agg backend), so importing this
module costs nothing.  SVGs are deterministic (fixed hash salt, no date).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from headlens.reports.figures.common import save_figure

__all__ = ["sink_figures", "alpha_heatmap", "layer_rate_plot", "value_norm_heatmap", "content_heatmap", "windowed_plot", "lengths_plot"]


def _plt() -> Any:
    from headlens.reports.figures.common import _pyplot

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


def _heatmap(ax: Any, grid: pd.DataFrame, *, title: str, vmin: float = 0.0, vmax: float = 1.0, cmap: str = "viridis", label: str = "") -> None:
    import seaborn as sns

    annot = grid.size <= 16 * 16
    sns.heatmap(grid, ax=ax, vmin=vmin, vmax=vmax, cmap=cmap, annot=annot, fmt=".2f", annot_kws={"size": 6 if grid.size > 64 else 8}, cbar_kws={"label": label})
    ax.set_title(title)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")


def alpha_heatmap(census: pd.DataFrame, out_dir: Path, eps: float) -> list[Path]:
    """Layer x head heatmap of the mean sink alpha, one panel per BOS setting."""
    plt = _plt()
    settings = list(dict.fromkeys(census["bos"]))
    w, h = _panel_size(census)
    fig, axes = plt.subplots(1, len(settings), figsize=(w * len(settings), h), squeeze=False)
    for ax, bos in zip(axes[0], settings):
        sub = census[census["bos"] == bos]
        uniform = float(sub["uniform_alpha"].iloc[0])
        _heatmap(ax, _grid(sub, "alpha_mean"), title=f"sink alpha, {_bos_label(bos)} (eps {eps:g}, uniform {uniform:.3f})", label="mean alpha (attention to position 0)")
    fig.tight_layout()
    return _save(fig, out_dir, "sink_alpha_heatmap")


def layer_rate_plot(by_layer: pd.DataFrame, out_dir: Path, eps: float) -> list[Path]:
    """Line plot of the sink rate by layer, one line per BOS setting, with the uniform baseline."""
    plt = _plt()
    import seaborn as sns

    df = by_layer.copy()
    df["setting"] = df["bos"].map(_bos_label)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    sns.lineplot(data=df, x="layer", y="sink_rate", hue="setting", marker="o", ax=ax)
    from matplotlib.ticker import MaxNLocator

    baselines = df.groupby("bos")["uniform_sink_rate"].first()
    if baselines.nunique() == 1:
        ax.plot(sorted(df["layer"].unique()), [baselines.iloc[0]] * df["layer"].nunique(), linestyle="--", color="grey", label="uniform attention")
    else:
        for bos, sub in df.groupby("bos"):
            ax.plot(sub["layer"], sub["uniform_sink_rate"], linestyle="--", color="grey", label=f"uniform attention ({_bos_label(bool(bos))})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel(f"sink rate (alpha > {eps:g})")
    ax.set_title("Fraction of (sequence, head) that sink, by layer")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out_dir, "sink_rate_by_layer")


def value_norm_heatmap(value_norm: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Attention share and value-norm share of the sink, layer x head, per BOS setting."""
    plt = _plt()
    settings = list(dict.fromkeys(value_norm["bos"]))
    w, h = _panel_size(value_norm)
    fig, axes = plt.subplots(len(settings), 2, figsize=(2 * w, h * len(settings)), squeeze=False)
    for row, bos in zip(axes, settings):
        sub = value_norm[value_norm["bos"] == bos]
        _heatmap(row[0], _grid(sub, "attn_share"), title=f"attention share of position 0, {_bos_label(bos)}", label="mean A[i,0], i >= 1")
        _heatmap(row[1], _grid(sub, "value_norm_share"), title=f"value-norm share of position 0, {_bos_label(bos)}", label="||A[i,0] v0 W_O|| / sum_j ||A[i,j] vj W_O||")
    fig.tight_layout()
    return _save(fig, out_dir, "value_norm_heatmap")


def content_heatmap(content: pd.DataFrame, out_dir: Path, eps: float, max_heads: int = 48) -> list[Path]:
    """Sink alpha per first-token variant (rows) and head (columns); the strongest heads when there are many."""
    plt = _plt()
    df = content.copy()
    df["name"] = df["layer"].astype(str) + "." + df["head"].astype(str)
    grid = df.pivot_table(index="variant", columns="name", values="alpha_first", observed=True, sort=False)
    if grid.shape[1] > max_heads:
        grid = grid[grid.max().sort_values(ascending=False).index[:max_heads]]
    else:
        order = df.drop_duplicates("name").sort_values(["layer", "head"])["name"]
        grid = grid[list(order)]
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * grid.shape[1] + 2), 0.45 * grid.shape[0] + 2))
    import seaborn as sns

    sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", annot=grid.size <= 400, fmt=".2f", annot_kws={"size": 7}, cbar_kws={"label": "alpha (attention to position 0)"})
    ax.set_title(f"Position or content: sink alpha by first token (sink when > {eps:g})")
    ax.set_xlabel("head (layer.head)")
    ax.set_ylabel("first token")
    fig.tight_layout()
    return _save(fig, out_dir, "content_heatmap")


def windowed_plot(windowed: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Loss against window size, one line per number of kept first tokens, full attention dashed."""
    plt = _plt()
    import seaborn as sns

    settings = list(dict.fromkeys(windowed["bos"]))
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4), squeeze=False)
    for ax, bos in zip(axes[0], settings):
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
    return _save(fig, out_dir, "windowed_loss")


def sink_figures(tables: dict[str, pd.DataFrame], out_dir: str | Path, eps: float) -> list[Path]:
    """Every figure whose table is present; returns the files written."""
    out = Path(out_dir)
    paths: list[Path] = []
    if "census" in tables:
        paths += alpha_heatmap(tables["census"], out, eps)
    if "sink_rate_by_layer" in tables:
        paths += layer_rate_plot(tables["sink_rate_by_layer"], out, eps)
    if "value_norm" in tables:
        paths += value_norm_heatmap(tables["value_norm"], out)
    if "content" in tables:
        paths += content_heatmap(tables["content"], out, eps)
    if "windowed" in tables:
        paths += windowed_plot(tables["windowed"], out)
    return paths


def lengths_plot(table: pd.DataFrame, out_dir: str | Path, eps: float) -> list[Path]:
    """``sink_lengths``: per layer, the mean over heads of alpha (solid), first-token share
    (dashed) and sink rate (dotted: the share of sequences whose alpha exceeds eps) against the
    context length (log scale); one panel per BOS setting."""
    plt = _plt()
    out = Path(out_dir)
    settings = sorted(table["bos"].unique()) if "bos" in table else [True]
    fig, axes = plt.subplots(1, len(settings), figsize=(5.5 * len(settings), 3.8), squeeze=False)
    for ax, bos in zip(axes[0], settings):
        part = table[table["bos"] == bos] if "bos" in table else table
        by = part.groupby(["layer", "length"], as_index=False).agg(alpha=("alpha", "mean"), first=("first_share", "mean"), rate=("sink_rate", "mean"))
        for layer, rows in by.groupby("layer"):
            line, = ax.plot(rows["length"], rows["alpha"], marker="o", label=f"layer {layer}")
            ax.plot(rows["length"], rows["first"], linestyle="--", color=line.get_color())
            ax.plot(rows["length"], rows["rate"], linestyle=":", color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1)
        ax.axhline(eps, color="grey", linewidth=0.8)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("mean over heads")
        ax.set_title(f"{_bos_label(bool(bos))}: alpha (solid), first-token share (dashed),\nsink rate, alpha > {eps:g} (dotted)", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    paths = _save(fig, out, "sink_lengths")
    plt.close(fig)
    return paths
