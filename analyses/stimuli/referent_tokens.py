"""Token positions of the referent stimuli: the single token of each item's pronoun, antecedent
and distractor (:func:`locate_tokens`), and the fit of a set of items to a tokenizer, which drops
the pairs that use a word the tokenizer splits (:func:`fit_referent_items`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from headlens.analyses.stimuli.referent import LocatedReferent, ReferentItem, Span, pair_units
from headlens.probes.errors import StimulusError

__all__ = ["MIN_ITEMS", "FittedReferents", "locate_tokens", "fit_referent_items"]

#: Fewer usable items than this (after dropping those a tokenizer cannot represent) is an error,
#: unless fewer were asked for in the first place.
MIN_ITEMS = 20

_FIELDS = ("pronoun", "antecedent", "distractor")


def _token_label(tokenizer: Any) -> str:
    name = f"{type(tokenizer).__name__} {getattr(tokenizer, 'name_or_path', '')}".lower()
    return "GPT-2 tokens" if "gpt2" in name else "tokens"


def _encode_with_offsets(tokenizer: Any, items: Sequence[Any]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Each item's ids and character offsets, in one tokenizer call (one call per sentence took
    0.2 ms each: 0.14 s for the census's 648); a :class:`StimulusError` names the first item that
    is not a :class:`ReferentItem`."""
    for index, item in enumerate(items):
        if not isinstance(item, ReferentItem):
            raise StimulusError(f"item {index} is a {type(item).__name__}, not a ReferentItem")
    if not items:
        return []
    try:
        encoding = tokenizer([item.text for item in items], add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, TypeError, ValueError) as exc:
        raise StimulusError("locate_tokens needs a fast tokenizer that supports return_offsets_mapping=True") from exc
    return [
        (list(ids), [(int(s), int(e)) for s, e in offsets])
        for ids, offsets in zip(encoding["input_ids"], encoding["offset_mapping"], strict=True)
    ]


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


def _find_token(text: str, span: Span, offsets: Sequence[tuple[int, int]], field: str, index: int, label: str) -> int:
    hits, ok = _match_token(text, span, offsets)
    if ok:
        return hits[0]
    word = text[span[0] : span[1]]
    if len(hits) != 1:
        unit = label[:-1] if len(hits) == 1 else label
        raise StimulusError(
            f"{field} {word!r} in item {index} is {len(hits)} {unit}; {'pronouns' if field == 'pronoun' else 'names'} must be single tokens"
        )
    tok_start, tok_end = offsets[hits[0]]
    raise StimulusError(f"{field} {word!r} in item {index} does not line up with a token: the token there is {text[tok_start:tok_end]!r}")


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
    for index, (item, (ids, offsets)) in enumerate(zip(items, _encode_with_offsets(tokenizer, items), strict=True)):
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
            "pairs": sum(1 for unit in pair_units(self.items) if len(unit) == 2),
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
    for item, (ids, offsets) in zip(items, _encode_with_offsets(tokenizer, items), strict=True):
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
    units = [unit for unit in pair_units(items) if all(encoded[i] is not None for i in unit)]
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
