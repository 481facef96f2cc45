"""Layer x head heatmaps (seaborn), saved as PNG and SVG."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from headlens.probes.outputs import atomic_write
from headlens.reports.render.tables import baseline_label

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = [
    "NotebookFigure",
    "save_heatmap",
    "heatmap_figure",
    "save_figure",
    "detector_heatmaps",
    "detector_figures",
    "titled",
    "figures_text",
]


class NotebookFigure(Figure):
    """A :class:`~matplotlib.figure.Figure` that shows itself as a PNG in a notebook.

    headlens draws without pyplot (below), so Jupyter's inline backend never registers its
    display hook and a bare Figure would show as ``<Figure size ...>`` text; ``_repr_png_``
    renders it on its own Agg canvas instead.  Where the inline backend is active its own
    formatter takes precedence, so a figure is never shown twice.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        FigureCanvasAgg(self)  # its own canvas, never a pyplot manager's
        with matplotlib.rc_context(_SAVE_RC):
            self.savefig(
                buffer, format="png", bbox_inches="tight", metadata=_STABLE_METADATA["png"]
            )  # as save_figure: labels and titles whole
        return buffer.getvalue()


class _Figures:
    """The few ``pyplot`` calls the figure code makes, on object-oriented figures.

    ``subplots`` builds a :class:`matplotlib.figure.Figure` on its own Agg canvas: no pyplot
    figure manager, no ``matplotlib.use`` and no ``rcParams`` change, so drawing a report
    leaves the caller's backend, style and open figures as they were.
    """

    def __init__(self) -> None:
        self.Rectangle = Rectangle

    @staticmethod
    def subplots(nrows: int = 1, ncols: int = 1, *, figsize=None, squeeze: bool = True, **kwargs):
        fig = NotebookFigure(figsize=figsize)
        FigureCanvasAgg(fig)
        return fig, fig.subplots(nrows, ncols, squeeze=squeeze, **kwargs)

    @staticmethod
    def close(fig) -> None:
        fig.clear()


def _pyplot() -> _Figures:
    return _Figures()


#: rcParams in force while a figure is saved (scoped with ``matplotlib.rc_context``)
_SAVE_RC: dict[RcKeyType, Any] = {"svg.hashsalt": "headlens"}  # stable SVG ids


#: savefig metadata that keeps files byte-identical from run to run
_STABLE_METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}, "png": {"Software": None}}


def figures_text(paths: Sequence[str | Path]) -> str:
    """How many figures ``paths`` hold, counting a figure saved in several formats once:
    ``"1 figure (PNG, SVG)"``, ``"3 figures (PNG, SVG)"``, ``"no figure"``."""
    stems = {Path(p).with_suffix("") for p in paths}
    formats = sorted(
        {Path(p).suffix.lstrip(".").upper() for p in paths},
        key=lambda f: ("PNG", "SVG", "PDF").index(f) if f in ("PNG", "SVG", "PDF") else 9,
    )
    if not stems:
        return "no figure"
    return f"{len(stems)} figure{'s' if len(stems) != 1 else ''} ({', '.join(formats)})"


def titled(title: str, note: str | None) -> str:
    """A figure title with ``note`` (e.g. a smoke-test mark) as its second line."""
    return f"{title}\n{note}" if note else title


