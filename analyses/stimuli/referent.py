"""Pronoun -> antecedent stimuli.

Every sentence contains a pronoun, its antecedent and a *distractor*: a second
candidate that grammatical agreement rules out as the antecedent.

* ``kind="gender"`` -- one male and one female name; the pronoun is
  he/him/his or she/her and agrees with the antecedent only.
* ``kind="number"`` -- one singular and one plural noun; the pronoun is
  ``it`` or ``they``/``them`` and agrees with the antecedent only.

The templates were written for this project (original English).  Each one is
neutral about which mention the pronoun refers to, so the generator fills it
both ways: the antecedent is the first mention in half of the items and the
second in the other half, so "nearest mention" is right only half the time.

Every name, noun and pronoun is a single GPT-2 token including its leading
space (``" Mary"``, ``" boxes"``, ``" she"``); the tests check this through the
real tokenizer.  Spans are CHARACTER offsets ``[start, end)`` into the text and
cover the word together with its leading space.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from . import StimulusError

__all__ = [
    "MALE_NAMES",
    "FEMALE_NAMES",
    "NOUNS",
    "KINDS",
    "ReferentItem",
    "LocatedReferent",
    "referent_items",
    "load_referent_file",
    "save_referent_file",
    "locate_tokens",
]

KINDS: tuple[str, ...] = ("gender", "number")

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
# its leading space.  A number template draws both nouns from one category.
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
    "singular": {"subj": " it", "obj": " it"},
    "plural": {"subj": " they", "obj": " them"},
}

# Templates written for this project.  {A} is the first mention, {B} the second,
# {subj}/{obj}/{poss} the pronoun.  Each placeholder follows a space, and the
# span of the filled word includes that space.  The sentences are written so
# that either mention is a plausible referent; agreement alone decides.
_GENDER_TEMPLATES: tuple[str, ...] = (
    "Yesterday {A} called {B} because {subj} needed help with the car.",
    "After lunch, {A} met {B} at the station, and {subj} was carrying a heavy suitcase.",
    "At the party, {A} talked with {B} for an hour before {subj} finally went home.",
    "In the morning, {A} had coffee with {B}, and {subj} talked about the new job for ages.",
    "During the meeting, {A} sat next to {B}, and everyone noticed that {poss} phone kept ringing.",
    "On Sunday, {A} and {B} went hiking, and {subj} took dozens of photos of the lake.",
    "When {A} visited {B} at the hospital, a nurse brought {obj} a cup of tea.",
    "The manager thanked {A} and {B}, and then gave {obj} a small bonus.",
    "On the train, {A} sat across from {B}, and a stranger asked {obj} for directions.",
    "At the market, {A} ran into {B}, and {poss} basket was full of fresh apples.",
    "Before the concert, {A} waited outside with {B}, and {subj} was wearing a bright red coat.",
    "After the game, {A} shook hands with {B}, and the crowd cheered for {obj} loudly.",
    "In the kitchen, {A} was cooking with {B} when {poss} sleeve caught fire.",
    "On the beach, {A} was reading next to {B} when a wave soaked {poss} towel.",
    "Late at night, {A} was chatting online with {B}, and afterwards {subj} could not sleep.",
    "At the library, {A} helped {B} find a book, and then {subj} left to catch the bus.",
    "Every summer, {A} visits {B} in the village, and the neighbours always invite {obj} to dinner.",
    "At the airport, {A} said goodbye to {B}, and {poss} flight was delayed by two hours.",
    "During the storm, {A} sheltered in a doorway with {B}, and the rain soaked {poss} shoes.",
    "At the office, {A} shares a desk with {B}, and the boss often asks {obj} to stay late.",
)

# Number templates: (noun category, template).  Only the two candidate nouns
# come before the pronoun, and every verb attached to a noun or to the pronoun
# has the same form in the singular and the plural (past tense, modals).
_NUMBER_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("animal", "Yesterday the {A} chased the {B} until {subj} got tired and lay down."),
    ("animal", "Today we fed the {A} before the {B}, because {subj} looked hungrier."),
    ("animal", "Last night the {A} slept beside the {B}, and I brushed {obj} gently afterwards."),
    ("animal", "Overnight the {A} frightened the {B}, so we checked on {obj} first."),
    ("animal", "When the {A} followed the {B} outside, {subj} started making a lot of noise."),
    ("animal", "Suddenly the {A} ran past the {B}, and I photographed {obj} from the gate."),
    ("object", "Yesterday we moved the {A} next to the {B} because {subj} blocked the door."),
    ("object", "Eventually we found the {A} under the {B}, and {subj} needed a good clean."),
    ("object", "I painted the {A} after the {B}, and {subj} dried overnight in the sun."),
    ("object", "Somebody left the {A} beside the {B}, so I carried {obj} into the garage."),
    ("object", "I cleaned the {A} and the {B}, but {subj} still looked dusty."),
    ("object", "We bought the {A} together with the {B}, and later I sold {obj} online."),
    ("vehicle", "Slowly the {A} overtook the {B}, and then {subj} turned left at the lights."),
    ("vehicle", "Patiently the {A} waited behind the {B} until {subj} finally moved."),
    ("vehicle", "Yesterday I washed the {A} and the {B}, and {subj} looked almost new afterwards."),
    ("vehicle", "Last week the {A} broke down near the {B}, so we repaired {obj} on the spot."),
)

_DRAWS_PER_COMBINATION = 3  # fills of each (template, order, class) combination
_GENERATION_SEED = 1729  # fixes the item SET; `seed` in referent_items only reorders it
_PLACEHOLDER = re.compile(r"\{(A|B|subj|obj|poss)\}")


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
    disjoint); a bad item raises :class:`StimulusError`."""

    text: str
    pronoun: Span
    antecedent: Span
    distractor: Span
    kind: str = "custom"

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise StimulusError("text must be a non-empty string")
        if not isinstance(self.kind, str) or not self.kind:
            raise StimulusError(f"kind must be a non-empty string, got {self.kind!r}")
        spans: dict[str, Span] = {}
        for field in ("pronoun", "antecedent", "distractor"):
            start, end = _as_span(getattr(self, field), field)
            if not 0 <= start < end <= len(self.text):
                if start >= end:
                    raise StimulusError(f"{field} span [{start}, {end}) is empty")
                raise StimulusError(
                    f"{field} span [{start}, {end}) is out of range for a text of "
                    f"{len(self.text)} characters"
                )
            if not self.text[start:end].strip():
                raise StimulusError(f"{field} span [{start}, {end}) covers only whitespace")
            object.__setattr__(self, field, (start, end))
            spans[field] = (start, end)
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
        return {
            "text": self.text,
            "pronoun": list(self.pronoun),
            "antecedent": list(self.antecedent),
            "distractor": list(self.distractor),
            "kind": self.kind,
        }


