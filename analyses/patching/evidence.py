"""Each census role tested by the intervention it predicts: "supported", "not supported" or
"not testable here", with the figure.

Every test predicts the DIRECTION of its figure (each figure below is oriented so that the role
predicts it above 0) and a size.  One rule judges them all (:func:`judge`, on
:func:`headlens.analyses.measure.verdicts.predicted_verdict`, thresholds in :data:`ROLE_RULES`):
supported when the figure's 95% interval lies on the predicted side of 0, from at least
:data:`~headlens.analyses.measure.verdicts.MIN_ITEMS` items, and the figure clears the role's bar; an
effect in the other direction is "not supported" however large, and the reason says so in
words ("removing it lowers the loss"); a figure on the predicted side below the bar, or an
interval that includes 0, is "not supported" with that reason.

* **induction**: zero-ablating the head raises the loss on the second copy of repeated random
  tokens more than on the first copy.  Figure: mean over sequences of
  ``(loss2_ablated - loss2) - (loss1_ablated - loss1)`` (nats), predicted above 0 (bar 0).
  Supported when that holds, the second-copy rise is a finding of its own (its 95% interval over
  sequences above 0; a fall: "ablating it lowers the loss on the second copy"), at least
  :data:`MIN_LOSS`, and at least :data:`COPY_RATIO` times the size of the first-copy change (a
  first copy that gets better under ablation counts against support, not toward it), AND the
  effect goes through the head's own induction attention: masking only its attention from each
  second-copy token to the token after the earlier occurrence raises the second-copy loss, its
  interval above 0, by at least :data:`MIN_LOSS` (:mod:`~headlens.analyses.patching.induction_knockout`;
  an upstream head, e.g. the previous-token head an induction head's key reads, passes the
  ablation test but does not attend there).  When the score edit cannot run on the model, the
  knockout check is not run and the role is not testable, the reason given: the ablation alone
  does not support it (it can refute it: an ablation figure that fails its own checks is "not
  supported" all the same).
* **previous_token**: path patching it into the key input of the heads the table calls induction
  (in later layers), all of them at once (``PathConfig(joint=True)``), on the built-in induction
  task (K-composition).  Figure: the normalised joint path effect (the share of the induction
  logit difference it restores through their keys), predicted above 0; bar: its interval's low
  end at least :data:`MIN_EFFECT`; no induction head after it: not testable.  The edge is joint
  because the role's claim is about the induction heads together ("feeds the induction heads'
  keys"): heads that share the job each restore only part of the behaviour (on the demo model the
  previous-token head 0.0 restores at most 0.17 [0.08, 0.26] through any single induction head's
  key, 1.1's, and 0.95 [0.84, 1.04] through the keys of all four, 1.0-1.3, together; 32 pairs).
* **duplicate_token**: attention knockout on repeated random tokens
  (:mod:`headlens.analyses.patching.duplicate_knockout`): masking the head's attention from each
  repeated token to its earlier occurrence must move the model's next-token predictions
  (KL, nats) more than masking the token that followed the earlier occurrence (what an
  induction head reads).  Figure: ``KL(match) - KL(neighbour)``, predicted above 0; bar
  :data:`MIN_LOSS` nats.  Encoders and new output heads: not testable.
* **referent**: denoising activation patching of the head's output on the referent pairs (the
  partner sentence, which differs in the pronoun only).  Figure: the normalised effect, predicted
  above 0 (patching the clean sentence's output moves the preference toward the clean
  antecedent); bar :data:`MIN_EFFECT`.  Encoders, models whose output head is new, or a model
  that does not prefer the pronoun's antecedent: not testable, the reason given.
* **sink**: ``headlens sinks``' sink removal (:mod:`headlens.analyses.patching.sink_removal`):
  key 0 masked out of the head's queries, attention renormalised; figure: the mean per-window
  change in next-token loss (nats) on evaluation-text windows with its 95% interval, predicted
  above 0 (the head's attention to the first token is a no-op the model relies on, so taking it
  away costs loss); bar :data:`MIN_LOSS` nats, the same bar an induction head's second-copy rise
  must clear (a head whose output reaches the logits only through the final norm's scale still
  moves the loss by a few thousandths with an interval that excludes 0: the planted sink head
  0.1 gives +0.002 nats).  An encoder has no next-token loss: not testable, the reason given;
  fewer than ``MIN_ITEMS`` windows in the evaluation text: not testable.  When sinks are a
  population, a seeded random sample of the sink-only heads (:mod:`~headlens.analyses.patching.evidence_sink`).
* any other role: not testable here, said so.

Every test needs at least :data:`~headlens.analyses.measure.verdicts.MIN_ITEMS` items (``n``) to state a
verdict; ``smoke=True`` (``headlens report --quick``) runs the tests on fewer and says
:data:`NO_FINDING` instead of a verdict, keeping the figures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from headlens.analyses.ablation.runs import ablated_logits
from headlens.analyses.measure.metrics import token_nll
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching.activation import PatchConfig, run_patching
from headlens.analyses.patching.builtin import induction_task, referent_task
from headlens.analyses.patching.duplicate_knockout import duplicate_knockout_effects, repeated_batch
from headlens.analyses.patching.evidence_config import EvidenceSettings
from headlens.analyses.patching.evidence_plan import evidence_plan, forward_ticker, select_tests
from headlens.analyses.patching.evidence_rules import (
    COPY_RATIO,
    EVIDENCE_COLUMNS,
    MIN_EFFECT,
    MIN_LOSS,
    NO_FINDING,
    NOT_SUPPORTED,
    NOT_TESTABLE,
    NOT_TESTED,
    ROLE_RULES,
    SINK_SAMPLE,
    SUPPORTED,
    UNITS,
    RoleRule,
    evidence_rule,
    induction_checks,
    judge,
    shared_keys,
    unreadable,
)
from headlens.analyses.patching.evidence_sink import sink_evidence, sink_text
from headlens.analyses.patching.induction_knockout import induction_knockout
from headlens.analyses.patching.path import PathConfig, run_path_patching
from headlens.probes.counts import check_count
from headlens.probes.errors import HeadlensError, InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.progress import Progress

log = logging.getLogger(__name__)

__all__ = [
    "role_evidence",
    "sink_text",
    "evidence_rule",
    "judge",
    "RoleRule",
    "ROLE_RULES",
    "EvidenceConfig",
    "EVIDENCE_COLUMNS",
    "MIN_EFFECT",
    "MIN_LOSS",
    "COPY_RATIO",
    "SUPPORTED",
    "NOT_SUPPORTED",
    "NOT_TESTABLE",
    "NO_FINDING",
    "NOT_TESTED",
    "SINK_SAMPLE",
    "UNITS",
]


#: Bytes per position and vocabulary entry of one evidence item: the float32 logits of a forward over
#: all items and the float64 log-softmax of the loss.
EVIDENCE_BYTES = 4 + 8


@dataclass(frozen=True, kw_only=True)
class EvidenceConfig(EvidenceSettings):
    """How :func:`role_evidence` runs: :class:`~headlens.analyses.patching.evidence_config.EvidenceSettings`'s
    fields (``n``, ``T``, ``seed``, ``smoke``) and the run."""

    def run(
        self,
        model: LoadedModel,
        roles: pd.DataFrame,
        *,
        prepend_bos: bool = True,
        population: bool = False,
        progress: Progress | None = None,
    ) -> pd.DataFrame:
        return role_evidence(
            model,
            roles,
            n=self.n,
            T=self.T,
            seed=self.seed,
            prepend_bos=prepend_bos,
            smoke=self.smoke,
            only=self.roles,
            sink_sample=self.sink_sample,
            population=population,
            progress=progress,
        )

    def check_fits(self, model: LoadedModel) -> None:
        """Refuse, before any work, a ``T`` whose repeated sequences (the model's prefix, then ``T``
        random tokens twice) are longer than the model's context: one line, ``(T=128)``."""
        prefix, _ = model.frame(True)
        need = len(prefix) + 2 * self.T
        if need > model.n_ctx:
            most = (model.n_ctx - len(prefix)) // 2
            raise InputError(
                f"the evidence's repeated random tokens need {need} positions (T={self.T}: {len(prefix)} prefix token(s), then "
                f"{self.T} random tokens twice); the model's context is {model.n_ctx}: at most {most}",
                parameter="T",
            )
        vocab = int(getattr(model.bridge.cfg, "d_vocab", 0) or len(model.tokenizer))
        per_item = need * vocab * EVIDENCE_BYTES  # one forward's logits over every item at once, and their log-softmax
        check_count("n", self.n, minimum=2, bytes_each=per_item, subject=f"evidence items (n={self.n})", device=model.device)


