"""Stimuli for attention-head studies.

* :mod:`headlens.analyses.stimuli.referent` -- pronoun -> antecedent sentences written for
  this project (gender and number agreement, in minimal pairs) and a JSONL format for
  user files; the word lists and frames are data in
  :mod:`headlens.analyses.stimuli.referent_frames`; :mod:`headlens.analyses.stimuli.referent_tokens`
  locates the pronoun / antecedent / distractor tokens and fits the items to a tokenizer
  (items whose words are not single tokens are dropped).
* :mod:`headlens.analyses.stimuli.natural` -- the project's original evaluation text and
  fixed-size token windows cut from it.
* :mod:`headlens.analyses.stimuli.random_tokens` -- seeded random token sequences repeated
  twice (induction / previous-token probes).

This module only re-exports; no submodule imports it.
"""

from __future__ import annotations

from headlens.analyses.stimuli.natural import eval_text, text_windows
from headlens.analyses.stimuli.random_tokens import random_repeated_tokens
from headlens.analyses.stimuli.referent import LocatedReferent, ReferentItem, load_referent_file, referent_items, referent_jsonl
from headlens.analyses.stimuli.referent_frames import FEMALE_NAMES, FRAMES, MALE_NAMES, NOUNS
from headlens.analyses.stimuli.referent_tokens import FittedReferents, fit_referent_items, locate_tokens
from headlens.probes.errors import StimulusError

__all__ = [
    "StimulusError",
    "ReferentItem",
    "LocatedReferent",
    "MALE_NAMES",
    "FEMALE_NAMES",
    "NOUNS",
    "FRAMES",
    "FittedReferents",
    "referent_items",
    "fit_referent_items",
    "load_referent_file",
    "referent_jsonl",
    "locate_tokens",
    "eval_text",
    "text_windows",
    "random_repeated_tokens",
]