@dataclass(frozen=True)
class LocatedReferent:
    """An item's token ids and the TOKEN positions of its three words
    (already shifted by one when a BOS token was prepended)."""

    token_ids: tuple[int, ...]
    pronoun: int
    antecedent: int
    distractor: int
    kind: str


# --------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------


def _fill(template: str, words: dict[str, str], kind: str, antecedent_slot: str) -> ReferentItem:
    """Fill ``template``; ``words`` maps A, B and the pronoun role to words that
    carry their leading space (the template's space before the slot is dropped)."""
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
        kind=kind,
    )


def _role(template: str) -> str:
    roles = [m.group(1) for m in _PLACEHOLDER.finditer(template) if m.group(1) not in ("A", "B")]
    return roles[0]


def _generate_all() -> list[ReferentItem]:
    rng = random.Random(_GENERATION_SEED)
    items: list[ReferentItem] = []
    seen: set[str] = set()

    def add(make) -> None:
        for _ in range(100):  # redraw on the rare duplicate sentence
            item = make()
            if item.text not in seen:
                seen.add(item.text)
                items.append(item)
                return

    for template in _GENDER_TEMPLATES:
        role = _role(template)
        for antecedent_slot in ("A", "B"):
            for gender in ("male", "female"):
                for _ in range(_DRAWS_PER_COMBINATION):

                    def make(template=template, role=role, slot=antecedent_slot, gender=gender):
                        male, female = rng.choice(MALE_NAMES), rng.choice(FEMALE_NAMES)
                        antecedent, distractor = (male, female) if gender == "male" else (female, male)
                        a, b = (antecedent, distractor) if slot == "A" else (distractor, antecedent)
                        words = {"A": a, "B": b, role: _GENDER_PRONOUNS[gender][role]}
                        return _fill(template, words, "gender", slot)

                    add(make)

    for category, template in _NUMBER_TEMPLATES:
        role = _role(template)
        for antecedent_slot in ("A", "B"):
            for number in ("singular", "plural"):
                for _ in range(_DRAWS_PER_COMBINATION):

                    def make(template=template, role=role, slot=antecedent_slot, number=number, category=category):
                        (ant_sg, ant_pl), (dis_sg, dis_pl) = rng.sample(NOUNS[category], 2)
                        if number == "singular":
                            antecedent, distractor = ant_sg, dis_pl
                        else:
                            antecedent, distractor = ant_pl, dis_sg
                        a, b = (antecedent, distractor) if slot == "A" else (distractor, antecedent)
                        words = {"A": a, "B": b, role: _NUMBER_PRONOUNS[number][role]}
                        return _fill(template, words, "number", slot)

                    add(make)
    return items