def _knockout_of(model: LoadedModel, *, n: int, T: int, seed: int) -> Callable[[tuple[int, int]], tuple[tuple | None, str | None]]:
    """Per head ``(knockout, None)`` (:func:`induction_knockout`), or ``(None, why)`` when it cannot run."""
    try:
        effect = induction_knockout(model, n=n, T=T, seed=seed)
    except HeadlensError as exc:
        log.info("induction evidence without the knockout check: %s", exc)
        why = str(exc)
        return lambda head: (None, why)

    def one(head: tuple[int, int]) -> tuple[tuple | None, str | None]:
        try:
            return effect(head), None
        except HeadlensError as exc:
            log.info("induction evidence for %d.%d without the knockout check: %s", *head, exc)
            return None, str(exc)

    return one


def _induction(
    model: LoadedModel, heads: list[tuple[int, int]], *, n: int, T: int, seed: int, tick: Callable[[str, int], None]
) -> dict[tuple[int, int], tuple]:
    why = unreadable(model, "loss on the second copy")
    if why is not None:
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, "zero ablation, repeated random tokens", why) for h in heads}
    tokens, p = repeated_batch(model, n=n, T=T, seed=seed)
    first = slice(p, p + T - 1)  # predictions of first-copy tokens 2..T
    second = slice(p + T - 1, p + 2 * T - 1)  # predictions of the second copy
    with torch.inference_mode():
        base = token_nll(model.bridge(tokens.to(model.device), return_type="logits")[:, :-1], tokens[:, 1:])
    knockout_of = _knockout_of(model, n=n, T=T, seed=seed)
    tick("induction", 0)
    out = {}
    for head in heads:
        abl = token_nll(ablated_logits(model, tokens, [head])[:, :-1], tokens[:, 1:])
        d1 = (abl[:, first] - base[:, first]).mean(1).numpy()
        d2 = (abl[:, second] - base[:, second]).mean(1).numpy()
        diff = d2 - d1
        low, high = bootstrap_mean_ci(diff[:, None])
        low2, high2 = bootstrap_mean_ci(d2[:, None])  # the second-copy rise must be a finding of its own
        m1, m2 = float(d1.mean()), float(d2.mean())
        knock, no_knock = knockout_of(head)
        detail = f"ablation raises the loss by {m2:+.3f} nats on the second copy and {m1:+.3f} on the first"
        verdict, why = judge("induction", float(diff.mean()), float(low[0]), float(high[0]), n_items=n, min_items=min(n, MIN_ITEMS))
        if verdict == SUPPORTED:  # the ablation's own checks, then the knockout when it could run
            why = induction_checks(m1, m2, knock, m2_low=float(low2[0]), m2_high=float(high2[0]))
            verdict = NOT_SUPPORTED if why else SUPPORTED
        if knock is not None and not why:
            k, k_low, k_high = knock
            masking = "masking its attention to the token after the earlier occurrence"
            detail += f"; {masking} raises the second-copy loss by {k:+.3f} [{k_low:+.3f}, {k_high:+.3f}]"
        if why:
            detail += f": {why}"
        if no_knock is not None:
            detail += f" (knockout check not run: {no_knock})"
            if verdict == SUPPORTED:  # the ablation alone does not support the role; it can refute it
                verdict = NOT_TESTABLE
        out[head] = (verdict, float(diff.mean()), float(low[0]), float(high[0]), "zero ablation, repeated random tokens", detail)
        tick("induction", -1)
    return out


