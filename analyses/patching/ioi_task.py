"""The built-in ``ioi`` task: indirect-object identification after Wang et al. 2022.

Each pair fills one of Wang et al.'s 15 templates (:mod:`headlens.analyses.stimuli.ioi`) in the
ABBA or BABA order (alternating, so the two are balanced) with two names, a place and an object,
all drawn (seeded) from the words that are ONE token, with their leading space, for the model's
tokenizer.  Clean: "Then, John and Mary went to the store. John gave a drink to"; correct the
indirect object `` Mary`` (IO), incorrect the subject `` John`` (S); the metric is
``logit(IO) - logit(S)`` at the end.  Corrupted: the **ABC** distribution, the same template,
place and object with all three name slots replaced by three further names, distinct from each
other and from IO and S ("Then, Tom and Anna went to the store. Paul gave a drink to"): no name
repeats, so nothing tells IO from S.  Every slot is one token, so clean and corrupted tokenize to
the same positions; :class:`IOIPairs` keeps them (IO, S1, S2 and END per pair, checked against
the tokens) for the class analysis (:mod:`headlens.analyses.patching.ioi`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from headlens.analyses.patching.pairs import PairTask, check_pairs, padded_pairs
from headlens.analyses.stimuli.ioi import IOI_NAMES, IOI_OBJECTS, IOI_PLACES, IOI_TEMPLATES, ORDERS
from headlens.probes.errors import InputError

__all__ = ["IOIPairs", "ioi_pairs", "ioi_task", "single_token_words", "MIN_NAMES", "IOI_WIDTH", "CORRUPTION"]

#: Distinct names a pair needs: IO and S, and three unrelated ones for the ABC corruption.
MIN_NAMES = 5
#: Tokens per pair the count bound reckons with (the longest template is about 22 tokens).
IOI_WIDTH = 32
#: The corruption, as the manifest records it.
CORRUPTION = "ABC: the same template, place and object; N1, N2 and S2 replaced by three names distinct from each other and from IO and S"
_SLOT = re.compile(r"\{(N1|N2|S|PLACE|OBJECT)\}")


@dataclass
class IOIPairs:
    """The pairs and where the names sit (token positions in the framed rows, the same in the
    clean and the corrupted row): ``io`` and ``s1`` (the first two names), ``s2`` (the
    repeated subject), ``end`` (the last token, where the answer is predicted)."""

    task: PairTask
    io: Tensor
    s1: Tensor
    s2: Tensor
    end: Tensor
    orders: list[str]
    templates: list[int]


def single_token_words(tokenizer: Any, words: tuple[str, ...]) -> list[str]:
    """The words that are one token with their leading space."""
    return [w for w in words if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) == 1]


def _fill(tokenizer: Any, template: str, words: dict[str, str], offset: int) -> tuple[list[int], dict[str, int]]:
    """The template's token ids and each name slot's first position (``offset`` framing tokens before)."""
    positions: dict[str, int] = {}
    text, last = "", 0
    for m in _SLOT.finditer(template):
        text += template[last : m.start()] + words[m.group(1)]
        last = m.end()
        if m.group(1) not in positions:
            positions[m.group(1)] = offset + len(tokenizer(text, add_special_tokens=False)["input_ids"]) - 1
    text += template[last:]
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]], positions


def _words(tokenizer: Any) -> tuple[list[str], list[str], list[str]]:
    names = single_token_words(tokenizer, IOI_NAMES)
    places, objects = single_token_words(tokenizer, IOI_PLACES), single_token_words(tokenizer, IOI_OBJECTS)
    if len(names) < MIN_NAMES or not places or not objects:
        raise InputError(
            f"the ioi task needs at least {MIN_NAMES} single-token names, one place and one object for this tokenizer;"
            f" it has {len(names)} names, {len(places)} places, {len(objects)} objects"
        )
    return names, places, objects


def ioi_pairs(model: Any, *, n: int = 64, seed: int = 0, prepend_bos: bool = True) -> IOIPairs:
    """``n`` IOI pairs (see the module doc); pair ``i`` is ABBA when ``i`` is even, BABA when odd."""
    check_pairs(n, width=IOI_WIDTH)
    tok = model.tokenizer
    names, places, objects = _words(tok)
    prefix, suffix = model.frame(prepend_bos)
    rng = random.Random(seed)
    clean_rows, corrupt_rows, correct, incorrect, where = [], [], [], [], []
    orders, templates = [], []
    for i in range(n):
        t = rng.randrange(len(IOI_TEMPLATES))
        io, s, c1, c2, c3 = rng.sample(names, MIN_NAMES)
        nouns = {"PLACE": rng.choice(places), "OBJECT": rng.choice(objects)}
        order = ORDERS[i % 2]
        first = (io, s) if order == "ABBA" else (s, io)
        clean, pos = _fill(tok, IOI_TEMPLATES[t], {"N1": first[0], "N2": first[1], "S": s, **nouns}, len(prefix))
        corrupt, _ = _fill(tok, IOI_TEMPLATES[t], {"N1": c1, "N2": c2, "S": c3, **nouns}, len(prefix))
        clean, corrupt = prefix + clean + suffix, prefix + corrupt + suffix
        ids = {w: int(tok(" " + w, add_special_tokens=False)["input_ids"][0]) for w in (io, s)}
        p_io, p_s1 = (pos["N1"], pos["N2"]) if order == "ABBA" else (pos["N2"], pos["N1"])
        if len(clean) != len(corrupt) or clean[p_io] != ids[io] or clean[p_s1] != ids[s] or clean[pos["S"]] != ids[s]:
            raise InputError(f"ioi pair {i + 1}: the names do not sit at the same token positions in the clean and corrupted text")
        if len(clean) > model.n_ctx:
            raise InputError(f"ioi pair {i + 1}: {len(clean)} tokens, longer than the model's context of {model.n_ctx}")
        clean_rows.append(clean)
        corrupt_rows.append(corrupt)
        correct.append(ids[io])
        incorrect.append(ids[s])
        where.append((p_io, p_s1, pos["S"], len(clean) - len(suffix) - 1))
        orders.append(order)
        templates.append(t)
    source = {
        "kind": "builtin",
        "task": "ioi",
        "n": n,
        "seed": seed,
        "after": "Wang et al. 2022, Interpretability in the Wild",
        "templates": list(IOI_TEMPLATES),
        "orders": {o: orders.count(o) for o in ORDERS},
        "corruption": CORRUPTION,
        "metric": "logit(IO) - logit(S) at the last token",
        "names": names,
        "places": places,
        "objects": objects,
    }
    task = padded_pairs(tok, clean_rows, corrupt_rows, correct, incorrect, prepend_bos=prepend_bos, source=source)
    cols = torch.tensor(where, dtype=torch.long).T
    return IOIPairs(task=task, io=cols[0], s1=cols[1], s2=cols[2], end=cols[3], orders=orders, templates=templates)


def ioi_task(model: Any, *, n: int = 64, seed: int = 0, prepend_bos: bool = True) -> PairTask:
    """The pairs of :func:`ioi_pairs` (the ``ioi`` built-in task)."""
    return ioi_pairs(model, n=n, seed=seed, prepend_bos=prepend_bos).task
