# pyright: reportArgumentType=false, reportCallIssue=false
# (these tests pass strings, lists and single values where the signatures declare tuples: the studies coerce them)
"""One head-list parser everywhere a head list is accepted (issue 28 item 5):
``headlens.patch(model, receivers="1.3")`` raised a raw ``ValueError: not enough values to unpack``
(probes/loading.py), and "1.3,1.2", ["1.3"] and (1, 3) failed too; only [(1, 3)] worked."""

from __future__ import annotations

import pytest

import headlens
from headlens.analyses.measure.masks import parse_head, parse_heads
from headlens.analyses.patching.activation import PatchConfig
from headlens.analyses.patching.path import PathConfig, check_receivers
from headlens.analyses.sinks.config import SinkConfig
from headlens.probes import head_lists
from headlens.probes.errors import InputError
from headlens.probes.head_lists import as_heads
from headlens.probes.loading import check_layers_heads

SPELLINGS = [
    ("1.0", ((1, 0),)),
    ("1.0,1.1", ((1, 0), (1, 1))),
    (["1.0"], ((1, 0),)),
    (["1.0", "1.1"], ((1, 0), (1, 1))),
    ((1, 0), ((1, 0),)),
    ([(1, 0)], ((1, 0),)),
    ([[1, 0], (1, 1)], ((1, 0), (1, 1))),
    (((1, 0), (1, 1)), ((1, 0), (1, 1))),
]


@pytest.mark.parametrize(("value", "heads"), SPELLINGS)
def test_every_spelling_of_a_head_list_is_the_same_heads(value, heads, tiny_model):
    assert as_heads(value, name="receivers") == heads
    assert check_receivers(tiny_model, value) == list(heads)
    assert PathConfig(receivers=value).receivers == heads
    assert PatchConfig(heads=value).heads == heads
    assert SinkConfig(heads=value).heads == heads
    assert list(check_layers_heads(tiny_model, None, value).items()) == [(1, sorted(h for _, h in heads))]


@pytest.mark.parametrize(
    ("value", "names"), [("1.3", {"1.3"}), ("1.3,1.2", {"1.3", "1.2"}), (["1.3"], {"1.3"}), ((1, 3), {"1.3"}), ([(1, 3)], {"1.3"})]
)
def test_patch_takes_every_spelling_of_receivers(value, names, tiny_model):
    """The issue's spellings, through the study call (the tiny model has heads 0.0 .. 1.3)."""
    result = headlens.patch(tiny_model, builtin="induction", n_pairs=4, n_resamples=10, receivers=value, directions="denoising")
    assert result.path_patching is not None and set(result.path_patching["receiver"]) == names
    bad = value.replace("3", "7") if isinstance(value, str) else (1, 7)
    with pytest.raises(InputError, match=r"head 1\.7: head 7 is out of range"):
        headlens.patch(tiny_model, builtin="induction", n_pairs=4, receivers=bad)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("1.x", "receivers='1.x': '1.x' is not a head"),
        ("1.3,", "receivers='1.3,': empty item"),
        (3, "receivers=3 is not a head list"),
        ([(1, -3)], "receivers=[(1, -3)]: (1, -3) is not a head"),
        ([True, 1], "is not a head"),
    ],
)
def test_a_bad_head_list_is_one_line_naming_the_parameter(value, words):
    with pytest.raises(InputError) as err:
        as_heads(value, name="receivers")
    assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InputError, match="receivers"):
        headlens.patch("no-such-model-folder", builtin="induction", receivers=value)


def test_the_study_keywords_and_the_mask_parser_are_the_one_parser(tiny_model):
    assert parse_head is head_lists.parse_head and parse_heads is head_lists.parse_heads
    for value in ("0.1,1.0", ["0.1", "1.0"], [(0, 1), (1, 0)]):
        result = headlens.ablate(tiny_model, heads=value, n_windows=2, window=16, n_bootstrap=10, attribution=False)
        assert sorted(zip(result.table["layer"], result.table["head"], strict=True)) == [(0, 1), (1, 0)]
    result = headlens.ablate(tiny_model, heads=(0, 1), n_windows=2, window=16, n_bootstrap=10, attribution=False)
    assert list(zip(result.table["layer"], result.table["head"], strict=True)) == [(0, 1)]
    with pytest.raises(InputError, match=r"^ablate: heads='0\.x'"):
        headlens.ablate(tiny_model, heads="0.x")
