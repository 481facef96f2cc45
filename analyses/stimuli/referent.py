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
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from headlens.probes.jsonl import read_jsonl

from . import StimulusError

__all__ = [
    "MALE_NAMES",
    "FEMALE_NAMES",
    "NOUNS",
    "KINDS",
    "FRAMES",
    "MIN_ITEMS",
    "Frame",
    "ReferentItem",
    "LocatedReferent",
    "FittedReferents",
    "referent_items",
    "fit_referent_items",
    "load_referent_file",
    "save_referent_file",
    "locate_tokens",
]

KINDS: tuple[str, ...] = ("gender", "number")

#: Fewer usable items than this (after dropping those a tokenizer cannot represent) is an error,
#: unless fewer were asked for in the first place.
MIN_ITEMS = 20

# Unambiguously gendered first names; each is ONE GPT-2 token with its leading
# space.  Names that are also common words (Rose, Grace, Mark, Frank) or are
# used for either gender (Sam, Chris) are left out on purpose.
MALE_NAMES: tuple[str, ...] = (
    " John", " David", " Michael", " James", " Robert", " Peter", " Paul",
    " Kevin", " Brian", " Daniel", " George", " Jack", " Henry", " Eric",
    " Adam", " Richard", " Thomas", " Andrew", " Steve", " Tom",
)
FEMALE_NAMES: tuple[str, ...] = (
    " Mary", " Sarah", " Lisa", " Anna", " Emma", " Jessica", " Jennifer",
    " Susan", " Karen", " Laura", " Rachel", " Julia", " Rebecca", " Emily",
    " Linda", " Alice", " Helen", " Lucy", " Nancy", " Amy",
)

# (singular, plural) noun pairs by category; every form is ONE GPT-2 token with
# its leading space.  A number frame draws both nouns from one category.
NOUNS: dict[str, tuple[tuple[str, str], ...]] = {
    "animal": (
        (" dog", " dogs"), (" cat", " cats"), (" horse", " horses"),
        (" goat", " goats"), (" rabbit", " rabbits"), (" duck", " ducks"),
        (" cow", " cows"), (" pig", " pigs"), (" puppy", " puppies"),
        (" kitten", " kittens"),
    ),
    "object": (
        (" box", " boxes"), (" lamp", " lamps"), (" chair", " chairs"),
        (" table", " tables"), (" bottle", " bottles"), (" clock", " clocks"),
        (" bucket", " buckets"), (" basket", " baskets"), (" bench", " benches"),
        (" mirror", " mirrors"), (" bowl", " bowls"), (" crate", " crates"),
        (" barrel", " barrels"),
    ),
    "vehicle": (
        (" car", " cars"), (" truck", " trucks"), (" bus", " buses"),
        (" boat", " boats"), (" van", " vans"), (" bike", " bikes"),
        (" train", " trains"), (" ship", " ships"),
    ),
}

# Pronoun forms by role.  "her" serves as both object and possessive.
_GENDER_PRONOUNS: dict[str, dict[str, str]] = {
    "male": {"subj": " he", "obj": " him", "poss": " his"},
    "female": {"subj": " she", "obj": " her", "poss": " her"},
}
_NUMBER_PRONOUNS: dict[str, dict[str, str]] = {
    "singular": {"subj": " it", "obj": " it", "poss": " its"},
    "plural": {"subj": " they", "obj": " them", "poss": " their"},
}


@dataclass(frozen=True)
class Frame:
    """A sentence frame: ``{A}`` is the first candidate, ``{B}`` the second, and one of
    ``{subj}``/``{obj}``/``{poss}`` the pronoun (after both).  ``category`` is the noun
    category of a number frame ("" for gender frames)."""

    id: str
    kind: str
    template: str
    category: str = ""

    @property
    def role(self) -> str:
        """The pronoun's grammatical role: "subj", "obj" or "poss"."""
        return next(m.group(1) for m in _PLACEHOLDER.finditer(self.template) if m.group(1) not in ("A", "B"))


_PLACEHOLDER = re.compile(r"\{(A|B|subj|obj|poss)\}")

