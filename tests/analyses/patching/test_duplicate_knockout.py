"""The duplicate-token role's own test (issue 28 item 4): an attention knockout on repeated random
tokens, proven on planted checkpoints.

Before, a duplicate-token head was tested on the referent pairs, which is not what the role
predicts.  Now (:mod:`headlens.analyses.patching.duplicate_knockout`): masking the head's
attention from each repeated token to its earlier occurrence must move the model's predictions
(KL) more than masking the token after the earlier occurrence.

* planted as built: head 0.2 attends to the earlier copy, but its output (the same token's code
  whichever copy it reads) goes to a slot nothing reads: not supported, the predictions do not move;
* head 0.2 with a random output map of the whole residual (its pattern, so its role, unchanged):
  what it reads at the earlier copy (that copy's position) now reaches the logits: supported;
* the planted induction head 1.0 called a duplicate-token head: it reads the token AFTER the
  earlier copy, so the figure is negative: not supported, and the reason says it reads the neighbour.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching.duplicate_knockout import duplicate_knockout_effects, knockout_edit
from headlens.analyses.patching.evidence import MIN_LOSS, NOT_SUPPORTED, SUPPORTED, role_evidence

D_MODEL, D_HEAD = 256, 64  # the planted checkpoint's shape
T = 12
#: The knockout run here and the plain-torch reference compute the same forward.
KL_TOL = 1e-5


def _table(rows):
    return pd.DataFrame([(l, h, f"{l}.{h}", r) for l, h, r in rows], columns=["layer", "head", "name", "role"])


def _reading_duplicate_head(model) -> None:
    """Head 0.2: a seeded random V (reads everything, position included) and O (writes everywhere)."""
    import torch

    g = torch.Generator().manual_seed(1)
    attn = model.transformer.h[0].attn
    attn.c_attn.weight[:, 2 * D_MODEL + 2 * D_HEAD : 2 * D_MODEL + 3 * D_HEAD] = torch.randn(D_MODEL, D_HEAD, generator=g) / D_MODEL**0.5
    attn.c_proj.weight[2 * D_HEAD : 3 * D_HEAD] = 2 * torch.randn(D_HEAD, D_MODEL, generator=g) / (D_HEAD * D_MODEL) ** 0.5


@pytest.fixture(scope="module")
def reading_dup_folder(planted_checkpoint, tmp_path_factory):
    import torch
    from transformers import AutoTokenizer, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("dup")
    model = GPT2LMHeadModel.from_pretrained(planted_checkpoint)
    with torch.no_grad():
        _reading_duplicate_head(model)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(planted_checkpoint).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def reading_dup_model(reading_dup_folder):
    from headlens.probes.loading import load_model

    return load_model(model=str(reading_dup_folder), device="cpu")


def test_a_duplicate_head_whose_reading_reaches_the_logits_is_supported(reading_dup_model):
    ev = role_evidence(reading_dup_model, _table([(0, 2, "duplicate_token")]), n=MIN_ITEMS, T=T)
    row = ev.iloc[0]
    assert row["evidence"] == SUPPORTED and float(row["figure_low"]) > MIN_LOSS, row["detail"]
    assert "earlier occurrence" in str(row["detail"]) and int(row["n_items"]) == MIN_ITEMS


def test_planted_duplicate_head_that_writes_nothing_read_is_not_supported(planted_model):
    ev = role_evidence(planted_model, _table([(0, 2, "duplicate_token"), (1, 0, "duplicate_token")]), n=MIN_ITEMS, T=T)
    dup, induction = ev.iloc[0], ev.iloc[1]
    assert dup["evidence"] == NOT_SUPPORTED and abs(float(dup["figure"])) < MIN_LOSS and "barely depend" in str(dup["detail"])
    # the induction head reads the token after the earlier copy: the wrong direction, said in words
    assert induction["evidence"] == NOT_SUPPORTED and float(induction["figure_high"]) < -MIN_LOSS
    assert "reads the neighbour" in str(induction["detail"]), induction["detail"]


def test_knockout_matches_a_plain_torch_forward(reading_dup_model, reading_dup_folder):
    """The knockout's KL against an independent forward: GPT-2's layer-0 attention written out by
    hand from the checkpoint's weights, the knocked-out key removed from head 0.2's softmax, then
    Hugging Face's own layer 1, final norm and unembedding."""
    import torch
    from transformers import GPT2LMHeadModel

    from headlens.analyses.patching.duplicate_knockout import repeated_batch

    n = 3
    got = duplicate_knockout_effects(reading_dup_model, [(0, 2)], n=n, T=T, seed=0)[(0, 2)]
    tokens, p = repeated_batch(reading_dup_model, n=n, T=T, seed=0)
    hf = GPT2LMHeadModel.from_pretrained(reading_dup_folder).double().eval()
    width = tokens.shape[1]

    def logp(offset: int | None) -> torch.Tensor:
        tr: Any = hf.transformer
        x = tr.wte(tokens) + tr.wpe(torch.arange(width))[None]
        block0, block1, a = tr.h[0], tr.h[1], tr.h[0].attn
        qkv = block0.ln_1(x) @ a.c_attn.weight + a.c_attn.bias
        q, k, v = (t.view(n, width, 4, D_HEAD).transpose(1, 2) for t in qkv.split(D_MODEL, -1))
        scores = q @ k.transpose(-1, -2) / D_HEAD**0.5
        allowed = torch.ones(width, width).tril().bool()[None, None].repeat(1, 4, 1, 1)
        if offset is not None:
            for i in range(p + T, p + 2 * T):
                allowed[0, 2, i, i - T + offset] = False
        z = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
        x = x + z.transpose(1, 2).reshape(n, width, D_MODEL) @ a.c_proj.weight + a.c_proj.bias
        x = x + block0.mlp(block0.ln_2(x))
        out = block1(x)
        x = out[0] if isinstance(out, tuple) else out
        return torch.log_softmax(hf.lm_head(tr.ln_f(x))[:, p + T : p + 2 * T], -1)

    with torch.no_grad():
        clean = logp(None)
        kl = {o: float((clean.exp() * (clean - logp(o))).sum(-1).mean()) for o in (0, 1)}
    assert abs(got[3] - kl[0]) < KL_TOL and abs(got[4] - kl[1]) < KL_TOL, (got, kl)
    assert kl[0] > MIN_LOSS  # the construction: the reading head's knockout moves the predictions


def test_knockout_edit_masks_exactly_the_second_copy_edges():
    import torch

    scores = torch.zeros(2, 3, 1 + 2 * 4, 1 + 2 * 4)
    out = knockout_edit(1, p=1, T=4, offset=0)(scores)
    masked = torch.isinf(out)
    assert masked.sum() == 2 * 4 and not masked[:, [0, 2]].any()
    assert all(bool(masked[0, 1, i, i - 4]) for i in range(5, 9))
