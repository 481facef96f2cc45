"""The sequences ``sinks --lengths`` reads: how they are cut from one long text, checked before any forward.

One long text (the given documents joined by a blank line, in order; by default headlens'
evaluation text) is tokenized once, without special tokens.  A sequence of ``length`` tokens
is the model's framing around a slice of it: ``prefix_ids + text_ids[offset : offset + body]
+ suffix_ids`` with ``body = length - len(prefix_ids) - len(suffix_ids)`` (the length counts
BOS, or an encoder's ``[CLS]`` and ``[SEP]``), and sequence ``s`` starts at ``offset = s *
body``: the sequences of one length follow one another in the text, and every length starts
again at token 0.  :func:`cut_plan` writes exactly this into the manifest so a reader can
rebuild every sequence by hand.

:func:`check_lengths` runs every check that needs no forward pass (lengths against the
framing, the context and the text); the CLI calls it for every BOS setting before the first
forward, so bad input never costs a pass.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from headlens.analyses.stimuli.natural import EVAL_TEXT_RESOURCE, eval_text
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel

__all__ = ["LongText", "MIN_TEXT_TOKENS", "long_text", "check_lengths", "cut_plan", "sequence_ids"]

log = logging.getLogger(__name__)

#: Text tokens each sequence must hold besides the framing's special tokens.
MIN_TEXT_TOKENS = 2

#: What joins the given documents into one text.
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class LongText:
    """The tokenized text, where it came from, and the framing of one BOS setting."""

    ids: list[int]
    source: str
    sha256: str
    prefix: list[int]
    suffix: list[int]
    framing: dict[str, Any]

    @property
    def n_special(self) -> int:
        return len(self.prefix) + len(self.suffix)


def _special_words(text: LongText, prepend_bos: bool) -> str:
    n = text.n_special
    names = " ".join([*text.framing.get("prefix", []), "...", *text.framing.get("suffix", [])]) if n else ""
    what = f"{'BOS' if prepend_bos else 'no-BOS'} framing"
    return f"{n} special token{'s' if n != 1 else ''} ({what}{': ' + names if names else ''})"


def long_text(model: LoadedModel, documents: Sequence[str] | None, prepend_bos: bool) -> LongText:
    """Tokenize the study's text once (no special tokens) and read the model's framing
    (:meth:`LoadedModel.frame`)."""
    if documents:
        text = SEPARATOR.join(documents)
        source = f"{len(documents)} given documents joined in order by a blank line"
    else:
        text = eval_text()
        source = f"headlens' evaluation text (package data analyses/{EVAL_TEXT_RESOURCE}, as shipped)"
    ids = [int(t) for t in model.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]]
    prefix, suffix = model.frame(prepend_bos)
    framing = model.framing(prepend_bos)
    return LongText(
        ids=ids,
        source=source,
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        prefix=[int(t) for t in prefix],
        suffix=[int(t) for t in suffix],
        framing=framing,
    )


def check_lengths(model: LoadedModel, lengths: Sequence[int], n_sequences: int, eps: float, text: LongText, prepend_bos: bool) -> None:
    """Every check that needs no forward pass; an :class:`InputError` naming the flag and both numbers."""
    if not lengths:
        raise InputError("lengths is empty")
    if n_sequences < 1:
        raise InputError(f"n_long must be at least 1, got {n_sequences}")
    if not 0 < eps < 1:
        raise InputError(f"eps must be strictly between 0 and 1, got {eps}")
    shortest = text.n_special + MIN_TEXT_TOKENS
    for n in lengths:
        if n < shortest:
            held = max(n - text.n_special, 0)
            raise InputError(
                f"lengths={n} holds {held} text token{'s' if held != 1 else ''} beside {_special_words(text, prepend_bos)}; "
                f"each sequence needs at least {MIN_TEXT_TOKENS} text tokens, so lengths= must be at least {shortest}"
            )
        if n > model.n_ctx:
            raise InputError(f"lengths={n} is beyond the model's context of {model.n_ctx} tokens")
    longest = max(lengths)
    body = longest - text.n_special
    need = n_sequences * body
    if need > len(text.ids):
        raise InputError(
            f"lengths={longest} needs {need} text tokens ({n_sequences} sequence(s) of {body}); the text has only {len(text.ids)}"
        )


def sequence_ids(text: LongText, length: int, index: int) -> list[int]:
    """Sequence ``index`` of ``length`` tokens: the framing around the next slice of the text."""
    body = length - text.n_special
    return text.prefix + text.ids[index * body : (index + 1) * body] + text.suffix


def cut_plan(text: LongText, lengths: Sequence[int], n_sequences: int, prepend_bos: bool) -> dict[str, Any]:
    """The manifest's record of how the sequences were cut (see the module docstring)."""
    return {
        "text": text.source,
        "text_sha256": text.sha256,
        "text_tokens": len(text.ids),
        "tokenized_as": "tokenizer(text, add_special_tokens=False)",
        "prepend_bos": prepend_bos,
        "framing": text.framing,
        "length_counts_special_tokens": True,
        "sequence": "prefix_ids + text_ids[offset : offset + text_tokens_per_sequence] + suffix_ids",
        "cuts": {
            str(n): {"text_tokens_per_sequence": n - text.n_special, "offsets": [s * (n - text.n_special) for s in range(n_sequences)]}
            for n in lengths
        },
    }