# Gender frames, written for this project.  Each slot follows a space, and the span of
# the filled word includes that space.  Either name is a plausible referent; agreement
# alone decides.
_GENDER_FRAMES: tuple[str, ...] = (
    # subject pronouns
    "Yesterday {A} called {B} because {subj} needed help with the car.",
    "After lunch, {A} met {B} at the station, and {subj} was carrying a heavy suitcase.",
    "At the party, {A} talked with {B} for an hour before {subj} finally went home.",
    "In the morning, {A} had coffee with {B}, and {subj} talked about the new job for ages.",
    "On Sunday, {A} and {B} went hiking, and {subj} took dozens of photos of the lake.",
    "Before the concert, {A} waited outside with {B}, and {subj} was wearing a bright red coat.",
    "Late at night, {A} was chatting online with {B}, and afterwards {subj} could not sleep.",
    "At the library, {A} helped {B} find a book, and then {subj} left to catch the bus.",
    "Before dinner, {A} phoned {B} to say that {subj} would be late.",
    "At the school gate, {A} waved at {B}, but {subj} was already thinking about the exam.",
    "In the garden, {A} argued with {B} until {subj} walked off in a huff.",
    "On the way home, {A} sat beside {B}, and {subj} fell asleep within minutes.",
    # object pronouns
    "When {A} visited {B} at the hospital, a nurse brought {obj} a cup of tea.",
    "The manager thanked {A} and {B}, and then gave {obj} a small bonus.",
    "On the train, {A} sat across from {B}, and a stranger asked {obj} for directions.",
    "After the game, {A} shook hands with {B}, and the crowd cheered for {obj} loudly.",
    "Every summer, {A} visits {B} in the village, and the neighbours always invite {obj} to dinner.",
    "At the office, {A} shares a desk with {B}, and the boss often asks {obj} to stay late.",
    "At the wedding, {A} danced with {B}, and the photographer kept following {obj} around the hall.",
    "In the queue, {A} stood behind {B}, and a clerk waved {obj} over to the counter.",
    "At the station, {A} bumped into {B}, and a porter offered {obj} a hand with the luggage.",
    # possessive pronouns
    "During the meeting, {A} sat next to {B}, and everyone noticed that {poss} phone kept ringing.",
    "At the market, {A} ran into {B}, and {poss} bag was full of fresh apples.",
    "In the kitchen, {A} was cooking with {B} when {poss} sleeve caught fire.",
    "On the beach, {A} was reading next to {B} when a wave soaked {poss} towel.",
    "At the airport, {A} said goodbye to {B}, and {poss} flight was delayed by two hours.",
    "During the storm, {A} sheltered in a doorway with {B}, and the rain soaked {poss} shoes.",
    "At the gym, {A} trained next to {B}, and {poss} knee started to hurt.",
    "During the exam, {A} sat behind {B}, and {poss} pen ran out of ink.",
    "On the ferry, {A} chatted with {B} while {poss} umbrella dried on the deck.",
)

# Number frames: (noun category, template), written for this project.  Only the two
# candidate nouns come before the pronoun, no other noun of :data:`NOUNS` appears, the two
# candidates are never coordinated ("the A and the B" invites "they" = both), and every
# verb attached to a noun or to the pronoun has the same form in the singular and the
# plural (past tense, modals).
_NUMBER_FRAMES: tuple[tuple[str, str], ...] = (
    # subject pronouns
    ("animal", "Yesterday the {A} chased the {B} until {subj} got tired and lay down."),
    ("animal", "Today we fed the {A} before the {B}, because {subj} looked hungrier."),
    ("animal", "When the {A} followed the {B} outside, {subj} started making a lot of noise."),
    ("object", "Yesterday we moved the {A} next to the {B} because {subj} blocked the door."),
    ("object", "Eventually we found the {A} under the {B}, and {subj} needed a good clean."),
    ("object", "I painted the {A} after the {B}, and {subj} dried overnight in the sun."),
    ("object", "I cleaned the {A} before the {B}, but {subj} still looked dusty."),
    ("object", "We carried the {A} past the {B}, and {subj} nearly fell over."),
    ("vehicle", "Slowly the {A} overtook the {B}, and then {subj} turned left at the lights."),
    ("vehicle", "Patiently the {A} waited behind the {B} until {subj} finally moved."),
    ("vehicle", "Yesterday I washed the {A} after the {B}, and {subj} looked almost new afterwards."),
    # object pronouns
    ("animal", "Last night the {A} slept beside the {B}, and I brushed {obj} gently afterwards."),
    ("animal", "Overnight the {A} frightened the {B}, so we checked on {obj} first."),
    ("animal", "Suddenly the {A} ran past the {B}, and I photographed {obj} from the gate."),
    ("animal", "The vet examined the {A} after the {B} and gave {obj} some medicine."),
    ("object", "Somebody left the {A} beside the {B}, so I carried {obj} into the garage."),
    ("object", "We bought the {A} a week after the {B}, and later I sold {obj} online."),
    ("vehicle", "Last week the {A} broke down near the {B}, so we repaired {obj} on the spot."),
    ("vehicle", "At the depot we parked the {A} beside the {B} and covered {obj} with a tarpaulin."),
    # possessive pronouns
    ("animal", "This morning the {A} stood beside the {B}, and the farmer brushed {poss} coat."),
    ("animal", "At dusk the {A} wandered past the {B}, and I could hear {poss} breathing."),
    ("object", "We stacked the {A} on top of the {B}, and later {poss} paint began to peel."),
    ("object", "Someone pushed the {A} against the {B}, and then {poss} surface got scratched."),
    ("vehicle", "Late at night the {A} stopped behind the {B}, and soon {poss} engine started to smoke."),
)

