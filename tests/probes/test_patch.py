"""The patch primitive (probes/patch.py): a value at a site, a setter, the late start and the early stop."""

from __future__ import annotations

import pytest
import torch

from headlens.probes.patch import Patch, Site, Start, check_start, patched_forward, patched_runner, resid_site


def _tokens(model, n=2, pos=10):
    return (torch.arange(n * pos).view(n, pos) * 7 + 3) % int(model.bridge.cfg.d_vocab)


def _hook_count(model):
    return sum(len(p.fwd_hooks) for p in model.bridge.hook_dict.values())


def test_a_value_at_a_site_is_the_setter_that_writes_it(tiny_model):
    tokens = _tokens(tiny_model)
    value = torch.randn(2, 10, 16)
    site = Site(hook="blocks.1.attn.hook_z", heads=2)

    def setter(z, hook=None):
        z = z.clone()
        z[:, :, 2] = value
        return z

    with torch.inference_mode():
        plain = patched_forward(tiny_model, tokens)
        by_value = patched_forward(tiny_model, tokens, [Patch(site=site, value=value)])
        by_setter = patched_forward(tiny_model, tokens, [Patch(site=site, setter=setter)])
        by_pair = patched_forward(tiny_model, tokens, [(site.hook, setter)])
    assert not torch.equal(plain, by_value)
    assert torch.equal(by_value, by_setter) and torch.equal(by_value, by_pair)
    with pytest.raises(ValueError, match="exactly one"):
        Patch(site=site)


def test_a_position_selection_writes_only_there(tiny_model):
    tokens = _tokens(tiny_model)
    with torch.inference_mode():
        plain = patched_forward(tiny_model, tokens)
        late = patched_forward(
            tiny_model, tokens, [Patch(site=Site(hook="blocks.1.attn.hook_z", positions=7, heads=[0, 1]), value=torch.zeros(2, 2, 16))]
        )
    assert torch.equal(plain[:, :7], late[:, :7])  # causal: positions before the patch do not move
    assert not torch.equal(plain[:, 7:], late[:, 7:])


def test_a_late_start_reproduces_the_full_forward_and_refuses_earlier_patches(tiny_model):
    tokens = _tokens(tiny_model)
    kept = {}

    def keep(x, hook=None):
        kept["x"] = x.clone()

    z_patch = Patch(site=Site(hook="blocks.1.attn.hook_z", heads=0), value=torch.zeros(2, 10, 16))
    with torch.inference_mode():
        full = patched_forward(tiny_model, tokens, [(resid_site(1).hook, keep), z_patch])
        late = patched_forward(tiny_model, tokens, [z_patch], start=Start(layer=1, resid=kept["x"]))
        with pytest.raises(ValueError, match="before block 1"):
            patched_forward(
                tiny_model,
                tokens,
                [Patch(site=Site(hook="blocks.0.attn.hook_z"), value=torch.zeros(16))],
                start=Start(layer=1, resid=kept["x"]),
            )
    assert float((full - late).abs().max()) <= 1e-5 * max(1.0, float(full.abs().max()))
    assert check_start(tiny_model, tokens, [1])
    assert len(tiny_model.bridge.blocks) == tiny_model.n_layers


def test_the_early_stop_runs_the_patches_first_and_returns_nothing(tiny_model):
    seen = []
    with torch.inference_mode():
        out = patched_forward(
            tiny_model,
            _tokens(tiny_model),
            [("blocks.0.hook_resid_post", lambda x, hook=None: seen.append(x.shape))],
            stop_after="blocks.0.hook_resid_post",
        )
    assert out is None and seen == [torch.Size([2, 10, 64])]


def test_hooks_and_blocks_restored_after_an_exception(tiny_model):
    n_hooks = _hook_count(tiny_model)

    def boom(z, hook=None):
        raise RuntimeError("boom")

    run = patched_runner(tiny_model, [("blocks.1.attn.hook_z", boom)], start=Start(layer=1, resid=torch.zeros(1, 24, 64)))
    with pytest.raises(RuntimeError, match="boom"):
        run(_tokens(tiny_model, 1, 24))
    assert len(tiny_model.bridge.blocks) == tiny_model.n_layers
    assert _hook_count(tiny_model) == n_hooks


def test_an_added_value_per_row_lands_on_its_row_and_head_only(tiny_model):
    """``add`` with ``rows`` and ``heads`` paired: row 0 gets d[0] at head 2, row 2 gets d[1] at head 0; every other
    (row, head) keeps the unpatched value, and the patched ones are the unpatched ones plus d (cut to the positions)."""
    tokens = _tokens(tiny_model, n=3)
    d = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(0))  # 12 positions: cut to the 10 there are
    seen: dict[str, torch.Tensor] = {}

    def keep(z, hook=None):
        seen.setdefault("before" if "before" not in seen else "after", z.clone())

    site = Site(hook="blocks.1.attn.hook_z", rows=(0, 2), heads=(2, 0))
    with torch.inference_mode():
        patched_forward(tiny_model, tokens, [(site.hook, keep), Patch(site=site, add=d), (site.hook, keep)])
    before, after = seen["before"], seen["after"]
    want = before.clone()
    want[0, :, 2] += d[0, :10]
    want[2, :, 0] += d[1, :10]
    assert torch.equal(after, want) and not torch.equal(after, before)
    with pytest.raises(ValueError, match="exactly one"):
        Patch(site=site, value=d, add=d)