def save_figure(fig, stem: str | Path, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Save ``fig`` as ``stem.<fmt>`` for each format (atomically, no dates inside) and close it."""
    plt = _pyplot()
    paths = []
    try:
        with matplotlib.rc_context(_SAVE_RC):
            for fmt in formats:
                path = Path(f"{stem}.{fmt}")
                meta = _STABLE_METADATA.get(fmt)
                paths.append(
                    atomic_write(
                        path, lambda t, fmt=fmt, meta=meta: fig.savefig(t, format=fmt, dpi=150, bbox_inches="tight", metadata=meta)
                    )
                )
    finally:
        plt.close(fig)
    return paths


def save_heatmap(
    values: np.ndarray,
    title: str,
    stem: str | Path,
    *,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    cmap: str = "viridis",
    center: float | None = None,
    cbar_label: str = "score",
    marked: np.ndarray | None = None,
    formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """:func:`heatmap_figure` saved as ``stem.<fmt>`` for each format."""
    fig = heatmap_figure(values, title, vmin=vmin, vmax=vmax, cmap=cmap, center=center, cbar_label=cbar_label, marked=marked)
    return save_figure(fig, stem, formats)


def heatmap_figure(
    values: np.ndarray,
    title: str,
    *,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    cmap: str = "viridis",
    center: float | None = None,
    cbar_label: str = "score",
    marked: np.ndarray | None = None,
):
    """Heatmap of ``values[layer, head]`` (layers as rows, as in the field's L.H naming), as a Figure.

    ``marked`` (bool, same shape) outlines cells, e.g. heads that got the role.
    """
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    plt = _pyplot()
    n_layers, n_heads = values.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * n_heads + 2), max(3.0, 0.38 * n_layers + 1.5)))
    annot = n_layers * n_heads <= 64
    sns.heatmap(
        pd.DataFrame(values, index=range(n_layers), columns=range(n_heads)),
        ax=ax,
        vmin=vmin,
        vmax=vmax,
        cmap=cmap,
        center=center,
        annot=annot,
        fmt=".2f",
        annot_kws={"size": 7},
        cbar_kws={"label": cbar_label},
        square=False,
    )
    if marked is not None:
        for layer, head in zip(*np.nonzero(marked), strict=True):
            ax.add_patch(plt.Rectangle((head, layer), 1, 1, fill=False, edgecolor="red", lw=1.5))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    return fig


def detector_heatmaps(
    scores: pd.DataFrame, roles: pd.DataFrame | None, out_dir: str | Path, formats: Sequence[str] = ("png", "svg")
) -> dict[str, list[Path]]:
    """:func:`detector_figures` saved as ``heatmap_<detector>.<fmt>``."""
    return {
        stem.removeprefix("heatmap_"): save_figure(make(), Path(out_dir) / stem, formats)
        for stem, make in detector_figures(scores, roles).items()
    }


def _heatmap_note(scores: pd.DataFrame, marked: np.ndarray | None) -> str:
    """A detector heatmap's second title line: what the outline means and how many prompts the scores rest on."""
    n = pd.to_numeric(scores["n"], errors="coerce") if "n" in scores else pd.Series(dtype=float)
    prompts = f"mean over {int(n.max())} prompts" if n.notna().any() else ""
    outline = "" if marked is None else f"red outline: has the role ({int(marked.sum())} of {marked.size} heads)"
    return "; ".join(filter(None, [outline, prompts]))


def detector_figures(scores: pd.DataFrame, roles: pd.DataFrame | None) -> dict[str, Callable[[], Any]]:
    """One heatmap per detector in the scores table, heads with that role outlined (``roles``: the
    long role table, :func:`headlens.analyses.heads.classify.classify_heads`): a function making
    each Figure, by file stem (``heatmap_<detector>``)."""
    n_layers = int(scores["layer"].max()) + 1
    n_heads = int(scores["head"].max()) + 1

    def make(det: str, g: pd.DataFrame) -> Any:
        grid = np.full((n_layers, n_heads), np.nan)
        grid[g["layer"].to_numpy(), g["head"].to_numpy()] = g["score"].to_numpy()
        marked = None
        title = f"{det} score (uniform baseline {baseline_label(g['baseline'])})"
        if roles is not None:
            marked = np.zeros((n_layers, n_heads), dtype=bool)
            has = roles[roles["role"] == det]
            marked[has["layer"].to_numpy(int), has["head"].to_numpy(int)] = True
        return heatmap_figure(grid, titled(title, _heatmap_note(g, marked)), marked=marked)

    return {f"heatmap_{det}": functools.partial(make, str(det), g) for det, g in scores.groupby("detector", sort=False)}