#: Every frame, with a stable id: ``g01``..``g30`` (gender), ``n01``..``n24`` (number).
FRAMES: tuple[Frame, ...] = tuple(
    [Frame(f"g{i:02d}", "gender", t) for i, t in enumerate(_GENDER_FRAMES, start=1)]
    + [Frame(f"n{i:02d}", "number", t, c) for i, (c, t) in enumerate(_NUMBER_FRAMES, start=1)]
)

_PAIRS_PER_ORDER = 3  # pairs per (frame, candidate order): 12 items per frame
_GENERATION_SEED = 1729  # fixes the item SET; `seed` in referent_items only reorders the pairs


Span = tuple[int, int]


def _as_span(value: Any, field: str) -> Span:
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
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
                raise StimulusError(
                    f"{field_name} span [{start}, {end}) is out of range for a text of "
                    f"{len(self.text)} characters"
                )
            if not self.text[start:end].strip():
                raise StimulusError(f"{field_name} span [{start}, {end}) covers only whitespace")
            object.__setattr__(self, field_name, (start, end))
            spans[field_name] = (start, end)
        names = list(spans)
        for i, first in enumerate(names):
            for second in names[i + 1 :]:
                (s1, e1), (s2, e2) = spans[first], spans[second]
                if s1 < e2 and s2 < e1:
                    raise StimulusError(
                        f"{first} span [{s1}, {e1}) overlaps {second} span [{s2}, {e2})"
                    )

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
    for match in _PLACEHOLDER.finditer(template):
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


def _generate_all() -> list[ReferentItem]:
    """Every frame x both candidate orders x ``_PAIRS_PER_ORDER`` distinct fills, each fill a
    pair (the pronoun agreeing with A, then with B)."""
    rng = random.Random(_GENERATION_SEED)
    items: list[ReferentItem] = []
    for frame in FRAMES:
        pronouns = _GENDER_PRONOUNS if frame.kind == "gender" else _NUMBER_PRONOUNS
        seen: set[tuple[str, str]] = set()
        for order in (0, 1):
            for _ in range(_PAIRS_PER_ORDER):
                for _attempt in range(100):  # redraw the rare repeated fill
                    a, b, agreement = _candidates(frame, order, rng)
                    if (a, b) not in seen:
                        break
                seen.add((a, b))
                pair = f"{frame.id}.{len(seen)}"
                for slot in ("A", "B"):
                    words = {"A": a, "B": b, frame.role: pronouns[agreement[slot]][frame.role]}
                    items.append(_fill(frame, words, slot, pair))
    return items


_ALL_ITEMS: tuple[ReferentItem, ...] | None = None


def _units(items: Sequence[Any]) -> list[list[int]]:
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
    global _ALL_ITEMS
    if _ALL_ITEMS is None:
        _ALL_ITEMS = tuple(_generate_all())
    if kind is not None and kind not in KINDS:
        raise StimulusError(f"unknown referent kind {kind!r}; expected one of {', '.join(KINDS)}")
    pool = [item for item in _ALL_ITEMS if kind is None or item.kind == kind]
    units = _units(pool)
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
# Files
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


def save_referent_file(items: Iterable[ReferentItem], path: str | Path) -> Path:
    """Write ``items`` as JSONL readable by :func:`load_referent_file`."""
    path = Path(path)
    lines = [json.dumps(item.to_json(), ensure_ascii=False) for item in items]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# Token location
# --------------------------------------------------------------------------

_FIELDS = ("pronoun", "antecedent", "distractor")


def _token_label(tokenizer: Any) -> str:
    name = f"{type(tokenizer).__name__} {getattr(tokenizer, 'name_or_path', '')}".lower()
    return "GPT-2 tokens" if "gpt2" in name else "tokens"