def _previous_token(
    model: LoadedModel, heads: list[tuple[int, int]], induction: list[tuple[int, int]], *, n: int, seed: int
) -> dict[tuple[int, int], tuple]:
    out: dict[tuple[int, int], tuple] = {}
    test = "path patching into induction heads' key input (K-composition), induction task"
    why = unreadable(model, "logit difference on the induction task")
    if why is not None:
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, why) for h in heads}
    testable = [h for h in heads if any(r[0] > h[0] for r in induction)]
    for h in heads:
        if h not in testable:
            out[h] = (NOT_TESTABLE, np.nan, np.nan, np.nan, test, "no head after it has the induction role, so it feeds no induction head")
    if not testable:
        return out
    receivers = tuple(r for r in induction if r[0] > min(h[0] for h in testable))
    shared = shared_keys(model.n_heads, model.n_kv_heads, list(receivers))
    test += f"; {shared}" if shared else ""
    try:
        task = induction_task(model, n=n, seed=seed)
        config = PathConfig(receivers=receivers, receiver_input="k", joint=True, seed=seed)
        result = run_path_patching(model, task, config, senders=testable)  # the same edges as every sender's, far fewer passes
    except HeadlensError as exc:
        return {
            **out,
            **{h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, f"the path patch cannot run on this model ({exc})") for h in testable},
        }
    if not result.gap.defined:
        return {**out, **{h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, result.gap.reason) for h in testable}}
    t = result.table
    for h in testable:
        row = t[(t["sender_layer"] == h[0]) & (t["sender_head"] == h[1])].iloc[0]
        verdict, why = judge(
            "previous_token",
            float(row["effect"]),
            float(row["effect_low"]),
            float(row["effect_high"]),
            n_items=n,
            min_items=min(n, MIN_ITEMS),
        )
        through = f"the keys of {row['receiver']} together" if "+" in str(row["receiver"]) else f"the key of {row['receiver']}"
        reach = shared_keys(model.n_heads, model.n_kv_heads, [r for r in receivers if r[0] > h[0]])
        detail = f"through {through}{f' ({reach})' if reach else ''} it restores {row['effect']:.2f} of the induction behaviour"
        if why:
            detail += f"; {why}"
        out[h] = (verdict, float(row["effect"]), float(row["effect_low"]), float(row["effect_high"]), test, detail)
    return out


