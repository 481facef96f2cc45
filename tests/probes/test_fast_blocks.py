"""The fast path of patched rows (probes/fast_blocks.py) against the same forwards through the bridge: the controls'
head input, each kind of joining row, the norms and MLPs to the bit, rows that stop; and why a model gets no fast blocks.
Under exact patching: tests/analyses/circuits/test_exact.py.
"""

from __future__ import annotations

import pytest
import torch

from headlens.analyses.circuits.hooks import edge_flags
from headlens.analyses.patching.builtin import induction_task
from headlens.probes.fast_blocks import FastBlocks, Join, Rows, fast_blocks
from headlens.probes.hooks import attached

#: fast blocks against the bridge's forwards (float32, the same weights, other kernels).
ROUNDING_ATOL = 1e-5


def _noop(x, hook=None):
    return None


def test_fast_blocks_say_why_not(family_model):
    """Another family, another metric, a head-sum norm, a hook on the model: no fast blocks, and the reason."""
    gpt2, llama = family_model("gpt2"), family_model("llama")
    assert fast_blocks(gpt2, last_only=True, head_sum_norm=False)[0] is not None
    assert "'llama'" in fast_blocks(llama, last_only=True, head_sum_norm=False)[1]
    assert "logit-diff" in fast_blocks(gpt2, last_only=False, head_sum_norm=False)[1]
    assert "norm after the head sum" in fast_blocks(gpt2, last_only=True, head_sum_norm=True)[1]
    with attached(gpt2.bridge, [("blocks.1.attn.hook_z", _noop)]):
        assert fast_blocks(gpt2, last_only=True, head_sum_norm=False) == (None, "hooks attached to the model")
    assert fast_blocks(gpt2, last_only=True, head_sum_norm=False)[0] is not None  # the hook is gone
    config = gpt2.bridge.original_model.config
    try:  # the bridge scales GPT-2's scores whatever this says: unscaled fast blocks would miss every control
        config.scale_attn_weights = False
        assert "scale_attn_weights=False" in fast_blocks(gpt2, last_only=True, head_sum_norm=False)[1]
    finally:
        config.scale_attn_weights = True


def test_run_reproduces_the_bridges_head_input(family_model):
    """Controls from block 0 give the output head's input of a bridge forward at each row's last position; rows that
    join at each block (and after the last) with a zero difference give their controls' values."""
    model = family_model("gpt2")
    bridge = model.bridge
    own = FastBlocks(model)
    tokens = induction_task(model, n=3, T=8).clean
    last = torch.tensor([tokens.shape[1] - 1, 4, 9])
    got: dict[str, torch.Tensor] = {}

    def keep(name):
        def fn(x, hook=None):
            got[name] = x.detach().clone()

        return fn

    with torch.inference_mode(), attached(bridge, [(n, keep(n)) for n in ("blocks.0.hook_resid_pre", "unembed.hook_in")]):
        bridge(tokens, return_type="logits")
    want = got["unembed.hook_in"][torch.arange(3), last]
    d_model, pos = want.shape[-1], tokens.shape[1]
    zeros = torch.zeros(2, pos, d_model)
    joins = [
        Join(0, attn=Rows(torch.tensor([0, 2]), zeros, torch.tensor([0, 2]), torch.tensor([1, 3]))),
        Join(1, mlp=Rows(torch.tensor([1, 1]), zeros)),
        Join(model.n_layers, logits=Rows(torch.tensor([2, 0]), zeros)),
    ]
    with torch.inference_mode():
        h = own.run(got["blocks.0.hook_resid_pre"], last, joins)
    assert h.shape == (3 + 6, d_model)
    torch.testing.assert_close(h[:3], want, atol=ROUNDING_ATOL, rtol=0)
    torch.testing.assert_close(h[3:], h[torch.tensor([0, 2, 1, 1, 2, 0])], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="sorted by layer"):
        own.run(got["blocks.0.hook_resid_pre"], last, joins[::-1])


