"""Pronoun -> antecedent stimuli, in minimal pairs.

Every sentence contains a pronoun, its antecedent and a *distractor*: a second
candidate that grammatical agreement rules out as the antecedent.

* ``kind="gender"`` -- one male and one female name; the pronoun is
  he/him/his or she/her and agrees with the antecedent only.
* ``kind="number"`` -- one singular and one plural noun; the pronoun is
  it/its or they/them/their and agrees with the antecedent only.

Items come in **pairs** that differ only in the pronoun: "Yesterday John called Mary
because he ..." / "... because she ...".  Both candidates sit at the same positions in
the two sentences, and the antecedent of one is the distractor of the other, so a head
that attends by position (or by anything but agreement) picks the antecedent in exactly
one item of each pair: 50% accuracy.  Each sentence frame is filled in both candidate
orders (male name first / female name first; singular noun first / plural noun first),
so "nearest mention" is also right exactly half the time.

The frames (:data:`FRAMES`) were written for this project (original English): 30
gender frames and 24 number frames, with subject, object and possessive pronouns.  Each
is neutral about which candidate the pronoun refers to; agreement alone decides.

Every name, noun and pronoun is a single GPT-2 token including its leading space
(``" Mary"``, ``" boxes"``, ``" she"``); other tokenizers may split some of them (BERT's
WordPiece splits ``" puppies"``), and :func:`fit_referent_items` drops the pairs that use
such a word.  Spans are CHARACTER offsets ``[start, end)`` into the text and cover the
word together with its leading space.

Modules: the word lists and frames are data in :mod:`headlens.analyses.stimuli.referent_frames`;
this module holds the item types, the generation of the pairs and the JSONL file format;
:mod:`headlens.analyses.stimuli.referent_tokens` locates the words' tokens and fits the items to
a tokenizer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from headlens.analyses.stimuli.referent_frames import (
    FEMALE_NAMES,
    FRAMES,
    GENDER_PRONOUNS,
    GENERATION_SEED,
    KINDS,
    MALE_NAMES,
    NOUNS,
    NUMBER_PRONOUNS,
    PAIRS_PER_ORDER,
    PLACEHOLDER,
    Frame,
)
from headlens.probes.errors import StimulusError
from headlens.probes.jsonl import read_jsonl

__all__ = [
    "Span",
    "ReferentItem",
    "LocatedReferent",
    "referent_items",
    "pair_units",
    "load_referent_file",
    "referent_jsonl",
]

Span = tuple[int, int]


def _as_span(value: Any, field: str) -> Span:
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise StimulusError(f"{field} span must be two integers [start, end), got {value!r}")
    return (int(value[0]), int(value[1]))


@dataclass(frozen=True)
class ReferentItem:
    """One stimulus: ``text`` plus CHARACTER spans ``[start, end)`` of the
    pronoun, its antecedent and the distractor.  Spans are validated on
    construction (inside the text, non-empty, not only whitespace, pairwise
    disjoint); a bad item raises :class:`StimulusError`.

    ``frame`` names the sentence frame the item was filled from and ``pair`` its minimal
    pair (the item with the other pronoun); both are "" for items that have none (e.g. a
    user's file without them).  The role rule treats a pair as one unit and splits items
    into selection and held-out halves by frame.
    """

    text: str
    pronoun: Span
    antecedent: Span
    distractor: Span
    kind: str = "custom"
    frame: str = ""
    pair: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise StimulusError("text must be a non-empty string")
        if not isinstance(self.kind, str) or not self.kind:
            raise StimulusError(f"kind must be a non-empty string, got {self.kind!r}")
        for name in ("frame", "pair"):
            if not isinstance(getattr(self, name), str):
                raise StimulusError(f"{name} must be a string, got {getattr(self, name)!r}")
        spans: dict[str, Span] = {}
        for field_name in ("pronoun", "antecedent", "distractor"):
            start, end = _as_span(getattr(self, field_name), field_name)
            if not 0 <= start < end <= len(self.text):
                if start >= end:
                    raise StimulusError(f"{field_name} span [{start}, {end}) is empty")
                raise StimulusError(f"{field_name} span [{start}, {end}) is out of range for a text of {len(self.text)} characters")
            if not self.text[start:end].strip():
                raise StimulusError(f"{field_name} span [{start}, {end}) covers only whitespace")
            object.__setattr__(self, field_name, (start, end))
            spans[field_name] = (start, end)
        names = list(spans)
        for i, first in enumerate(names):
            for second in names[i + 1 :]:
                (s1, e1), (s2, e2) = spans[first], spans[second]
                if s1 < e2 and s2 < e1:
                    raise StimulusError(f"{first} span [{s1}, {e1}) overlaps {second} span [{s2}, {e2})")

    @property
    def pronoun_text(self) -> str:
        return self.text[self.pronoun[0] : self.pronoun[1]]

    @property
    def antecedent_text(self) -> str:
        return self.text[self.antecedent[0] : self.antecedent[1]]

    @property
    def distractor_text(self) -> str:
        return self.text[self.distractor[0] : self.distractor[1]]

    @property
    def antecedent_first(self) -> bool:
        """True when the antecedent is mentioned before the distractor."""
        return self.antecedent[0] < self.distractor[0]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "text": self.text,
            "pronoun": list(self.pronoun),
            "antecedent": list(self.antecedent),
            "distractor": list(self.distractor),
            "kind": self.kind,
        }
        if self.frame:
            out["frame"] = self.frame
        if self.pair:
            out["pair"] = self.pair
        return out


@dataclass(frozen=True)
class LocatedReferent:
    """An item's token ids and the TOKEN positions of its three words
    (already shifted by the prefix, e.g. BOS or [CLS], when one was prepended)."""

    token_ids: tuple[int, ...]
    pronoun: int
    antecedent: int
    distractor: int
    kind: str
    frame: str = ""
    pair: str = ""


# --------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------


def _fill(frame: Frame, words: dict[str, str], antecedent_slot: str, pair: str) -> ReferentItem:
    """Fill ``frame``; ``words`` maps A, B and the pronoun role to words that carry
    their leading space (the template's space before the slot is dropped)."""
    template = frame.template
    pieces: list[str] = []
    spans: dict[str, Span] = {}
    cursor = 0
    length = 0
    for match in PLACEHOLDER.finditer(template):
        before = template[cursor : match.start()]
        if not before.endswith(" "):
            raise StimulusError(f"template slot {match.group(0)} must follow a space: {template!r}")
        before = before[:-1]
        pieces.append(before)
        length += len(before)
        word = words[match.group(1)]
        slot = "P" if match.group(1) in ("subj", "obj", "poss") else match.group(1)
        spans[slot] = (length, length + len(word))
        pieces.append(word)
        length += len(word)
        cursor = match.end()
    pieces.append(template[cursor:])
    distractor_slot = "B" if antecedent_slot == "A" else "A"
    return ReferentItem(
        text="".join(pieces),
        pronoun=spans["P"],
        antecedent=spans[antecedent_slot],
        distractor=spans[distractor_slot],
        kind=frame.kind,
        frame=frame.id,
        pair=pair,
    )


def _candidates(frame: Frame, order: int, rng: random.Random) -> tuple[str, str, dict[str, str]]:
    """Draw the two candidates for ``frame``: ``(A, B, {slot: agreement class})``.  Order 0
    puts the male name (singular noun) first, order 1 the female name (plural noun)."""
    if frame.kind == "gender":
        male, female = rng.choice(MALE_NAMES), rng.choice(FEMALE_NAMES)
        if order == 0:
            return male, female, {"A": "male", "B": "female"}
        return female, male, {"A": "female", "B": "male"}
    (first_sg, first_pl), (second_sg, second_pl) = rng.sample(NOUNS[frame.category], 2)
    if order == 0:
        return first_sg, second_pl, {"A": "singular", "B": "plural"}
    return first_pl, second_sg, {"A": "plural", "B": "singular"}


@lru_cache(maxsize=1)
def _generate_all() -> tuple[ReferentItem, ...]:
    """Every frame x both candidate orders x ``PAIRS_PER_ORDER`` distinct fills, each fill a
    pair (the pronoun agreeing with A, then with B)."""
    rng = random.Random(GENERATION_SEED)
    items: list[ReferentItem] = []
    for frame in FRAMES:
        pronouns = GENDER_PRONOUNS if frame.kind == "gender" else NUMBER_PRONOUNS
        seen: set[tuple[str, str]] = set()
        for order in (0, 1):
            for _ in range(PAIRS_PER_ORDER):
                for _attempt in range(100):  # redraw the rare repeated fill
                    a, b, agreement = _candidates(frame, order, rng)
                    if (a, b) not in seen:
                        break
                seen.add((a, b))
                pair = f"{frame.id}.{len(seen)}"
                for slot in ("A", "B"):
                    words = {"A": a, "B": b, frame.role: pronouns[agreement[slot]][frame.role]}
                    items.append(_fill(frame, words, slot, pair))
    return tuple(items)


def pair_units(items: Sequence[Any]) -> list[list[int]]:
    """Indices of ``items`` grouped into units: the items of one pair together (in the
    order the pair first appears), an item without a pair on its own."""
    units: list[list[int]] = []
    where: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.pair:
            if item.pair in where:
                units[where[item.pair]].append(i)
                continue
            where[item.pair] = len(units)
        units.append([i])
    return units


def referent_items(n: int | None = None, seed: int = 0, kind: str | None = None) -> list[ReferentItem]:
    """The project's referent stimuli: 648 distinct sentences in 324 minimal pairs.

    The SET of sentences is fixed; ``seed`` only shuffles the order of the PAIRS (the two
    items of a pair stay next to each other), and ``n`` keeps the first ``n`` items after
    that shuffle, so ``referent_items(n, seed)`` is ``referent_items(None, seed)[:n]`` (an
    odd ``n`` ends with half a pair; :func:`fit_referent_items` keeps pairs whole).
    ``kind`` ("gender" or "number") keeps one kind only.
    """
    if kind is not None and kind not in KINDS:
        raise StimulusError(f"unknown referent kind {kind!r}; expected one of {', '.join(KINDS)}")
    pool = [item for item in _generate_all() if kind is None or item.kind == kind]
    units = pair_units(pool)
    random.Random(seed).shuffle(units)
    pool = [pool[i] for unit in units for i in unit]
    if n is None:
        return pool
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise StimulusError(f"n must be a positive integer or None, got {n!r}")
    if n > len(pool):
        raise StimulusError(f"asked for {n} referent items but only {len(pool)} exist")
    return pool[:n]


# --------------------------------------------------------------------------
# The JSONL file format
# --------------------------------------------------------------------------

_REQUIRED_FIELDS = ("text", "pronoun", "antecedent", "distractor")


def load_referent_file(path: str | Path) -> list[ReferentItem]:
    """Read referent items from a JSONL file: one object per line with ``text``,
    ``pronoun``, ``antecedent`` and ``distractor`` (``[start, end)`` character
    spans) and optional ``kind``, ``frame`` and ``pair`` (strings; two items with the
    same ``pair`` form a minimal pair).  Blank lines are skipped.  Any problem
    raises :class:`StimulusError` naming the file and line number."""
    path = Path(path)
    items: list[ReferentItem] = []
    for number, record in read_jsonl(path, what="referent file", error=StimulusError, where=lambda p, n: f"{p}, line {n}"):
        where = f"{path}, line {number}"
        if not isinstance(record, dict):
            raise StimulusError(f"{where}: expected a JSON object, got {type(record).__name__}")
        missing = [name for name in _REQUIRED_FIELDS if name not in record]
        if missing:
            raise StimulusError(f"{where}: missing field(s) {', '.join(missing)}")
        try:
            items.append(
                ReferentItem(
                    text=record["text"],
                    pronoun=record["pronoun"],
                    antecedent=record["antecedent"],
                    distractor=record["distractor"],
                    kind=record.get("kind", "custom"),
                    frame=record.get("frame", ""),
                    pair=record.get("pair", ""),
                )
            )
        except StimulusError as exc:
            raise StimulusError(f"{where}: {exc}") from exc
    if not items:
        raise StimulusError(f"referent file {path} contains no items")
    return items


def referent_jsonl(items: Iterable[ReferentItem]) -> str:
    """``items`` as the JSONL text :func:`load_referent_file` reads (one object a line); the
    caller writes it (e.g. :func:`headlens.probes.outputs.write_text`)."""
    return "".join(json.dumps(item.to_json(), ensure_ascii=False) + "\n" for item in items)
