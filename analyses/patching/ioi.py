"""IOI head classes after Wang et al. 2022, each named by its own evidence on the built-in ``ioi``
task (:mod:`headlens.analyses.patching.ioi_task`), with 95% bootstrap intervals over pairs.

Measurements (:mod:`headlens.analyses.patching.ioi_measure`): attention shares, OV copying, direct
effects; path patching (:func:`headlens.analyses.patching.path.run_path_patching`) in Wang et
al.'s direction: a sender's output from the ABC-corrupted run into its receivers' input in the
clean run, every other head at its clean output; the effect is the share of the clean - ABC gap
of ``logit(IO) - logit(S)`` the path removes (0: none, 1: all).  The rules, every threshold a
constant below:

* **name movers**: END attends to IO (interval's low end >= :data:`ATTENTION_MIN`), the OV
  circuit copies the IO name (share of pairs with IO in the top :data:`~headlens.analyses.patching.ioi_measure.TOP_K`,
  low end >= :data:`COPYING_MIN`) and the direct effect on ``logit(IO) - logit(S)`` is positive
  (interval above 0);
* **negative name movers**: END attends to IO as above, the OV circuit writes against the name
  (negative copying share, low end >= :data:`COPYING_MIN`) and the direct effect is negative
  (interval below 0);
* **S-inhibition**: a head's ABC output path-patched into every name mover's query at once, in the
  clean run, removes at least :data:`PATH_MIN` of the clean - ABC gap, its interval above 0 (senders: heads before the last name
  mover; screened, only those whose mean END -> S2 attention is at least :data:`SCREEN_ATTENTION`);
* **induction** / **duplicate-token**: S2 attends to S1+1 / to S1 (low end >= :data:`ATTENTION_MIN`)
  and the head's ABC output path-patched into the S-inhibition heads' values removes at least
  :data:`PATH_MIN` of the gap, interval above 0 (screened senders: mean S2 -> S1+1 or S2 -> S1
  attention at least :data:`SCREEN_ATTENTION`).

A class no head meets is empty, with the reason (how far the heads got through its rules).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.patching.config import PathConfig
from headlens.analyses.patching.evidence_rules import shared_keys
from headlens.analyses.patching.ioi_config import IOIConfig
from headlens.analyses.patching.ioi_measure import ATTENTION, TOP_K, copying_shares, direct_effects, measure_attention
from headlens.analyses.patching.ioi_task import ioi_pairs
from headlens.analyses.patching.pairs import PairTask
from headlens.analyses.patching.path import run_path_patching
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = [
    "IOIConfig",
    "IOIRun",
    "run_ioi",
    "class_masks",
    "class_table",
    "CLASSES",
    "ATTENTION_MIN",
    "COPYING_MIN",
    "PATH_MIN",
    "SCREEN_ATTENTION",
    "HEAD_COLUMNS",
    "CLASS_COLUMNS",
]

#: Attention share (the interval's low end) a class's pattern needs.
ATTENTION_MIN = 0.2
#: Share of pairs (the interval's low end) whose IO name the OV circuit copies (or writes against).
COPYING_MIN = 0.5
#: Share of the clean - ABC gap a path must remove (with its interval above 0).
PATH_MIN = 0.05
#: Mean attention share a sender needs to be path-patched when senders are screened (and a head
#: needs from END to IO for its OV copying to be measured: the name-mover rules need more).
SCREEN_ATTENTION = 0.1
#: The classes, in the order of the circuit (output first).
CLASSES = ("name mover", "negative name mover", "S-inhibition", "induction", "duplicate-token")

_FIGURES = (*ATTENTION, "copying", "negative_copying", "direct", "sinh_path", "feed_path")
HEAD_COLUMNS = ["layer", "head", "name"] + [f"{k}{s}" for k in _FIGURES for s in ("", "_low", "_high")] + ["classes"]
CLASS_COLUMNS = ["class", "heads", "n_heads", "rule", "reason"]

_RULES = {
    "name mover": f"END attends to IO (low end >= {ATTENTION_MIN:g}), OV copies IO (top-{TOP_K} share, low end >= {COPYING_MIN:g}),"
    " direct effect on logit(IO) - logit(S) above 0",
    "negative name mover": f"END attends to IO (low end >= {ATTENTION_MIN:g}), OV writes against IO (bottom-{TOP_K} share, low end"
    f" >= {COPYING_MIN:g}), direct effect below 0",
    "S-inhibition": f"output path-patched into the name movers' queries removes >= {PATH_MIN:g} of the gap, interval above 0",
    "induction": f"S2 attends to S1+1 (low end >= {ATTENTION_MIN:g}), output path-patched into the S-inhibition heads' values"
    f" removes >= {PATH_MIN:g} of the gap, interval above 0",
    "duplicate-token": f"S2 attends to S1 (low end >= {ATTENTION_MIN:g}), output path-patched into the S-inhibition heads' values"
    f" removes >= {PATH_MIN:g} of the gap, interval above 0",
}


@dataclass
class IOIRun:
    heads: pd.DataFrame  # HEAD_COLUMNS, one row per head
    classes: pd.DataFrame  # CLASS_COLUMNS, one row per class (empty heads: reason says why)
    paths: dict[str, pd.DataFrame] = field(default_factory=dict)  # "sinh_paths", "feed_paths": path patching tables
    info: dict[str, Any] = field(default_factory=dict)


def _with_interval(table: pd.DataFrame, name: str, per_pair: np.ndarray, config: IOIConfig) -> None:
    """``name``, ``name_low``, ``name_high``: the mean over pairs of ``[pair, layer, head]`` and its interval."""
    low, high = bootstrap_mean_ci(per_pair, n_resamples=config.n_resamples, seed=config.seed)
    table[name], table[f"{name}_low"], table[f"{name}_high"] = per_pair.mean(0).reshape(-1), low.reshape(-1), high.reshape(-1)


def _paths(
    model: LoadedModel, pairs: Any, receivers: list[tuple[int, int]], which: str, senders: list[tuple[int, int]] | None, config: IOIConfig
) -> pd.DataFrame | None:
    """The joint path table from ``senders`` (None: every earlier head) into ``receivers``' ``which``
    input (receivers of layer 0 left out: no head sends to them)."""
    receivers = [r for r in receivers if r[0] > 0]
    if not receivers or (senders is not None and not any(s[0] < max(r[0] for r in receivers) for s in senders)):
        return None
    path_config = PathConfig(
        receivers=tuple(receivers),
        receiver_input=which,
        joint=True,
        batch_size=config.batch_size,
        n_resamples=config.n_resamples,
        seed=config.seed,
    )
    return run_path_patching(model, _noising(pairs.task), path_config, senders=senders).table


def _noising(task: PairTask) -> PairTask:
    """The pairs with clean and corrupted swapped, and the answers (the metric becomes
    ``logit(S) - logit(IO)``, larger on the ABC prompt): path patching's "clean sender into the
    corrupted run" becomes the ABC sender into the clean run, every other head at its clean value
    (Wang et al.'s direction); its effect, 0 = clean .. 1 = ABC, is the share of the clean - ABC
    gap of ``logit(IO) - logit(S)`` the path removes.  (The other direction cannot restore through a name mover: the ABC prompt
    holds no IO for it to copy.)"""
    swapped = {"clean": task.corrupt, "corrupt": task.clean, "correct": task.incorrect, "incorrect": task.correct}
    return replace(task, **swapped, source={**task.source, "path_direction": "noising"})


def _screened(table: pd.DataFrame, columns: list[str], before: int, config: IOIConfig) -> list[tuple[int, int]] | None:
    if not config.screen_senders:
        return None
    keep = (table[columns].max(axis=1) >= SCREEN_ATTENTION) & (table["layer"] < before)
    return [(int(a), int(b)) for a, b in table.loc[keep, ["layer", "head"]].to_numpy()]


def _merge_path(table: pd.DataFrame, path: pd.DataFrame | None, column: str) -> None:
    if path is None or path.empty:
        return
    got = path.set_index("sender")[["effect", "effect_low", "effect_high"]]
    where = table["name"].isin(got.index)
    for src, dst in (("effect", column), ("effect_low", f"{column}_low"), ("effect_high", f"{column}_high")):
        table.loc[where, dst] = table.loc[where, "name"].map(got[src]).astype(float)


def _heads_of(mask: pd.Series, table: pd.DataFrame) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in table.loc[mask, ["layer", "head"]].to_numpy()]


def _path_passes(table: pd.DataFrame, column: str) -> pd.Series:
    return (table[column] >= PATH_MIN) & (table[f"{column}_low"] > 0)


def class_masks(table: pd.DataFrame) -> dict[str, pd.Series]:
    """Class -> which rows of a heads table (:data:`HEAD_COLUMNS`' figures) meet its rule (see the
    module doc); a path figure that is NaN (not measured) meets no rule."""
    attends_io = table["attn_io_low"] >= ATTENTION_MIN
    feeds = _path_passes(table, "feed_path")
    return {
        "name mover": attends_io & (table["copying_low"] >= COPYING_MIN) & (table["direct_low"] > 0),
        "negative name mover": attends_io & (table["negative_copying_low"] >= COPYING_MIN) & (table["direct_high"] < 0),
        "S-inhibition": _path_passes(table, "sinh_path"),
        "induction": (table["attn_ind_low"] >= ATTENTION_MIN) & feeds,
        "duplicate-token": (table["attn_dup_low"] >= ATTENTION_MIN) & feeds,
    }


def run_ioi(model: LoadedModel, config: IOIConfig | None = None, *, progress: Callable[[str, int, int], None] | None = None) -> IOIRun:
    """The IOI class analysis (see the module doc)."""
    config = config or IOIConfig()
    pairs = ioi_pairs(model, n=config.n_pairs, seed=config.seed, prepend_bos=config.prepend_bos)
    stages = 5
    step = _stepper(progress, stages)
    measures = measure_attention(model, pairs, batch_size=config.batch_size)
    step("attention")
    attends = measures.attention["attn_io"].mean(0) >= SCREEN_ATTENTION  # [layer, head]; the rules need a low end >= ATTENTION_MIN
    copying, negative = copying_shares(model, pairs, measures.resid_io, [(int(a), int(b)) for a, b in np.argwhere(attends)])
    step("copying")
    direct = direct_effects(model, pairs, batch_size=config.batch_size)
    step("direct effects")
    table = pd.DataFrame(
        [(layer, head, f"{layer}.{head}") for layer in range(model.n_layers) for head in range(model.n_heads)],
        columns=["layer", "head", "name"],
    )
    for name, values in (*measures.attention.items(), ("copying", copying), ("negative_copying", negative), ("direct", direct)):
        _with_interval(table, name, values, config)
    for column in ("sinh_path", "feed_path"):
        table[column] = table[f"{column}_low"] = table[f"{column}_high"] = np.nan
    nm = _heads_of(class_masks(table)["name mover"], table)
    top_nm = max((h[0] for h in nm), default=0)
    sinh_path = _paths(model, pairs, nm, "q", _screened(table, ["attn_s2"], top_nm, config), config)
    _merge_path(table, sinh_path, "sinh_path")
    step("S-inhibition paths")
    si = _heads_of(class_masks(table)["S-inhibition"], table)
    top_si = max((h[0] for h in si), default=0)
    feed_path = _paths(model, pairs, si, "v", _screened(table, ["attn_ind", "attn_dup"], top_si, config), config)
    _merge_path(table, feed_path, "feed_path")
    step("induction and duplicate-token paths")
    masks = class_masks(table)
    table["classes"] = ["+".join(c for c in CLASSES if bool(masks[c].iloc[i])) for i in range(len(table))]
    classes = class_table(table, masks, nm, si)
    paths = {k: v for k, v in (("sinh_paths", sinh_path), ("feed_paths", feed_path)) if v is not None}
    info = _info(pairs, measures, config, nm, si) | _feed_gqa(model, si, feed_path)
    return IOIRun(heads=table[HEAD_COLUMNS], classes=classes, paths=paths, info=info)


def _feed_gqa(model: LoadedModel, si: list[tuple[int, int]], feed_path: pd.DataFrame | None) -> dict[str, str]:
    """Under GQA the induction and duplicate-token paths into the S-inhibition heads' values patch each receiver's whole
    key-value head, so they include the paths into the other query heads of its group: ``feed_path_gqa`` says which."""
    said = shared_keys(model.n_heads, model.n_kv_heads, [r for r in si if r[0] > 0], inputs="value", named=True)
    if feed_path is None or not said:
        return {}
    return {"feed_path_gqa": f"the induction and duplicate-token paths into the S-inhibition heads' values: {said}"}


def _stepper(progress: Callable[[str, int, int], None] | None, total: int) -> Callable[[str], None]:
    done = [0]

    def step(stage: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(stage, done[0], total)

    return step


def _best_path(table: pd.DataFrame, column: str) -> str:
    measured = table[table[column].notna()]
    if measured.empty:
        return ""
    row = measured.loc[measured[column].idxmax()]
    return f" (largest: {row['name']} {row[column]:+.3f} [{row[f'{column}_low']:+.3f}, {row[f'{column}_high']:+.3f}])"


def _reason(cls: str, table: pd.DataFrame, nm: list, si: list) -> str:
    """Why ``cls`` is empty: how far the heads got through its rules."""
    attends = table["attn_io_low"] >= ATTENTION_MIN
    if cls in ("name mover", "negative name mover"):
        copy_col, sign = ("copying", "> 0") if cls == "name mover" else ("negative_copying", "< 0")
        copies = attends & (table[f"{copy_col}_low"] >= COPYING_MIN)
        return (
            f"{int(attends.sum())} heads attend from END to IO (low end >= {ATTENTION_MIN:g}), {int(copies.sum())} of them"
            f" {'copy IO' if cls == 'name mover' else 'write against IO'} through OV, none of those with a direct effect {sign}"
        )
    path_col, receivers, what = ("sinh_path", nm, "name mover") if cls == "S-inhibition" else ("feed_path", si, "S-inhibition head")
    pattern = {"induction": "attn_ind", "duplicate-token": "attn_dup"}.get(cls)
    by_attention = "" if pattern is None else ", ".join(table.loc[table[f"{pattern}_low"] >= ATTENTION_MIN, "name"])
    also = f"; by attention alone: {by_attention} (not shown to feed the circuit)" if by_attention else ""
    if not receivers:
        return f"no {what} to path-patch into{also}"
    n_measured = int(table[path_col].notna().sum())
    if n_measured == 0:
        screen = "END -> S2" if cls == "S-inhibition" else "S2 -> S1 or S1+1"
        return f"no earlier head attends {screen} with a mean of {SCREEN_ATTENTION:g} or more (senders screened){also}"
    if pattern is None:
        return f"{n_measured} senders path-patched, none removes >= {PATH_MIN:g} with its interval above 0{_best_path(table, path_col)}"
    fits = table[table[f"{pattern}_low"] >= ATTENTION_MIN]
    return (
        f"{len(fits)} heads have the attention pattern, {int(fits[path_col].notna().sum())} of them path-patched (before an"
        f" S-inhibition head), none removes >= {PATH_MIN:g} with its interval above 0{_best_path(fits, path_col)}{also}"
    )


def class_table(table: pd.DataFrame, masks: dict[str, pd.Series], nm: list, si: list) -> pd.DataFrame:
    """One row per class: its heads, its rule, and why it is empty (``nm``, ``si``: the name movers
    and S-inhibition heads path patching went into)."""
    rows = []
    for cls in CLASSES:
        names = list(table.loc[masks[cls], "name"])
        reason = "" if names else _reason(cls, table, nm, si)
        rows.append({"class": cls, "heads": " ".join(names), "n_heads": len(names), "rule": _RULES[cls], "reason": reason})
    return pd.DataFrame(rows, columns=CLASS_COLUMNS)


def _mean_ci(values: np.ndarray, config: IOIConfig) -> list[float]:
    low, high = bootstrap_mean_ci(values[:, None], n_resamples=config.n_resamples, seed=config.seed)
    return [float(values.mean()), float(low[0]), float(high[0])]


def _info(pairs: Any, measures: Any, config: IOIConfig, nm: list, si: list) -> dict[str, Any]:
    return {
        "n_pairs": len(pairs.task),
        "logit_diff_clean": _mean_ci(measures.ld_clean, config),
        "logit_diff_corrupt": _mean_ci(measures.ld_corrupt, config),
        "io_preferred": float((measures.ld_clean > 0).mean()),
        "thresholds": {
            "attention_min": ATTENTION_MIN,
            "copying_min": COPYING_MIN,
            "top_k": TOP_K,
            "path_min": PATH_MIN,
            "screen_attention": SCREEN_ATTENTION if config.screen_senders else None,
        },
        "receivers": {"S-inhibition": [f"{a}.{b}" for a, b in nm], "induction and duplicate-token": [f"{a}.{b}" for a, b in si]},
        "interval": "95% percentile bootstrap over pairs of the mean (path effects: of the linearised ratio of means)",
        "path_patching": "noising, joint: each sender's ABC-corrupted output into every receiver's input at once, in the clean"
        " run, other heads frozen at their clean output; effect = share of the clean - ABC gap removed",
        "copying_measured_for": "heads whose mean END -> IO attention is at least the screen (the rules need more)",
        "task": pairs.task.describe(),
    }
