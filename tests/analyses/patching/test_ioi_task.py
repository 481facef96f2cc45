"""The built-in ``ioi`` task on the tiny GPT-2 (its real tokenizer): aligned positions, IO and S
by order, the ABC corruption, seeding, the refusal, and the patch call that reads it."""

from __future__ import annotations

import pytest
import torch

import headlens
from headlens.analyses.patching import ioi_task as ioi_module
from headlens.analyses.patching.builtin import BUILTIN_TASKS, builtin_task
from headlens.analyses.patching.config import BUILTINS
from headlens.analyses.patching.ioi_task import MIN_NAMES, ioi_pairs
from headlens.analyses.stimuli.ioi import IOI_TEMPLATES
from headlens.probes.errors import InputError


def test_registered_everywhere():
    assert BUILTINS == tuple(BUILTIN_TASKS)
    assert "ioi" in BUILTINS


def test_positions_align_and_only_the_names_differ(tiny_model):
    p = ioi_pairs(tiny_model, n=30, seed=1)
    t = p.task
    assert t.clean.shape == t.corrupt.shape
    for i in range(len(t)):
        slots = {int(p.io[i]), int(p.s1[i]), int(p.s2[i])}
        assert len(slots) == 3 and int(p.end[i]) == int(t.lengths[i]) - 1
        differ = set(torch.nonzero(t.clean[i] != t.corrupt[i]).flatten().tolist())
        assert differ == slots  # same template, place and object; every name slot replaced
        assert int(p.s1[i]) < int(p.s2[i]) < int(p.end[i])


def test_io_and_s_swap_by_order(tiny_model):
    p = ioi_pairs(tiny_model, n=30, seed=2)
    t = p.task
    assert p.orders.count("ABBA") == p.orders.count("BABA") == 15
    for i, order in enumerate(p.orders):
        io, s1, s2 = int(p.io[i]), int(p.s1[i]), int(p.s2[i])
        assert (io < s1) == (order == "ABBA")
        assert int(t.correct[i]) == int(t.clean[i, io]) != int(t.incorrect[i])
        assert int(t.incorrect[i]) == int(t.clean[i, s1]) == int(t.clean[i, s2])


def test_corruption_uses_three_unrelated_names(tiny_model):
    p = ioi_pairs(tiny_model, n=30, seed=3)
    t = p.task
    for i in range(len(t)):
        new = [int(t.corrupt[i, int(pos[i])]) for pos in (p.io, p.s1, p.s2)]
        assert len(set(new)) == 3
        assert not set(new) & {int(t.correct[i]), int(t.incorrect[i])}


def test_seeded_and_recorded(tiny_model):
    a, b = ioi_pairs(tiny_model, n=8, seed=0).task, ioi_pairs(tiny_model, n=8, seed=0).task
    assert a.fingerprint() == b.fingerprint() != ioi_pairs(tiny_model, n=8, seed=1).task.fingerprint()
    d = a.describe()
    assert d["templates"] == list(IOI_TEMPLATES) and len(d["templates"]) == 15
    assert d["orders"] == {"ABBA": 4, "BABA": 4} and d["corruption"].startswith("ABC")
    assert " Mary" not in d["names"] and "Mary" in d["names"]  # the words, each one token with its space
    assert builtin_task(tiny_model, "ioi", n=8).fingerprint() == a.fingerprint()


def test_refuses_too_few_single_token_names(tiny_model, monkeypatch):
    monkeypatch.setattr(ioi_module, "IOI_NAMES", ("Mary", "John", "Tom", "Anna", "Xzqwvbnaame"))
    with pytest.raises(InputError) as info:
        ioi_pairs(tiny_model, n=4)
    message = str(info.value)
    assert f"at least {MIN_NAMES} single-token names" in message and "it has 4 names" in message and "\n" not in message


def test_patch_reads_the_ioi_task(tiny_model):
    pt = headlens.patch(tiny_model, builtin="ioi", n_pairs=4, n_resamples=0, directions=("denoising",))
    assert len(pt.table) == tiny_model.n_layers * tiny_model.n_heads
    assert pt.manifest["patching"]["task"]["task"] == "ioi"
    assert pt.manifest["patching"]["task"]["orders"] == {"ABBA": 2, "BABA": 2}