def test_joined_rows_are_the_bridges_forward_with_the_same_patch(family_model):
    """Each kind of joining row with a random difference (q, k, v of a head at blocks 0 and 1, the MLP at both, the
    logits) against a bridge forward with edge flags on and the difference added at that reader's hook point."""
    model = family_model("gpt2")
    bridge, n_l = model.bridge, model.n_layers
    own = FastBlocks(model)
    tokens = induction_task(model, n=2, T=8).clean
    n, pos, d_model = tokens.shape[0], tokens.shape[1], int(bridge.cfg.d_model)
    last = torch.tensor([pos - 1, pos - 4])
    gen = torch.Generator().manual_seed(0)
    cases = [(0, "q", 1), (0, "k", 3), (1, "v", 2), (1, "q", 0), (0, "mlp", None), (1, "mlp", None), (n_l, "logits", None)]
    got: dict[str, torch.Tensor] = {}

    def keep(name):
        def fn(x, hook=None):
            got[name] = x.detach().clone()

        return fn

    joins, want = [], []
    for layer, which, slot in cases:
        delta = torch.randn(n, pos, d_model, generator=gen)
        if which in ("q", "k", "v"):
            name = f"blocks.{layer}.attn.hook_{which}_input"

            def add_slot(x, hook=None, d=delta, s=slot):
                x = x.clone()
                x[:, :, s] += d
                return x

            add = add_slot

            rows = Rows(torch.arange(n), delta, torch.full((n,), "qkv".index(which)), torch.full((n,), slot))
            joins.append(Join(layer, attn=rows))
        else:
            name = f"blocks.{layer}.hook_mlp_in" if which == "mlp" else f"blocks.{n_l - 1}.hook_resid_post"

            def add_all(x, hook=None, d=delta):
                return x + d

            add = add_all

            joins.append(
                Join(layer, mlp=Rows(torch.arange(n), delta)) if which == "mlp" else Join(layer, logits=Rows(torch.arange(n), delta))
            )
        with torch.inference_mode(), edge_flags(model), attached(bridge, [(name, add), ("unembed.hook_in", keep("h"))]):
            bridge(tokens, return_type="logits")
        want.append(got["h"][torch.arange(n), last])
    with torch.inference_mode(), attached(bridge, [("blocks.0.hook_resid_pre", keep("x0"))]):
        bridge(tokens, return_type="logits")
    for i, j in enumerate(joins):  # one join per run: each case's rows alone after the controls
        with torch.inference_mode():
            h = own.run(got["x0"], last, [j])
        assert not torch.allclose(h[n:], h[:n], atol=1e-3), cases[i]  # the difference moved the head's input
        torch.testing.assert_close(h[n:], want[i], atol=ROUNDING_ATOL, rtol=0, msg=lambda m, c=cases[i]: f"{c}: {m}")


def test_norms_and_mlps_are_the_bridges_to_the_bit(family_model):
    """The norm arithmetic copied from the bridge and the MLP called from its Conv1Ds give the bridge's own outputs bit for
    bit (the controls' check would catch a drift only at its tolerance)."""
    model = family_model("gpt2")
    own = FastBlocks(model)
    x = torch.randn(5, 7, model.bridge.cfg.d_model, generator=torch.Generator().manual_seed(0)) * 3
    with torch.inference_mode():
        for layer, blk in enumerate(model.bridge.blocks):
            assert torch.equal(own.ln1[layer](x), blk.ln1(x)) and torch.equal(own.ln2[layer](x), blk.ln2(x))
            assert torch.equal(own._mlp(layer, x), blk.mlp(blk.ln2(x)))
        assert torch.equal(own.ln_final(x), model.bridge.ln_final(x))