def _referent(model: LoadedModel, heads: list[tuple[int, int]], *, n: int, seed: int) -> dict[tuple[int, int], tuple]:
    test = "denoising patch of the head's output from the pair's other sentence, referent pairs"
    why = unreadable(model, "preference between the pronoun's candidates")
    result, k = None, 0
    if why is None:
        try:
            task = referent_task(model, n=n, seed=seed)
            k = len(task.clean)
            if k < min(n, MIN_ITEMS):
                why = f"only {k} referent pairs fit this tokenizer; a verdict needs {MIN_ITEMS}"
            else:
                result = run_patching(model, task, PatchConfig(heads=tuple(heads), directions=("denoising",)))
        except HeadlensError as exc:
            why = f"the referent pairs cannot be built for this model ({exc})"
    if why is None and result is not None and not result.gap.defined:
        why = result.gap.reason
    if why is not None or result is None:  # result is set whenever why is None
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, why) for h in heads}
    out = {}
    for _, row in result.table.iterrows():
        eff, low, high = float(row["denoising"]), float(row["denoising_low"]), float(row["denoising_high"])
        verdict, why = judge("referent", eff, low, high, n_items=k, min_items=min(n, MIN_ITEMS))
        detail = f"patching it moves the preference by {eff:+.2f} of the clean-corrupted gap over {k} pairs" + (f"; {why}" if why else "")
        out[(int(row["layer"]), int(row["head"]))] = (verdict, eff, low, high, test, detail, k)
    return out


def _duplicate(model: LoadedModel, heads: list[tuple[int, int]], *, n: int, T: int, seed: int) -> dict[tuple[int, int], tuple]:
    test = "attention knockout on repeated random tokens: the earlier occurrence masked vs the token after it"
    why = unreadable(model, "predictions")
    if why is not None:
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, why) for h in heads}
    try:
        found = duplicate_knockout_effects(model, heads, n=n, T=T, seed=seed)
    except HeadlensError as exc:  # e.g. a family whose attention scores headlens cannot edit
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, f"the knockout cannot run on this model ({exc})") for h in heads}
    out = {}
    for h, (fig, low, high, kl_match, kl_next, k) in found.items():
        verdict, why = judge("duplicate_token", fig, low, high, n_items=k, min_items=min(n, MIN_ITEMS))
        detail = (
            f"masking its attention from each repeat to the earlier occurrence moves the predictions by {kl_match:.4f} nats (KL),"
            f" masking the token after it by {kl_next:.4f}, over {k} sequences of {T} tokens repeated"
        ) + (f"; {why}" if why else "")
        out[h] = (verdict, fig, low, high, test, detail, k)
    return out


