"""Stimuli for attention-head studies.

* :mod:`headlens.analyses.stimuli.referent` -- pronoun -> antecedent sentences written for
  this project (gender and number agreement, in minimal pairs), a JSONL loader for
  user files, token location of the pronoun / antecedent / distractor, and the fit
  to a tokenizer (items whose words are not single tokens are dropped).
* :mod:`headlens.analyses.stimuli.natural` -- the project's original evaluation text and
  fixed-size token windows cut from it.
* :mod:`headlens.analyses.stimuli.random_tokens` -- seeded random token sequences repeated
  twice (induction / previous-token probes).
"""

from __future__ import annotations

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
    "save_referent_file",
    "locate_tokens",
    "eval_text",
    "text_windows",
    "random_repeated_tokens",
]


from headlens.probes.errors import StimulusError  # noqa: E402  (re-exported; submodules import it from here)

from .natural import eval_text, text_windows  # noqa: E402
from .random_tokens import random_repeated_tokens  # noqa: E402
from .referent import (  # noqa: E402
    FEMALE_NAMES,
    FRAMES,
    MALE_NAMES,
    NOUNS,
    FittedReferents,
    LocatedReferent,
    ReferentItem,
    fit_referent_items,
    load_referent_file,
    locate_tokens,
    referent_items,
    save_referent_file,
)