def test_rows_that_stop_and_rows_that_go_on_in_one_run(family_model, monkeypatch):
    """Rows with a zero difference beside rows with a random one, at every block and after the last, in one run.  A zero
    row may stop where it joins (its patched head's output, or its MLP's, is its control's to the bit; whether the bits
    agree depends on how the BLAS rounds a row at its place in the batch, so which zero rows stop is read off the run);
    a row with a difference never stops.  The rows that go on are the bridge's forward with their patch, the rows that
    stopped are their control's output to the bit, and rows did stop at both blocks (the bookkeeping of places and
    controls after rows leave is what is checked)."""
    model = family_model("gpt2")
    bridge, n_l = model.bridge, model.n_layers
    assert n_l == 2  # a join at block 0, one at the last block, one after it
    own = FastBlocks(model)
    tokens = induction_task(model, n=3, T=8).clean
    n, pos, d_model = tokens.shape[0], tokens.shape[1], int(bridge.cfg.d_model)
    last = torch.tensor([pos - 1, pos - 4, pos - 2])
    gen = torch.Generator().manual_seed(1)
    got: dict[str, torch.Tensor] = {}

    def keep(name):
        def fn(x, hook=None):
            got[name] = x.detach().clone()

        return fn

    with torch.inference_mode(), attached(bridge, [("blocks.0.hook_resid_pre", keep("x0"))]):
        bridge(tokens, return_type="logits")

    # (block, reader, slot, control, moved): a reader's input gets a random difference where ``moved``, else zeros
    spec = {
        0: {"attn": [(0, 1, 2, True), (1, 2, 0, False), (2, 3, 1, True), (0, 0, 1, False)], "mlp": [(1, True), (0, False)]},
        1: {"attn": [(2, 0, 0, False), (1, 3, 2, True), (0, 1, 1, True)], "mlp": [(2, False), (0, True)]},
        n_l: {"logits": [(1, True), (2, False)]},
    }
    joins, rows = [], []  # rows: (hook name, slot or None, control, delta, moved) in the order run() returns them
    for layer, kinds in spec.items():
        parts = {}
        for kind, entries in kinds.items():
            deltas, controls, which, slots = [], [], [], []
            for entry in entries:
                *head, c, moved = entry
                d = torch.randn(pos, d_model, generator=gen) if moved else torch.zeros(pos, d_model)
                deltas.append(d)
                controls.append(c)
                if kind == "attn":
                    w, s = head
                    which.append(w)
                    slots.append(s)
                    name = f"blocks.{layer}.attn.hook_{'qkv'[w]}_input"
                    rows.append((name, s, c, d, moved))
                else:
                    name = f"blocks.{layer}.hook_mlp_in" if kind == "mlp" else f"blocks.{n_l - 1}.hook_resid_post"
                    rows.append((name, None, c, d, moved))
            extra = (torch.tensor(which), torch.tensor(slots)) if kind == "attn" else ()
            parts[kind] = Rows(torch.tensor(controls), torch.stack(deltas), *extra)
        joins.append(Join(layer, **parts))

    kept: list[torch.Tensor] = []
    block = FastBlocks._block

    def spy(self, *args, **kwargs):
        x, k = block(self, *args, **kwargs)
        kept.append(torch.ones(x.shape[0], dtype=torch.bool) if k is None else k.clone())
        return x, k

    monkeypatch.setattr(FastBlocks, "_block", spy)
    with torch.inference_mode():
        h = own.run(got["x0"], last, joins)
    assert h.shape == (n + len(rows), d_model)
    # which rows stopped at which block: the running rows (controls first, then the rows joining at each block in
    # run()'s order) filtered by each block's keep mask
    per_block = [sum(len(entries) for entries in spec[b].values()) for b in range(n_l)]
    running, start, stopped_at = list(range(-n, 0)), 0, {}
    for b, k in enumerate(kept):
        running += list(range(start, start + per_block[b]))
        start += per_block[b]
        assert len(k) == len(running), (b, len(k), len(running))
        stopped_at.update({r: b for r, go in zip(running, k.tolist(), strict=True) if not go})
        running = [r for r, go in zip(running, k.tolist(), strict=True) if go]
    assert all(r >= 0 and not rows[r][4] for r in stopped_at), stopped_at  # no control and no moved row stops
    assert {b for b in stopped_at.values()} == set(range(n_l)), stopped_at  # rows left at both blocks
    assert any(rows[r][1] is None for r in stopped_at), stopped_at  # an MLP row among them (its own stop rule)

    for i, (name, slot, c, d, moved) in enumerate(rows):
        out = h[n + i]
        if i in stopped_at:
            assert torch.equal(out, h[c]), (i, name)  # its control's output, to the bit
            continue
        if not moved:  # a zero row that went on: its control's output but for rounding
            torch.testing.assert_close(out, h[c], atol=ROUNDING_ATOL, rtol=0)
            continue

        def add(x, hook=None, d=d, s=slot, c=c):
            x = x.clone()
            if s is None:
                x[c] += d
            else:
                x[c, :, s] += d
            return x

        with torch.inference_mode(), edge_flags(model), attached(bridge, [(name, add), ("unembed.hook_in", keep("h"))]):
            bridge(tokens, return_type="logits")
        want = got["h"][c, last[c]]
        assert not torch.allclose(out, h[c], atol=1e-3), (i, name)  # the difference moved the head's input
        torch.testing.assert_close(out, want, atol=ROUNDING_ATOL, rtol=0, msg=lambda m, i=i, name=name: f"row {i} ({name}): {m}")