def _encode_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    try:
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError) as exc:
        raise StimulusError(
            "locate_tokens needs a fast tokenizer that supports return_offsets_mapping=True"
        ) from exc
    ids = list(encoding["input_ids"])
    offsets = [(int(s), int(e)) for s, e in encoding["offset_mapping"]]
    return ids, offsets


def _match_token(text: str, span: Span, offsets: Sequence[tuple[int, int]]) -> tuple[list[int], bool]:
    """The tokens that overlap the word at ``span`` (leading whitespace ignored), and whether
    a single such token covers exactly that word."""
    start, end = span
    word = text[start:end]
    core_start = start + (len(word) - len(word.lstrip()))  # the span without leading whitespace
    hits = [i for i, (s, e) in enumerate(offsets) if s < end and e > core_start]
    if len(hits) != 1:
        return hits, False
    tok_start, tok_end = offsets[hits[0]]
    piece = text[tok_start:tok_end]
    tok_core_start = tok_start + (len(piece) - len(piece.lstrip()))
    return hits, tok_core_start == core_start and tok_end == end


def _find_token(
    text: str, span: Span, offsets: Sequence[tuple[int, int]], field: str, index: int, label: str
) -> int:
    hits, ok = _match_token(text, span, offsets)
    if ok:
        return hits[0]
    word = text[span[0] : span[1]]
    if len(hits) != 1:
        unit = label[:-1] if len(hits) == 1 else label
        raise StimulusError(
            f"{field} {word!r} in item {index} is {len(hits)} {unit}; "
            f"{'pronouns' if field == 'pronoun' else 'names'} must be single tokens"
        )
    tok_start, tok_end = offsets[hits[0]]
    raise StimulusError(
        f"{field} {word!r} in item {index} does not line up with a token: the token "
        f"there is {text[tok_start:tok_end]!r}"
    )


def _wrap_ids(tokenizer: Any, prepend_bos: bool, wrap: tuple[Sequence[int], Sequence[int]] | None) -> tuple[list[int], list[int]]:
    if wrap is not None:
        prefix, suffix = wrap
        return [int(i) for i in prefix], [int(i) for i in suffix]
    if not prepend_bos:
        return [], []
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        raise StimulusError("prepend_bos=True but the tokenizer has no bos_token_id")
    return [int(bos_id)], []


def _located(item: ReferentItem, ids: Sequence[int], positions: dict[str, int], prefix: list[int], suffix: list[int]) -> LocatedReferent:
    return LocatedReferent(
        token_ids=tuple(prefix + [int(i) for i in ids] + suffix),
        pronoun=positions["pronoun"] + len(prefix),
        antecedent=positions["antecedent"] + len(prefix),
        distractor=positions["distractor"] + len(prefix),
        kind=item.kind,
        frame=item.frame,
        pair=item.pair,
    )


def locate_tokens(
    items: Sequence[ReferentItem],
    tokenizer: Any,
    prepend_bos: bool = False,
    *,
    wrap: tuple[Sequence[int], Sequence[int]] | None = None,
) -> list[LocatedReferent]:
    """Tokenize each item and find the single token of its pronoun, antecedent
    and distractor.

    A span matches the one token whose character offsets cover the same word,
    whether or not either includes the leading space.  A word split over
    several tokens, or a span that cuts a token, raises :class:`StimulusError`
    naming the item index and the word (:func:`fit_referent_items` drops such items
    instead).  With ``prepend_bos`` the tokenizer's ``bos_token_id`` is put first and
    every position moves up by one; ``wrap=(prefix_ids, suffix_ids)`` (e.g.
    ``LoadedModel.frame(prepend_bos)``: ``[CLS] ... [SEP]`` for an encoder) replaces that.
    """
    prefix, suffix = _wrap_ids(tokenizer, prepend_bos, wrap)
    label = _token_label(tokenizer)
    located: list[LocatedReferent] = []
    for index, item in enumerate(items):
        if not isinstance(item, ReferentItem):
            raise StimulusError(f"item {index} is a {type(item).__name__}, not a ReferentItem")
        ids, offsets = _encode_with_offsets(tokenizer, item.text)
        positions = {name: _find_token(item.text, getattr(item, name), offsets, name, index, label) for name in _FIELDS}
        located.append(_located(item, ids, positions, prefix, suffix))
    return located


