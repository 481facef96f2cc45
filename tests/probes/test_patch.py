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
