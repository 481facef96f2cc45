"""The attention-equation check passes on real captures and fails on corrupted ones."""

from __future__ import annotations

import dataclasses

from headlens.analyses.heads.verify import VERIFY_WHAT, verify_attention, verify_capture
from headlens.probes.capture import capture
from headlens.probes.config import CaptureConfig


def test_verify_passes_on_tiny_model(tiny_model):
    table = verify_attention(tiny_model, ["Apple raised its price target.", "Hi there"], prepend_bos=True)
    assert list(table["layer"]) == [0, 1]
    assert table["ok"].all()
    assert (table[["max_err_pattern", "max_err_z", "max_row_sum_err"]].to_numpy() < 1e-5).all()


def test_verify_catches_wrong_pattern_and_mass_above_diagonal(tiny_model):
    cap = capture(tiny_model, ["one two three four"], CaptureConfig(what=VERIFY_WHAT))
    tensors = dict(cap.tensors)
    bad = tensors["blocks.1.attn.hook_pattern"].clone()
    bad[0, 2, 1, 3] = 0.25  # attention above the diagonal
    tensors["blocks.1.attn.hook_pattern"] = bad
    table = verify_capture(tiny_model, dataclasses.replace(cap, tensors=tensors))
    assert bool(table.loc[table.layer == 0, "ok"].item())
    row = table.loc[table.layer == 1].iloc[0]
    assert not row.ok and row.max_outside_mask == 0.25 and row.max_row_sum_err > 0.2


def test_verify_catches_wrong_z(tiny_model):
    cap = capture(tiny_model, ["one two three"], CaptureConfig(what=VERIFY_WHAT))
    tensors = dict(cap.tensors)
    tensors["blocks.0.attn.hook_z"] = tensors["blocks.0.attn.hook_z"] * 1.01
    table = verify_capture(tiny_model, dataclasses.replace(cap, tensors=tensors))
    assert not bool(table.loc[table.layer == 0, "ok"].item())
    assert table.loc[table.layer == 0, "max_err_z"].item() > 1e-4
