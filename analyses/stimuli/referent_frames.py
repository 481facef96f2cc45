"""The referent stimuli's word lists and sentence frames (data, written for this project).

Names, nouns and pronouns are single GPT-2 tokens with their leading space; every frame holds
``{A}`` (first candidate), ``{B}`` (second) and one pronoun slot (``{subj}``, ``{obj}`` or
``{poss}``) after both.  :mod:`headlens.analyses.stimuli.referent` fills them into minimal pairs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "MALE_NAMES",
    "FEMALE_NAMES",
    "NOUNS",
    "GENDER_PRONOUNS",
    "NUMBER_PRONOUNS",
    "PLACEHOLDER",
    "Frame",
    "FRAMES",
    "PAIRS_PER_ORDER",
    "GENERATION_SEED",
]

KINDS: tuple[str, ...] = ("gender", "number")

# Unambiguously gendered first names; each is ONE GPT-2 token with its leading
# space.  Names that are also common words (Rose, Grace, Mark, Frank) or are
# used for either gender (Sam, Chris) are left out on purpose.
MALE_NAMES: tuple[str, ...] = (
    " John",
    " David",
    " Michael",
    " James",
    " Robert",
    " Peter",
    " Paul",
    " Kevin",
    " Brian",
    " Daniel",
    " George",
    " Jack",
    " Henry",
    " Eric",
    " Adam",
    " Richard",
    " Thomas",
    " Andrew",
    " Steve",
    " Tom",
)
FEMALE_NAMES: tuple[str, ...] = (
    " Mary",
    " Sarah",
    " Lisa",
    " Anna",
    " Emma",
    " Jessica",
    " Jennifer",
    " Susan",
    " Karen",
    " Laura",
    " Rachel",
    " Julia",
    " Rebecca",
    " Emily",
    " Linda",
    " Alice",
    " Helen",
    " Lucy",
    " Nancy",
    " Amy",
)

# (singular, plural) noun pairs by category; every form is ONE GPT-2 token with
# its leading space.  A number frame draws both nouns from one category.
NOUNS: dict[str, tuple[tuple[str, str], ...]] = {
    "animal": (
        (" dog", " dogs"),
        (" cat", " cats"),
        (" horse", " horses"),
        (" goat", " goats"),
        (" rabbit", " rabbits"),
        (" duck", " ducks"),
        (" cow", " cows"),
        (" pig", " pigs"),
        (" puppy", " puppies"),
        (" kitten", " kittens"),
    ),
    "object": (
        (" box", " boxes"),
        (" lamp", " lamps"),
        (" chair", " chairs"),
        (" table", " tables"),
        (" bottle", " bottles"),
        (" clock", " clocks"),
        (" bucket", " buckets"),
        (" basket", " baskets"),
        (" bench", " benches"),
        (" mirror", " mirrors"),
        (" bowl", " bowls"),
        (" crate", " crates"),
        (" barrel", " barrels"),
    ),
    "vehicle": (
        (" car", " cars"),
        (" truck", " trucks"),
        (" bus", " buses"),
        (" boat", " boats"),
        (" van", " vans"),
        (" bike", " bikes"),
        (" train", " trains"),
        (" ship", " ships"),
    ),
}

# Pronoun forms by role.  "her" serves as both object and possessive.
GENDER_PRONOUNS: dict[str, dict[str, str]] = {
    "male": {"subj": " he", "obj": " him", "poss": " his"},
    "female": {"subj": " she", "obj": " her", "poss": " her"},
}
NUMBER_PRONOUNS: dict[str, dict[str, str]] = {
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
        return next(m.group(1) for m in PLACEHOLDER.finditer(self.template) if m.group(1) not in ("A", "B"))


PLACEHOLDER = re.compile(r"\{(A|B|subj|obj|poss)\}")

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

PAIRS_PER_ORDER = 3  # pairs per (frame, candidate order): 12 items per frame
GENERATION_SEED = 1729  # fixes the item SET; `seed` in referent_items only reorders the pairs
