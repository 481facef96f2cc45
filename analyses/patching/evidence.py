"""Each census role tested by the intervention it predicts: "supported", "not supported" or
"not testable here", with the figure.

* **induction**: zero-ablating the head raises the loss on the second copy of repeated random
  tokens more than on the first copy.  Figure: mean over sequences of
  ``(loss2_ablated - loss2) - (loss1_ablated - loss1)`` (nats).  Supported when its 95% interval
  is above 0, the second-copy rise is at least :data:`MIN_LOSS` and at least
  :data:`COPY_RATIO` times the first-copy rise, AND the head itself writes the copied token:
  its direct logit attribution on the built-in induction task is at least :data:`MIN_EFFECT` of
  the model's logit difference (an upstream head, e.g. the previous-token head an induction
  head reads, passes the ablation test but writes nothing to the logits).
* **previous_token**: path patching it into the key input of the heads the table calls induction
  (in later layers) on the built-in induction task (K-composition).  Figure: the largest
  normalised path effect.  Supported when its interval's low end is at least
  :data:`MIN_EFFECT`; no induction head after it: not testable.
* **duplicate_token** and **referent**: denoising activation patching of the head's output on the
  referent pairs (the partner sentence, which differs in the pronoun only).  Figure: the
  normalised effect.  Supported when ``|effect| >= MIN_EFFECT`` and its interval excludes 0.
  Encoders, models whose output head is new, or a model that does not prefer the pronoun's
  antecedent: not testable, the reason given.
* **sink** and any other role: not testable here (sink removal is ``headlens sinks``; it is not
  rerun by this function), said so.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
import torch

from headlens.analyses.ablation.runs import ablated_logits
from headlens.analyses.patching.activation import PatchConfig, patch_heads
from headlens.analyses.patching.builtin import induction_task, referent_task
from headlens.analyses.patching.dla import direct_logit_attribution
from headlens.analyses.patching.path import PathConfig, path_patch
from headlens.analyses.stats import bootstrap_mean_ci
from headlens.analyses.stimuli.random_tokens import random_repeated_tokens
from headlens.probes.errors import HeadlensError
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["role_evidence", "EVIDENCE_COLUMNS", "MIN_EFFECT", "MIN_LOSS", "COPY_RATIO"]

EVIDENCE_COLUMNS = ["layer", "head", "name", "role", "evidence", "figure", "figure_low", "figure_high", "test", "detail"]
#: Normalised patching effect a role needs (10% of the clean-corrupted gap).
MIN_EFFECT = 0.1
#: Second-copy loss rise (nats) an induction head's ablation needs ...
MIN_LOSS = 0.01
#: ... and how many times the first-copy rise it must be.
COPY_RATIO = 2.0
SUPPORTED, NOT_SUPPORTED, NOT_TESTABLE = "supported", "not supported", "not testable here"


def _nll(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits[:, :-1].double(), -1)
    return -logp.gather(-1, tokens[:, 1:, None].to(logits.device)).squeeze(-1).cpu()  # [n, pos-1]: predicting token t+1


def _induction(model: LoadedModel, heads: list[tuple[int, int]], *, n: int, T: int, seed: int) -> dict[tuple[int, int], tuple]:
    special = sorted({int(i) for i in (getattr(model.tokenizer, "all_special_ids", None) or [])})
    body = random_repeated_tokens(n, T, seed, int(model.bridge.cfg.d_vocab), exclude=special, distinct=True)
    prefix, _ = model.frame(True) if not model.is_encoder else ([], [])
    tokens = torch.cat([torch.tensor([prefix] * n, dtype=torch.long).view(n, len(prefix)), body], 1)
    p = len(prefix)
    first = slice(p, p + T - 1)  # predictions of first-copy tokens 2..T
    second = slice(p + T - 1, p + 2 * T - 1)  # predictions of the second copy
    with torch.inference_mode():
        base = _nll(model.bridge(tokens.to(model.device), return_type="logits"), tokens)
    direct: dict[tuple[int, int], float] = {}
    try:
        dla = direct_logit_attribution(model, induction_task(model, n=n, T=T, seed=seed))
        share = dla.table["dla"] / float(np.mean(dla.logit_diff))
        direct = {(int(r["layer"]), int(r["head"])): float(share[i]) for i, r in dla.table[dla.table["kind"] == "head"].iterrows()}
    except HeadlensError as exc:
        log.info("induction evidence without the direct-effect check: %s", exc)
    out = {}
    for head in heads:
        abl = _nll(ablated_logits(model, tokens, [head]), tokens)
        d1 = (abl[:, first] - base[:, first]).mean(1).numpy()
        d2 = (abl[:, second] - base[:, second]).mean(1).numpy()
        diff = d2 - d1
        low, high = bootstrap_mean_ci(diff[:, None])
        m1, m2 = float(d1.mean()), float(d2.mean())
        own = direct.get(head, np.nan)
        ok = float(low[0]) > 0 and m2 >= MIN_LOSS and m2 >= COPY_RATIO * max(m1, 0.0) and (np.isnan(own) or own >= MIN_EFFECT)
        detail = f"ablation raises the loss by {m2:+.3f} nats on the second copy and {m1:+.3f} on the first"
        if not np.isnan(own):
            detail += f"; its direct logit attribution is {own:.0%} of the induction logit difference"
        out[head] = (SUPPORTED if ok else NOT_SUPPORTED, float(diff.mean()), float(low[0]), float(high[0]), "zero ablation, repeated random tokens", detail)
    return out


def _previous_token(model: LoadedModel, heads: list[tuple[int, int]], induction: list[tuple[int, int]], *, n: int, seed: int) -> dict[tuple[int, int], tuple]:
    out: dict[tuple[int, int], tuple] = {}
    test = "path patching into induction heads' key input (K-composition), induction task"
    testable = [h for h in heads if any(r[0] > h[0] for r in induction)]
    for h in heads:
        if h not in testable:
            out[h] = (NOT_TESTABLE, np.nan, np.nan, np.nan, test, "no head after it has the induction role, so it feeds no induction head")
    if not testable:
        return out
    receivers = tuple(r for r in induction if r[0] > min(h[0] for h in testable))
    task = induction_task(model, n=n, seed=seed)
    result = path_patch(model, task, PathConfig(receivers=receivers, receiver_input="k"))
    if not result.gap.defined:
        return {**out, **{h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, result.gap.reason) for h in testable}}
    t = result.table
    for h in testable:
        rows = t[(t["sender_layer"] == h[0]) & (t["sender_head"] == h[1])]
        best = rows.loc[rows["effect"].abs().idxmax()]
        ok = float(best["effect_low"]) >= MIN_EFFECT
        detail = f"strongest key path: {best['sender']} -> {best['receiver']} restores {best['effect']:.2f} of the induction behaviour"
        if not ok:
            detail += "; it feeds no induction head through the key"
        out[h] = (SUPPORTED if ok else NOT_SUPPORTED, float(best["effect"]), float(best["effect_low"]), float(best["effect_high"]), test, detail)
    return out


def _referent(model: LoadedModel, heads: list[tuple[int, int]], *, n: int, seed: int) -> dict[tuple[int, int], tuple]:
    test = "denoising patch of the head's output from the pair's other sentence, referent pairs"
    why = None
    if model.is_encoder:
        why = "an encoder predicts no continuation, so no preference between the pronoun's candidates can be read"
    elif model.head_is_new:
        why = "the model's output head is newly initialised, so its preference means nothing"
    result = None
    if why is None:
        try:
            result = patch_heads(model, referent_task(model, n=n, seed=seed), PatchConfig(heads=tuple(heads), directions=("denoising",)))
        except HeadlensError as exc:
            why = f"the referent pairs cannot be built for this model ({exc})"
    if why is None and not result.gap.defined:
        why = result.gap.reason
    if why is not None:
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, why) for h in heads}
    out = {}
    for _, row in result.table.iterrows():
        eff, low, high = float(row["denoising"]), float(row["denoising_low"]), float(row["denoising_high"])
        ok = abs(eff) >= MIN_EFFECT and (low > 0 or high < 0)
        out[(int(row["layer"]), int(row["head"]))] = (SUPPORTED if ok else NOT_SUPPORTED, eff, low, high, test, f"patching it moves the preference by {eff:+.2f} of the clean-corrupted gap")
    return out


def role_evidence(model: LoadedModel, roles: pd.DataFrame, *, n: int = 32, T: int = 20, seed: int = 0) -> pd.DataFrame:
    """One row per (head, role) of ``roles`` (the census's long role table: layer, head, name, role)
    with the verdict of the intervention the role predicts (see the module doc)."""
    pairs = [(int(r.layer), int(r.head), str(r.role)) for r in roles.itertuples()]
    by_role: dict[str, list[tuple[int, int]]] = {}
    for layer, head, role in pairs:
        by_role.setdefault(role, []).append((layer, head))
    found: dict[str, dict[tuple[int, int], tuple]] = {}
    if "induction" in by_role:
        found["induction"] = _induction(model, by_role["induction"], n=n, T=T, seed=seed)
    if "previous_token" in by_role:
        found["previous_token"] = _previous_token(model, by_role["previous_token"], by_role.get("induction", []), n=n, seed=seed)
    for role in ("duplicate_token", "referent"):
        if role in by_role:
            found[role] = _referent(model, by_role[role], n=n, seed=seed)
    rows: list[list[Any]] = []
    for layer, head, role in pairs:
        got = found.get(role, {}).get((layer, head))
        if got is None:
            reason = "sink removal is measured by headlens sinks, not rerun here" if role == "sink" else f"no intervention is defined for the {role} role"
            got = (NOT_TESTABLE, np.nan, np.nan, np.nan, "-", reason)
        rows.append([layer, head, f"{layer}.{head}", role, *got])
    return pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)
