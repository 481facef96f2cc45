"""Tests for analyses.stimuli: referent sentences, the evaluation text, windows
and repeated random tokens.  The real GPT-2 tokenizer is built once per module."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from headlens.analyses.stimuli import (
    FEMALE_NAMES,
    FRAMES,
    MALE_NAMES,
    NOUNS,
    LocatedReferent,
    ReferentItem,
    StimulusError,
    eval_text,
    fit_referent_items,
    load_referent_file,
    locate_tokens,
    random_repeated_tokens,
    referent_items,
    referent_jsonl,
    text_windows,
)
from headlens.probes.outputs import write_text
from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

GPT2_BOS = 50256
GENDER_OF = {**{w: "male" for w in MALE_NAMES}, **{w: "female" for w in FEMALE_NAMES}}
NUMBER_OF = {
    **{sg: "singular" for pairs in NOUNS.values() for sg, _ in pairs},
    **{pl: "plural" for pairs in NOUNS.values() for _, pl in pairs},
}
PRONOUN_GENDERS = {" he": {"male"}, " him": {"male"}, " his": {"male"}, " she": {"female"}, " her": {"female"}}
PRONOUN_NUMBERS = {" it": {"singular"}, " its": {"singular"}, " they": {"plural"}, " them": {"plural"}, " their": {"plural"}}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_offline_gpt2_tokenizer(tmp_path_factory.mktemp("gpt2_tokenizer"))


@pytest.fixture(scope="module")
def items():
    return referent_items()


def _replace_word(item: ReferentItem, field: str, word: str) -> ReferentItem:
    """``item`` with the word at ``field`` replaced by ``word`` (later spans shifted)."""
    start, end = getattr(item, field)
    shift = len(word) - (end - start)
    spans = {}
    for name in ("pronoun", "antecedent", "distractor"):
        s, e = getattr(item, name)
        spans[name] = (start, start + len(word)) if name == field else ((s + shift, e + shift) if s >= end else (s, e))
    return ReferentItem(item.text[:start] + word + item.text[end:], kind=item.kind, frame=item.frame, pair=item.pair, **spans)


def _span_text(item: ReferentItem, field: str) -> str:
    start, end = getattr(item, field)
    return item.text[start:end]


# --------------------------------------------------------------------------
# Referent sentences
# --------------------------------------------------------------------------


def test_at_least_200_distinct_sentences_of_both_kinds(items):
    texts = [item.text for item in items]
    assert len(texts) >= 200
    assert len(set(texts)) == len(texts)
    kinds = Counter(item.kind for item in items)
    assert set(kinds) == {"gender", "number"}
    assert kinds["gender"] >= 100 and kinds["number"] >= 100


def test_name_lists():
    assert len(MALE_NAMES) >= 12 and len(FEMALE_NAMES) >= 12
    assert not set(MALE_NAMES) & set(FEMALE_NAMES)
    for name in MALE_NAMES + FEMALE_NAMES:
        assert name.startswith(" ") and name[1:].isalpha() and name[1].isupper()


def test_every_word_is_one_gpt2_token_with_leading_space(tok, items):
    words = set(MALE_NAMES) | set(FEMALE_NAMES) | set(NUMBER_OF) | set(PRONOUN_GENDERS) | set(PRONOUN_NUMBERS)
    for word in words:
        assert word.startswith(" ")
        assert len(tok.encode(word)) == 1, word
    # ... and in context: each span is exactly one token of the sentence.
    for item, loc in zip(items, locate_tokens(items, tok, prepend_bos=False), strict=True):
        assert list(loc.token_ids) == tok.encode(item.text)
        for field in ("pronoun", "antecedent", "distractor"):
            position = getattr(loc, field)
            assert tok.decode([loc.token_ids[position]]) == _span_text(item, field)


def test_spans_cover_the_words(items):
    for item in items:
        for field in ("pronoun", "antecedent", "distractor"):
            word = _span_text(item, field)
            assert word.startswith(" ") and word[1:].isalpha(), (item.text, field, word)
            _start, end = getattr(item, field)
            # whole words: the next character is not a letter
            assert end == len(item.text) or not item.text[end].isalpha()
        assert item.pronoun_text == _span_text(item, "pronoun")
        assert item.antecedent_text == _span_text(item, "antecedent")
        assert item.distractor_text == _span_text(item, "distractor")
        # the pronoun comes after both candidates
        assert item.pronoun[0] > item.antecedent[0] and item.pronoun[0] > item.distractor[0]


def test_agreement_picks_out_the_antecedent_only(items):
    for item in items:
        ant, dis, pro = item.antecedent_text, item.distractor_text, item.pronoun_text
        if item.kind == "gender":
            assert ant in GENDER_OF and dis in GENDER_OF, item.text
            assert GENDER_OF[ant] != GENDER_OF[dis]
            assert GENDER_OF[ant] in PRONOUN_GENDERS[pro]
            assert GENDER_OF[dis] not in PRONOUN_GENDERS[pro]
        else:
            assert item.kind == "number"
            assert ant in NUMBER_OF and dis in NUMBER_OF, item.text
            assert NUMBER_OF[ant] != NUMBER_OF[dis]
            assert NUMBER_OF[ant] in PRONOUN_NUMBERS[pro]
            assert NUMBER_OF[dis] not in PRONOUN_NUMBERS[pro]


def test_both_orders_occur_for_each_kind(items):
    for kind in ("gender", "number"):
        orders = Counter(item.antecedent_first for item in items if item.kind == kind)
        assert orders[True] > 0 and orders[False] > 0
        assert orders[True] == orders[False]  # nearest mention is right exactly half the time
    classes = Counter((item.kind, GENDER_OF.get(item.antecedent_text) or NUMBER_OF[item.antecedent_text]) for item in items)
    assert len(classes) == 4  # male, female, singular and plural antecedents all occur


def test_items_come_in_minimal_pairs(tok, items):
    """The two items of a pair differ only in the pronoun; antecedent and distractor swap."""
    by_pair: dict[str, list[ReferentItem]] = {}
    for item in items:
        assert item.pair and item.frame and item.pair.startswith(item.frame + ".")
        by_pair.setdefault(item.pair, []).append(item)
    assert len(by_pair) == len(items) // 2
    located = {item.text: loc for item, loc in zip(items, locate_tokens(items, tok, prepend_bos=True), strict=True)}
    for pair, (one, two) in by_pair.items():
        assert one.frame == two.frame and one.kind == two.kind
        assert one.antecedent == two.distractor and one.distractor == two.antecedent
        assert one.pronoun[0] == two.pronoun[0] and one.pronoun_text != two.pronoun_text
        assert one.text[: one.pronoun[0]] == two.text[: two.pronoun[0]]
        assert one.text[one.pronoun[1] :] == two.text[two.pronoun[1] :]
        a, b = located[one.text], located[two.text]
        assert (a.antecedent, a.distractor, a.pronoun) == (b.distractor, b.antecedent, b.pronoun)
        differ = [i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids, strict=False)) if x != y]
        assert len(a.token_ids) == len(b.token_ids) and differ == [a.pronoun], pair
    # within a shuffled list the two items of a pair are neighbours
    for first, second in zip(items[0::2], items[1::2], strict=True):
        assert first.pair == second.pair


def test_frames_cover_pronoun_roles_kinds_and_orders(items):
    assert len(FRAMES) == len({f.id for f in FRAMES}) >= 50
    assert len({f.template for f in FRAMES}) == len(FRAMES)
    roles = Counter((f.kind, f.role) for f in FRAMES)
    for kind in ("gender", "number"):
        for role in ("subj", "obj", "poss"):
            assert roles[kind, role] >= 5, (kind, role)
    per_frame = Counter(item.frame for item in items)
    assert set(per_frame) == {f.id for f in FRAMES} and set(per_frame.values()) == {12}
    for frame in FRAMES:
        mine = [item for item in items if item.frame == frame.id]
        first_class = Counter(
            GENDER_OF.get(_span_text(i, "antecedent" if i.antecedent_first else "distractor"))
            or NUMBER_OF[_span_text(i, "antecedent" if i.antecedent_first else "distractor")]
            for i in mine
        )
        assert len(first_class) == 2 and len(set(first_class.values())) == 1, frame.id  # both candidate orders, equally


def test_fit_referent_items_drops_whole_pairs_and_counts_words(tok, items):
    fitted = fit_referent_items(items, tok, wrap=([GPT2_BOS], []))
    assert fitted.dropped == 0 and fitted.items == list(items)
    assert [loc.token_ids for loc in fitted.located] == [loc.token_ids for loc in locate_tokens(items, tok, True)]
    # a pair with a name GPT-2 splits is dropped whole; the word is counted once per item that has it
    one, two = items[0], items[1]
    assert one.pair == two.pair
    word = " Bartholomew"
    bad = [_replace_word(one, "distractor", word)]
    assert bad[0].distractor_text == word and bad[0].pair == one.pair
    pool = [*bad, two, *list(items[2:40])]
    fitted = fit_referent_items(pool, tok, n=10)
    assert fitted.dropped == 2 and fitted.offered == 40
    assert fitted.dropped_words == {word: 1} and fitted.dropped_tokens[word] == len(tok.encode(word)) > 1
    assert fitted.items == list(items[2:12]) and len(fitted.located) == 10
    assert fitted.info()["dropped"] == 2 and fitted.info()["pairs"] == 5
    # n that would split a pair takes both items
    assert len(fit_referent_items(items[:20], tok, n=3).items) == 4
    # too few left: one line naming the counts and the word
    with pytest.raises(StimulusError, match=r"only 0 of 2 referent items .*' Bartholomew' \(\d tokens\)") as err:
        fit_referent_items([*bad, two], tok)
    assert "\n" not in str(err.value) and "single tokens" in str(err.value)
    # with more asked for than the minimum, fewer than MIN_ITEMS (20) left is an error too
    with pytest.raises(StimulusError, match=r"only 18 of 20 .*need at least 20"):
        fit_referent_items([*bad, two, *list(items[2:20])], tok)


def test_referent_items_seeding_and_n():
    first = referent_items(seed=0)
    assert referent_items(seed=0) == first
    reordered = referent_items(seed=1)
    assert reordered != first and set(reordered) == set(first)
    assert referent_items(10, seed=1) == reordered[:10]
    assert {item.kind for item in referent_items(kind="number")} == {"number"}
    with pytest.raises(StimulusError, match="only"):
        referent_items(len(first) + 1)
    with pytest.raises(StimulusError):
        referent_items(0)
    with pytest.raises(StimulusError, match="kind"):
        referent_items(kind="tense")


def test_locate_tokens_with_bos_shifts_positions(tok, items):
    plain = locate_tokens(items[:20], tok, prepend_bos=False)
    with_bos = locate_tokens(items[:20], tok, prepend_bos=True)
    for a, b in zip(plain, with_bos, strict=True):
        assert isinstance(b, LocatedReferent)
        assert b.token_ids[0] == GPT2_BOS and b.token_ids[1:] == a.token_ids
        assert (b.pronoun, b.antecedent, b.distractor) == (a.pronoun + 1, a.antecedent + 1, a.distractor + 1)


def test_locate_tokens_wrap_puts_prefix_and_suffix_around(tok, items):
    plain = locate_tokens(items[:6], tok, prepend_bos=False)
    wrapped = locate_tokens(items[:6], tok, wrap=([101, 102], [103]))
    for a, b in zip(plain, wrapped, strict=True):
        assert b.token_ids == (101, 102, *a.token_ids, 103)
        assert (b.pronoun, b.antecedent, b.distractor) == (a.pronoun + 2, a.antecedent + 2, a.distractor + 2)
        assert (b.frame, b.pair) == (a.frame, a.pair) != ("", "")


def test_locate_tokens_accepts_spans_without_the_leading_space(tok):
    text = "Yesterday John called Mary because she needed help with the car."
    with_space = ReferentItem(text, (34, 38), (21, 26), (9, 14), kind="gender")
    without_space = ReferentItem(text, (35, 38), (22, 26), (10, 14), kind="gender")
    assert with_space.antecedent_text == " Mary" and without_space.antecedent_text == "Mary"
    a, b = locate_tokens([with_space, without_space], tok, prepend_bos=False)
    assert (a.pronoun, a.antecedent, a.distractor) == (b.pronoun, b.antecedent, b.distractor) == (5, 3, 1)


def test_locate_tokens_rejects_multi_token_words(tok, items):
    text = "Yesterday John called Mary Ann because she needed help."
    bad = ReferentItem(text, (38, 42), (21, 30), (9, 14))
    with pytest.raises(StimulusError, match=r"antecedent ' Mary Ann' in item 3 is 2 GPT-2 tokens; names must be single tokens"):
        locate_tokens([items[0], items[1], items[2], bad], tok, prepend_bos=False)
    cut = ReferentItem(text, (38, 42), (21, 25), (9, 14))  # " Mar" cuts the token " Mary"
    with pytest.raises(StimulusError, match="item 0"):
        locate_tokens([cut], tok, prepend_bos=False)


# --------------------------------------------------------------------------
# Referent files
# --------------------------------------------------------------------------


def test_referent_file_round_trip(tmp_path, items):
    path = write_text(tmp_path / "items.jsonl", referent_jsonl(items[:25]))
    assert load_referent_file(path) == items[:25]
    # minimal records: no kind, blank lines ignored
    record = {"text": "Today Mary met John and he smiled.", "pronoun": [23, 26], "antecedent": [14, 19], "distractor": [5, 10]}
    path.write_text("\n" + json.dumps(record) + "\n\n", encoding="utf-8")
    (item,) = load_referent_file(path)
    assert item.kind == "custom" and item.antecedent_text == " John" and item.pronoun_text == " he"


GOOD = {"text": "Today Mary met John and he smiled.", "pronoun": [23, 26], "antecedent": [14, 19], "distractor": [5, 10]}


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "distractor"}), "missing field.*distractor"),
        (json.dumps({**GOOD, "pronoun": [23, 99]}), "out of range"),
        (json.dumps({**GOOD, "pronoun": [-1, 3]}), "out of range"),
        (json.dumps({**GOOD, "pronoun": [23, 23]}), "empty"),
        (json.dumps({**GOOD, "distractor": [8, 16]}), "overlaps"),
        (json.dumps({**GOOD, "pronoun": [23, "x"]}), "two integers"),
        (json.dumps({**GOOD, "pronoun": [19, 20]}), "whitespace"),
    ],
)
def test_referent_file_errors_name_the_line(tmp_path, bad_line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n" + bad_line + "\n", encoding="utf-8")
    with pytest.raises(StimulusError, match=f"line 3: .*{message}"):
        load_referent_file(path)


def test_referent_file_empty_or_missing(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(StimulusError, match="no items"):
        load_referent_file(empty)
    with pytest.raises(StimulusError, match="does not exist"):
        load_referent_file(tmp_path / "absent.jsonl")


def test_stimulus_error_is_a_value_error():
    assert issubclass(StimulusError, ValueError)


# --------------------------------------------------------------------------
# Evaluation text and windows
# --------------------------------------------------------------------------


def test_eval_text_size_and_variety(tok):
    text = eval_text()
    assert 20_000 <= len(text) <= 30_000
    assert 4_500 <= len(tok.encode(text)) <= 7_500
    assert text.count("\n\n") >= 50  # paragraphs
    assert text.count('"') >= 20  # dialogue
    assert "\n- " in text and "\n1. " in text  # lists
    assert sum(ch.isdigit() for ch in text) >= 100  # numbers


def test_text_windows_with_bos(tok):
    text = eval_text()
    ids = tok.encode(text)
    windows = text_windows(tok, text, window=128, n=None, prepend_bos=True, bos_id=None)
    assert windows.dtype == torch.long and windows.shape == (len(ids) // 127, 128)
    assert (windows[:, 0] == GPT2_BOS).all()
    assert windows[:, 1:].reshape(-1).tolist() == ids[: windows.shape[0] * 127]  # consecutive, no overlap
    assert torch.equal(text_windows(tok, text, 128, 5, True, None), windows[:5])  # deterministic prefix


def test_text_windows_without_bos_and_custom_bos(tok):
    text = eval_text()
    ids = tok.encode(text)
    windows = text_windows(tok, text, window=64, n=3, prepend_bos=False, bos_id=None)
    assert windows.shape == (3, 64)
    assert windows.reshape(-1).tolist() == ids[:192]
    custom = text_windows(tok, text, window=16, n=2, prepend_bos=True, bos_id=7)
    assert custom[:, 0].tolist() == [7, 7]


def test_text_windows_too_short(tok):
    short = "Only a handful of words here."
    count = len(tok.encode(short))
    with pytest.raises(StimulusError, match=f"has {count} tokens; need at least 127 for one window of 128"):
        text_windows(tok, short, window=128, n=None, prepend_bos=True, bos_id=None)
    with pytest.raises(StimulusError, match="requested"):
        text_windows(tok, eval_text(), window=1024, n=100, prepend_bos=True, bos_id=None)
    with pytest.raises(StimulusError):
        text_windows(tok, eval_text(), window=0, n=None, prepend_bos=False, bos_id=None)


# --------------------------------------------------------------------------
# Repeated random tokens
# --------------------------------------------------------------------------


def test_random_repeated_tokens_shape_and_repeat():
    tokens = random_repeated_tokens(n=4, T=50, seed=0, vocab_size=50257, exclude={GPT2_BOS})
    assert tokens.dtype == torch.long and tokens.shape == (4, 100)
    assert torch.equal(tokens[:, :50], tokens[:, 50:])
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 50257


def test_random_repeated_tokens_seeded():
    a = random_repeated_tokens(3, 20, 1, 50257, {GPT2_BOS})
    b = random_repeated_tokens(3, 20, 1, 50257, {GPT2_BOS})
    c = random_repeated_tokens(3, 20, 2, 50257, {GPT2_BOS})
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_random_repeated_tokens_never_draws_excluded_ids():
    # a tiny vocabulary makes any leak of an excluded id near certain to show
    tokens = random_repeated_tokens(20, 200, 0, 10, {0, 3, 9})
    assert set(tokens.unique().tolist()) == {1, 2, 4, 5, 6, 7, 8}
    big = random_repeated_tokens(8, 500, 3, 50257, {GPT2_BOS})
    assert not (big == GPT2_BOS).any()


def test_random_repeated_tokens_bad_input():
    with pytest.raises(StimulusError):
        random_repeated_tokens(0, 5, 0, 100, set())
    with pytest.raises(StimulusError):
        random_repeated_tokens(2, 0, 0, 100, set())
    with pytest.raises(StimulusError, match="excluded"):
        random_repeated_tokens(2, 5, 0, 3, {0, 1, 2})