@dataclass(frozen=True)
class FittedReferents:
    """The items a tokenizer can represent (:func:`fit_referent_items`) and what was dropped."""

    items: list[ReferentItem]
    located: list[LocatedReferent]
    offered: int  # items looked at (before ``n``)
    dropped: int  # items left out because a word of theirs, or of their pair partner, is not one token
    #: word (with its leading space) -> number of items dropped because of it; the value's
    #: companion ``dropped_tokens`` says how many tokens the word is (0: the span cuts a token)
    dropped_words: dict[str, int] = field(default_factory=dict)
    dropped_tokens: dict[str, int] = field(default_factory=dict)

    def describe_dropped(self, limit: int = 8) -> str:
        """``"' puppies' (2 tokens) x12, ..."``, most frequent first."""
        parts = []
        for word, count in sorted(self.dropped_words.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]:
            n_tok = self.dropped_tokens.get(word, 0)
            what = f"{n_tok} tokens" if n_tok else "cuts a token"
            parts.append(f"{word!r} ({what}) x{count}")
        more = len(self.dropped_words) - limit
        return ", ".join(parts) + (f", and {more} more" if more > 0 else "")

    def info(self) -> dict[str, Any]:
        """For the census stimuli info / manifest."""
        return {
            "offered": self.offered,
            "dropped": self.dropped,
            "dropped_words": dict(sorted(self.dropped_words.items(), key=lambda kv: (-kv[1], kv[0]))),
            "used": len(self.items),
            "pairs": sum(1 for unit in _units(self.items) if len(unit) == 2),
            "frames": len({item.frame or f"#{i}" for i, item in enumerate(self.items)}),
        }


def fit_referent_items(
    items: Sequence[ReferentItem],
    tokenizer: Any,
    *,
    wrap: tuple[Sequence[int], Sequence[int]] = ((), ()),
    n: int | None = None,
    min_items: int = MIN_ITEMS,
) -> FittedReferents:
    """Keep the items whose pronoun, antecedent and distractor are each one token for
    ``tokenizer`` (a pair is kept or dropped whole), then the first ``n`` of them (whole
    pairs: an ``n`` that would split a pair takes both items), located with ``wrap``
    ``(prefix_ids, suffix_ids)`` around each sentence.

    Dropping is not an error; what was dropped is in the result (:meth:`FittedReferents.info`).
    It is a one-line :class:`StimulusError`, naming the counts and the words, only when
    fewer than ``min(min_items, wanted)`` items remain, where ``wanted`` is ``n`` (or
    every item) capped at ``len(items)``.
    """
    prefix, suffix = _wrap_ids(tokenizer, False, wrap)
    bad_words: Counter[str] = Counter()
    bad_tokens: dict[str, int] = {}
    encoded: list[tuple[list[int], dict[str, int]] | None] = []
    for index, item in enumerate(items):
        if not isinstance(item, ReferentItem):
            raise StimulusError(f"item {index} is a {type(item).__name__}, not a ReferentItem")
        ids, offsets = _encode_with_offsets(tokenizer, item.text)
        positions: dict[str, int] = {}
        for name in _FIELDS:
            span = getattr(item, name)
            hits, ok = _match_token(item.text, span, offsets)
            if ok:
                positions[name] = hits[0]
            else:
                word = item.text[span[0] : span[1]]
                bad_words[word] += 1
                bad_tokens[word] = len(hits) if len(hits) != 1 else 0
        encoded.append((ids, positions) if len(positions) == len(_FIELDS) else None)
    units = [unit for unit in _units(items) if all(encoded[i] is not None for i in unit)]
    usable = sum(len(unit) for unit in units)
    wanted = len(items) if n is None else min(n, len(items))
    if usable < min(min_items, wanted):
        fitted = FittedReferents([], [], len(items), len(items) - usable, dict(bad_words), bad_tokens)
        raise StimulusError(
            f"only {usable} of {len(items)} referent items can be used with this tokenizer "
            f"(need at least {min(min_items, wanted)}); not one token: {fitted.describe_dropped()}; "
            "pronouns and names must be single tokens"
        )
    kept: list[int] = []
    for unit in units:
        if n is not None and len(kept) >= n:
            break
        kept += unit
    located = []
    for i in kept:
        ids, positions = encoded[i]  # type: ignore[misc]
        located.append(_located(items[i], ids, positions, prefix, suffix))
    return FittedReferents(
        items=[items[i] for i in kept],
        located=located,
        offered=len(items),
        dropped=len(items) - usable,
        dropped_words=dict(bad_words),
        dropped_tokens=bad_tokens,
    )
