"""Patched rows (probes/reader_rows.py): the same rows on the fast path and through the bridge, how each chunks them,
and a control that misses its base row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headlens.analyses.circuits.hooks import edge_flags
from headlens.analyses.patching.builtin import induction_task
from headlens.probes.hooks import attached
from headlens.probes.reader_rows import BaseRows, ControlMismatch, Read, ReaderRows, readout_hook, row_forwards

#: the fast blocks against the bridge's forwards (float32, the same weights, other kernels).
ROUNDING_ATOL = 1e-5


def _read(h, ids):
    """A value of each row's head input (its first three components: the normed stream's sum is 0)."""
    return h[:, :3].sum(-1)


def _bases(model):
    """Three base rows of unequal lengths: their values (``_read`` of the head's input at the last position) and the
    streams entering both blocks, from one bridge forward."""
    tokens = induction_task(model, n=3, T=8).clean
    lengths = torch.tensor([tokens.shape[1], tokens.shape[1] - 3, tokens.shape[1] - 1])
    got: dict = {}

    def keep(name):
        def fn(x, hook=None):
            got[name] = x.detach().clone()

        return fn

    hooks = [(f"blocks.{i}.hook_resid_pre", keep(i)) for i in range(model.n_layers)] + [readout_hook(lengths - 1, got)]
    with torch.inference_mode(), attached(model.bridge, hooks):
        model.bridge(tokens, return_type="logits")
    values = _read(got["h"], None).double()
    return BaseRows(ids=np.array([10, 11, 12]), tokens=tokens, lengths=lengths, values=values, streams={i: got[i] for i in range(2)})


def _rows(model, n_bases):
    """One row of each reader kind at each block (and the logits), on base rows taken in turn, random changes."""
    readers = [(0, "q", 1), (0, "k", 3), (0, "mlp", -1), (1, "v", 2), (1, "mlp", -1), (model.n_layers, "logits", -1)]
    n, pos, d_model = len(readers), 15, int(model.bridge.cfg.d_model)
    deltas = torch.randn(n_bases, 2, pos, d_model, generator=torch.Generator().manual_seed(0))
    return ReaderRows(base=np.arange(n) % n_bases, layer=np.array([r[0] for r in readers]), which=np.array([r[1] for r in readers]),
                      slot=np.array([r[2] for r in readers]), change=np.arange(n) % 2, deltas=deltas)  # fmt: skip


def test_the_fast_path_and_the_bridge_give_the_same_rows(family_model):
    """Every reader kind on GPT-2: the fast pass (one chunk, every block) and the bridge (one forward per start block,
    from the stored streams) give the same values, each measured from the unpatched one the path says."""
    model = family_model("gpt2")
    bases = _bases(model)
    fw = row_forwards(model, Read(last=_read), head_sum_norm=False)
    assert fw.fast is not None and fw.why_not == "" and fw.late
    rows = _rows(model, 3)
    starts = fw.starts(rows.layer)
    assert fw.streams(starts) == [0] and fw.chunks(starts, 8, 3) == [(0, 5), (5, 6)]
    with torch.inference_mode():
        fast = fw.run(rows, bases)
    fw.fast, fw.why_not = None, "asked"
    starts = fw.starts(rows.layer)
    assert starts.tolist() == [0, 0, 0, 1, 1, 1] and fw.streams(starts) == [1]
    assert fw.chunks(starts, 2, 3) == [(0, 2), (2, 3), (3, 5), (5, 6)]  # one start block per forward
    with torch.inference_mode(), edge_flags(model):
        bridge = [fw.run(ReaderRows(**{**rows.__dict__, **_part(rows, a, b)}), bases) for a, b in [(0, 3), (3, 6)]]
    values = torch.cat([b.values for b in bridge])
    assert not torch.allclose(values, bases.values[torch.from_numpy(rows.base)], atol=1e-3)  # the changes moved every row
    torch.testing.assert_close(fast.values, values, atol=ROUNDING_ATOL, rtol=0)
    torch.testing.assert_close(fast.reference, bases.values[torch.from_numpy(rows.base)], atol=ROUNDING_ATOL, rtol=0)
    assert fast.late and bridge[1].late and not bridge[0].late
    assert fast.forwards == pytest.approx((3 * 2 + 2 * 1 + 0) / 2 + 3)  # rows' blocks over n_layers, and 3 controls
    assert bridge[1].forwards == pytest.approx(3 * 1 / 2)


def _part(rows, a, b):
    return {k: getattr(rows, k)[a:b] for k in ("base", "layer", "which", "slot", "change")}


def test_a_control_that_misses_its_base_row_is_refused(family_model):
    model = family_model("gpt2")
    bases = _bases(model)
    off = BaseRows(**{**bases.__dict__, "values": bases.values + 1.0})
    fw = row_forwards(model, Read(last=_read), head_sum_norm=False)
    with torch.inference_mode(), pytest.raises(ControlMismatch, match=r"pair 1[012]: "):
        fw.run(_rows(model, 3), off)


def test_a_read_needs_exactly_one_way():
    with pytest.raises(ValueError, match="exactly one"):
        Read()
    with pytest.raises(ValueError, match="exactly one"):
        Read(last=_read, run=lambda run, tokens, lengths, ids: tokens.sum(-1))