_ALL_ITEMS: tuple[ReferentItem, ...] | None = None


def referent_items(n: int | None = None, seed: int = 0, kind: str | None = None) -> list[ReferentItem]:
    """The project's referent stimuli (more than 400 distinct sentences).

    The SET of sentences is fixed; ``seed`` only shuffles their order, and ``n``
    keeps the first ``n`` after that shuffle, so ``referent_items(n, seed)`` is
    ``referent_items(None, seed)[:n]``.  ``kind`` ("gender" or "number") keeps
    one kind only.
    """
    global _ALL_ITEMS
    if _ALL_ITEMS is None:
        _ALL_ITEMS = tuple(_generate_all())
    if kind is not None and kind not in KINDS:
        raise StimulusError(f"unknown referent kind {kind!r}; expected one of {', '.join(KINDS)}")
    pool = [item for item in _ALL_ITEMS if kind is None or item.kind == kind]
    random.Random(seed).shuffle(pool)
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
    spans) and an optional ``kind``.  Blank lines are skipped.  Any problem
    raises :class:`StimulusError` naming the file and line number."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise StimulusError(f"cannot read referent file {path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise StimulusError(f"referent file {path} is not UTF-8 text: {exc}") from exc
    items: list[ReferentItem] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise StimulusError(f"{where}: invalid JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise StimulusError(f"{where}: expected a JSON object, got {type(record).__name__}")
        missing = [field for field in _REQUIRED_FIELDS if field not in record]
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


def _find_token(
    text: str, span: Span, offsets: Sequence[tuple[int, int]], field: str, index: int, label: str
) -> int:
    start, end = span
    word = text[start:end]
    core_start = start + (len(word) - len(word.lstrip()))  # the span without leading whitespace
    hits = [i for i, (s, e) in enumerate(offsets) if s < end and e > core_start]
    if len(hits) != 1:
        unit = label[:-1] if len(hits) == 1 else label
        raise StimulusError(
            f"{field} {word!r} in item {index} is {len(hits)} {unit}; "
            f"{'pronouns' if field == 'pronoun' else 'names'} must be single tokens"
        )
    tok_start, tok_end = offsets[hits[0]]
    piece = text[tok_start:tok_end]
    tok_core_start = tok_start + (len(piece) - len(piece.lstrip()))
    if tok_core_start != core_start or tok_end != end:
        raise StimulusError(
            f"{field} {word!r} in item {index} does not line up with a token: the token "
            f"there is {piece!r}"
        )
    return hits[0]


def locate_tokens(
    items: Sequence[ReferentItem], tokenizer: Any, prepend_bos: bool
) -> list[LocatedReferent]:
    """Tokenize each item and find the single token of its pronoun, antecedent
    and distractor.

    A span matches the one token whose character offsets cover the same word,
    whether or not either includes the leading space.  A word split over
    several tokens, or a span that cuts a token, raises :class:`StimulusError`
    naming the item index and the word.  With ``prepend_bos`` the tokenizer's
    ``bos_token_id`` is put first and every position moves up by one.
    """
    bos: list[int] = []
    if prepend_bos:
        bos_id = getattr(tokenizer, "bos_token_id", None)
        if bos_id is None:
            raise StimulusError("prepend_bos=True but the tokenizer has no bos_token_id")
        bos = [int(bos_id)]
    label = _token_label(tokenizer)
    located: list[LocatedReferent] = []
    for index, item in enumerate(items):
        if not isinstance(item, ReferentItem):
            raise StimulusError(f"item {index} is a {type(item).__name__}, not a ReferentItem")
        ids, offsets = _encode_with_offsets(tokenizer, item.text)
        positions = {
            field: _find_token(item.text, getattr(item, field), offsets, field, index, label) + len(bos)
            for field in ("pronoun", "antecedent", "distractor")
        }
        located.append(
            LocatedReferent(
                token_ids=tuple(bos + [int(i) for i in ids]),
                pronoun=positions["pronoun"],
                antecedent=positions["antecedent"],
                distractor=positions["distractor"],
                kind=item.kind,
            )
        )
    return located
