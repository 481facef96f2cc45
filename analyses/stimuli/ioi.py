"""The IOI stimuli after Wang et al. 2022 ("Interpretability in the Wild"): their 15 templates,
names, places and objects (data, written from the paper's dataset for this project).

Each template is the prompt up to the answer: ``{N1} and {N2}`` are the first two names, ``{S}``
the subject of the second clause (the repeated name, S2), ``{PLACE}`` and ``{OBJECT}`` the
nouns; the answer is the indirect object (IO), the one of ``N1``/``N2`` that is not ``S``.
**BABA** order: ``N1 = S``, ``N2 = IO`` ("Then, John and Mary went to the store. John gave a
drink to" -> " Mary"); **ABBA**: ``N1 = IO``, ``N2 = S`` ("Then, Mary and John ...").  Every
slot follows a space, so a word fills it as its leading-space token.
"""

from __future__ import annotations

__all__ = ["IOI_TEMPLATES", "IOI_NAMES", "IOI_PLACES", "IOI_OBJECTS", "ORDERS", "SLOTS"]

#: The 15 templates of Wang et al. 2022 (their BABA list; ABBA swaps the first two names).
IOI_TEMPLATES: tuple[str, ...] = (
    "Then, {N1} and {N2} went to the {PLACE}. {S} gave a {OBJECT} to",
    "Then, {N1} and {N2} had a lot of fun at the {PLACE}. {S} gave a {OBJECT} to",
    "Then, {N1} and {N2} were working at the {PLACE}. {S} decided to give a {OBJECT} to",
    "Then, {N1} and {N2} were thinking about going to the {PLACE}. {S} wanted to give a {OBJECT} to",
    "Then, {N1} and {N2} had a long argument, and afterwards {S} said to",
    "After {N1} and {N2} went to the {PLACE}, {S} gave a {OBJECT} to",
    "When {N1} and {N2} got a {OBJECT} at the {PLACE}, {S} decided to give it to",
    "When {N1} and {N2} got a {OBJECT} at the {PLACE}, {S} decided to give the {OBJECT} to",
    "While {N1} and {N2} were working at the {PLACE}, {S} gave a {OBJECT} to",
    "While {N1} and {N2} were commuting to the {PLACE}, {S} gave a {OBJECT} to",
    "After the lunch, {N1} and {N2} went to the {PLACE}. {S} gave a {OBJECT} to",
    "Afterwards, {N1} and {N2} went to the {PLACE}. {S} gave a {OBJECT} to",
    "Then, {N1} and {N2} had a long argument. Afterwards {S} said to",
    "The {PLACE} {N1} and {N2} went to had a {OBJECT}. {S} gave it to",
    "Friends {N1} and {N2} found a {OBJECT} at the {PLACE}. {S} gave it to",
)

#: The two name orders: which of the first two names is the subject.
ORDERS: tuple[str, ...] = ("ABBA", "BABA")
#: The slots of a template.
SLOTS: tuple[str, ...] = ("N1", "N2", "S", "PLACE", "OBJECT")

#: First names (after Wang et al.'s list); the task keeps those that are one token for the model.
IOI_NAMES: tuple[str, ...] = (
    "Aaron", "Adam", "Alan", "Alex", "Alice", "Amy", "Anderson", "Andre", "Andrew", "Andy", "Anna", "Anthony",
    "Arthur", "Austin", "Blake", "Brandon", "Brian", "Carter", "Charles", "Charlie", "Christian", "Christopher",
    "Clark", "Cole", "Collins", "Connor", "Crew", "Crystal", "Daniel", "David", "Dean", "Edward", "Elizabeth",
    "Emily", "Eric", "Eva", "Ford", "Frank", "George", "Georgia", "Graham", "Grant", "Henry", "Ian", "Jack",
    "Jacob", "Jake", "James", "Jamie", "Jane", "Jason", "Jay", "Jennifer", "Jeremy", "Jessica", "John",
    "Jonathan", "Jordan", "Joseph", "Joshua", "Justin", "Kate", "Kelly", "Kevin", "Kyle", "Laura", "Leon",
    "Lewis", "Lisa", "Louis", "Luke", "Madison", "Marco", "Marcus", "Maria", "Mark", "Martin", "Mary",
    "Matthew", "Max", "Michael", "Michelle", "Morgan", "Patrick", "Paul", "Peter", "Prince", "Rachel",
    "Richard", "River", "Robert", "Roman", "Rose", "Ruby", "Russell", "Ryan", "Sarah", "Scott", "Sean",
    "Simon", "Stephen", "Steven", "Sullivan", "Taylor", "Thomas", "Tyler", "Victoria", "Warren", "William",
)  # fmt: skip
#: Wang et al.'s places and objects.
IOI_PLACES: tuple[str, ...] = ("store", "garden", "restaurant", "school", "hospital", "office", "house", "station")
IOI_OBJECTS: tuple[str, ...] = ("ring", "kiss", "bone", "basketball", "computer", "necklace", "drink", "snack")
