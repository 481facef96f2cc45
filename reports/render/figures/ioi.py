"""The IOI class figure: each head's attention from END to IO against its direct effect on
``logit(IO) - logit(S)``, with both intervals, the classes coloured (Wang et al. 2022's figure 3)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from headlens.reports.render.figures.common import _pyplot

__all__ = ["ioi_figure", "CLASS_COLOURS"]

#: Colour of each class (a head in several takes its first).
CLASS_COLOURS = {
    "name mover": "tab:blue",
    "negative name mover": "tab:red",
    "S-inhibition": "tab:green",
    "induction": "tab:purple",
    "duplicate-token": "tab:orange",
}


def ioi_figure(heads: pd.DataFrame) -> Any:
    """Attention END -> IO (x) against direct effect (y), one point per head with its 95% intervals."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 5.0))
    first = heads["classes"].fillna("").astype(str).str.split("+").str[0]
    for cls, colour in (("", "lightgrey"), *CLASS_COLOURS.items()):
        rows = heads[first == cls]
        if rows.empty:
            continue
        x, y = rows["attn_io"].to_numpy(float), rows["direct"].to_numpy(float)
        xerr = np.abs(np.vstack([x - rows["attn_io_low"].to_numpy(float), rows["attn_io_high"].to_numpy(float) - x]))
        yerr = np.abs(np.vstack([y - rows["direct_low"].to_numpy(float), rows["direct_high"].to_numpy(float) - y]))
        ax.errorbar(
            x, y, xerr=xerr, yerr=yerr, fmt="o", ms=4 if cls else 2.5, color=colour, ecolor=colour, elinewidth=0.6,
            alpha=1.0 if cls else 0.5, label=cls or "other heads",
        )  # fmt: skip
        if cls:
            for name, xi, yi in zip(rows["name"], x, y, strict=True):
                ax.annotate(str(name), (xi, yi), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set_xlabel("attention from END to IO (mean over pairs, 95% interval)")
    ax.set_ylabel("direct effect on logit(IO) - logit(S)")
    ax.set_title("IOI: attention to the indirect object and direct effect per head")
    ax.legend(fontsize=8, loc="best")
    return fig