def role_evidence(
    model: LoadedModel,
    roles: pd.DataFrame,
    *,
    n: int = 32,
    T: int = 20,
    seed: int = 0,
    prepend_bos: bool = True,
    smoke: bool = False,
    only: tuple[str, ...] | None = None,
    sink_sample: int = SINK_SAMPLE,
    population: bool = False,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """One row per (head, role) of ``roles`` (the census's long role table: layer, head, name, role)
    with the verdict of the intervention the role predicts (see the module doc): ``n`` pairs,
    sequences or windows per test (at least ``MIN_ITEMS`` unless ``smoke``), ``T`` random tokens
    per copy, ``prepend_bos`` for the sink windows; ``smoke``: :data:`NO_FINDING` in place of
    every verdict (the figures are kept).  ``only``: the roles to test (None: all);
    ``population``: sinks are a population, so the sink role is tested on a seeded random sample
    of ``sink_sample`` sink-only heads (:mod:`headlens.analyses.patching.evidence_sink`); a row not
    tested says :data:`NOT_TESTED` and why.  ``progress("evidence", done, total)`` counts forwards
    (:mod:`headlens.analyses.patching.evidence_plan`)."""
    EvidenceConfig(n=n, T=T, seed=seed, smoke=smoke, roles=only, sink_sample=sink_sample).check_fits(model)  # before any work
    chosen = select_tests(roles, only=only, sink_sample=sink_sample, population=population, seed=seed)
    by_role = chosen.tested
    tick = forward_ticker(progress, evidence_plan(chosen, n=n, T=T))
    found: dict[str, dict[tuple[int, int], tuple]] = {}
    if "induction" in by_role:
        found["induction"] = _induction(model, by_role["induction"], n=n, T=T, seed=seed, tick=tick)
    if "previous_token" in by_role:
        induction = [(a, b) for a, b, role in chosen.pairs if role == "induction"]  # the census's, chosen or not
        found["previous_token"] = _previous_token(model, by_role["previous_token"], induction, n=n, seed=seed)
        tick("previous_token", len(by_role["previous_token"]))
    if "duplicate_token" in by_role:
        found["duplicate_token"] = _duplicate(model, by_role["duplicate_token"], n=n, T=T, seed=seed)
        tick("duplicate_token", len(by_role["duplicate_token"]))
    if "referent" in by_role:
        found["referent"] = _referent(model, by_role["referent"], n=n, seed=seed)
        tick("referent", len(by_role["referent"]))
    if "sink" in by_role:
        found["sink"] = sink_evidence(
            model, by_role["sink"], n=n, prepend_bos=prepend_bos, seed=seed, step=lambda i: tick("sink", 0 if i == 0 else -1)
        )
    rows: list[list[Any]] = []
    for layer, head, role in chosen.pairs:
        got = found.get(role, {}).get((layer, head))
        skipped = chosen.skipped.get(((layer, head), role))
        if skipped is not None:
            got = (NOT_TESTED, np.nan, np.nan, np.nan, "-", skipped, 0)
        elif got is None:
            got = (NOT_TESTABLE, np.nan, np.nan, np.nan, "-", f"no intervention is defined for the {role} role")
        verdict, fig, low, high, test, detail = got[:6]
        items = got[6] if len(got) > 6 else (n if np.isfinite(fig) else 0)
        if smoke and verdict not in (NOT_TESTABLE, NOT_TESTED):
            verdict, detail = NO_FINDING, f"smoke test ({n} items): the figure is shown, no verdict is drawn from it"
        rows.append([layer, head, f"{layer}.{head}", role, verdict, fig, low, high, UNITS.get(role, "-"), items, test, detail])
    return pd.DataFrame(rows, columns=EVIDENCE_COLUMNS)
