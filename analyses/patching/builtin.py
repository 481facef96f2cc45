"""Built-in pair tasks: repeated-sequence induction, an IOI-style name task, IOI, the referent pairs.

* **induction** (``induction_task``): ``T`` distinct random tokens ``r`` then their first ``m``
  again (``m = T // 2``); the model should predict ``r[m]`` (induction: the token that followed
  ``r[m-1]`` the first time).  The corrupted sequence replaces ``r[m-1]`` in the FIRST copy by
  a token ``x`` absent from ``r``, so the last token has no earlier occurrence and nothing to
  copy; every other position is the same.  Correct ``r[m]``, incorrect a further absent token.
  A previous-token head's output at the position of ``r[m]`` is exactly what differs in the
  keys an induction head reads (K-composition).
* **names** (``names_task``): an IOI-style sentence, "When Mary and John went to the store,
  John gave a drink to" (correct `` Mary``, the indirect object; incorrect `` John``, the
  subject), corrupted by putting a third name in the subject slot ("..., Tom gave a drink to"),
  which leaves no repeated name to exclude (Wang et al. 2022's ABC distribution).  Names are
  those of :mod:`headlens.analyses.stimuli.referent_frames` that are one token for the model.
* **ioi** (:func:`headlens.analyses.patching.ioi_task.ioi_task`): Wang et al. 2022's IOI task,
  their 15 templates in both name orders (ABBA, BABA), names, places and objects that are one
  token for the model, the ABC corruption (all three name slots replaced by unrelated names).
  ``names`` stays the short version: 5 templates of this project, one corrupted slot.
* **referent** (``referent_task``): each minimal pair of the referent stimuli
  (:mod:`headlens.analyses.stimuli.referent`), cut right after the pronoun: clean is one
  sentence, corrupt its partner (only the pronoun differs), correct the clean pronoun's
  antecedent, incorrect its distractor.  Both orders of every pair are used.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from headlens.analyses.patching.ioi_task import ioi_task
from headlens.analyses.patching.pairs import PairItem, PairTask, check_pairs, padded_pairs, tokenize_pairs
from headlens.analyses.stimuli.random_tokens import random_repeated_tokens
from headlens.analyses.stimuli.referent import pair_units, referent_items
from headlens.analyses.stimuli.referent_frames import FEMALE_NAMES, MALE_NAMES
from headlens.analyses.stimuli.referent_tokens import fit_referent_items
from headlens.probes.errors import InputError

__all__ = ["BUILTIN_TASKS", "builtin_task", "induction_task", "names_task", "referent_task", "NAME_TEMPLATES"]

#: IOI-style templates: ``{A}`` and ``{B}`` the two names, ``{S}`` the subject of the second clause.
NAME_TEMPLATES: tuple[str, ...] = (
    "When{A} and{B} went to the store,{S} gave a drink to",
    "After{A} and{B} went to the park,{S} handed a ball to",
    "While{A} and{B} were working at the office,{S} passed the report to",
    "Then{A} and{B} had lunch at the cafe, and{S} gave a book to",
    "Once{A} and{B} arrived at the house,{S} threw the keys to",
)
#: Tokens per names or referent pair the count bound reckons with (their sentences are shorter).
NAMES_WIDTH = 32


def induction_task(model: Any, *, n: int = 64, T: int = 20, seed: int = 0, prepend_bos: bool = True) -> PairTask:
    """``n`` induction pairs of ``T`` random tokens (see the module doc)."""
    if T < 4:
        raise InputError(f"the induction task needs at least 4 tokens per sequence, got {T}")
    check_pairs(n, width=T + T // 2 + 2)
    vocab = int(getattr(model.bridge.cfg, "d_vocab", 0) or len(model.tokenizer))
    special = {int(i) for i in (getattr(model.tokenizer, "all_special_ids", None) or [])}
    draw = random_repeated_tokens(n, T + 2, seed, vocab, exclude=sorted(special), distinct=True)[:, : T + 2]
    m = T // 2
    prefix, suffix = model.frame(prepend_bos)
    clean_rows, corrupt_rows = [], []
    for row in draw.tolist():
        r, x = row[:T], row[T]
        clean = r + r[:m]
        corrupt = list(clean)
        corrupt[m - 1] = x
        clean_rows.append(prefix + clean + suffix)
        corrupt_rows.append(prefix + corrupt + suffix)
    clean_t, corrupt_t = torch.tensor(clean_rows), torch.tensor(corrupt_rows)
    return PairTask(
        clean=clean_t,
        corrupt=corrupt_t,
        lengths=torch.full((n,), clean_t.shape[1], dtype=torch.long),
        correct=draw[:, m].clone(),
        incorrect=draw[:, T + 1].clone(),
        prepend_bos=prepend_bos,
        source={"kind": "builtin", "task": "induction", "n": n, "T": T, "answer_index": m, "seed": seed},
    )


def _single(tokenizer: Any, words: tuple[str, ...]) -> list[str]:
    return [w for w in words if len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1]


def names_task(model: Any, *, n: int = 64, seed: int = 0, prepend_bos: bool = True) -> PairTask:
    """``n`` IOI-style pairs (see the module doc); names that are not one token are skipped."""
    check_pairs(n, width=NAMES_WIDTH)
    names = _single(model.tokenizer, MALE_NAMES + FEMALE_NAMES)
    if len(names) < 3:
        raise InputError(f"the names task needs at least 3 single-token names for this tokenizer, found {len(names)}")
    rng = random.Random(seed)
    items = []
    for i in range(n):
        a, b, c = rng.sample(names, 3)
        template = NAME_TEMPLATES[i % len(NAME_TEMPLATES)]
        subject, io = (b, a) if rng.random() < 0.5 else (a, b)
        items.append(
            PairItem(template.format(A=a, B=b, S=subject), template.format(A=a, B=b, S=c), io, subject, where=f"names pair {i + 1}")
        )
    return tokenize_pairs(
        model,
        items,
        prepend_bos=prepend_bos,
        source={"kind": "builtin", "task": "names", "n": n, "seed": seed, "templates": len(NAME_TEMPLATES)},
    )


def referent_task(model: Any, *, n: int = 64, seed: int = 0, prepend_bos: bool = True) -> PairTask:
    """Up to ``n`` referent pairs, both orders of each minimal pair (see the module doc)."""
    check_pairs(n, width=NAMES_WIDTH)
    prefix, suffix = model.frame(prepend_bos)
    fitted = fit_referent_items(referent_items(None, seed=seed), model.tokenizer, wrap=(prefix, []), n=n)
    clean_rows, corrupt_rows, correct, incorrect = [], [], [], []
    for unit in pair_units(fitted.items):
        if len(unit) != 2:
            continue
        for a, b in ((unit[0], unit[1]), (unit[1], unit[0])):
            la, lb = fitted.located[a], fitted.located[b]
            if la.pronoun != lb.pronoun or len(clean_rows) >= n:
                continue
            clean_rows.append(list(la.token_ids[: la.pronoun + 1]) + suffix)
            corrupt_rows.append(list(lb.token_ids[: lb.pronoun + 1]) + suffix)
            correct.append(la.token_ids[la.antecedent])
            incorrect.append(la.token_ids[la.distractor])
    if not clean_rows:
        raise InputError("no referent pair fits this tokenizer")
    source = {"kind": "builtin", "task": "referent", "n": len(clean_rows), "seed": seed, "dropped_items": fitted.dropped}
    return padded_pairs(model.tokenizer, clean_rows, corrupt_rows, correct, incorrect, prepend_bos=prepend_bos, source=source)


#: Built-in task name -> builder ``(model, *, n, seed, prepend_bos) -> PairTask``.
BUILTIN_TASKS = {"induction": induction_task, "names": names_task, "ioi": ioi_task, "referent": referent_task}


def builtin_task(model: Any, name: str, *, n: int = 64, seed: int = 0, prepend_bos: bool = True) -> PairTask:
    """The built-in task ``name`` with ``n`` pairs (``n_pairs``: at least 2, within the bounds of
    :func:`headlens.analyses.patching.pairs.check_pairs`, checked before any pair is built).

    Rows are right-padded with the tokenizer's pad id (its ``pad_token_id``; 0 when it has none,
    as GPT-2's has not): the padding follows each row's last real token, where every effect is
    read, and is masked out of attention."""
    if name not in BUILTIN_TASKS:
        raise InputError(f"unknown built-in task {name!r}: choose from {', '.join(BUILTIN_TASKS)}", task=name)
    return BUILTIN_TASKS[name](model, n=n, seed=seed, prepend_bos=prepend_bos)
