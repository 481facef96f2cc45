"""The duplicate-token knockout reads the logits of the second copy only
(analyses/patching/duplicate_knockout.logits_at): the unembedding runs on those positions alone
and gives the full forward's logits there bit for bit, edits in place or not."""

from __future__ import annotations

import torch

from headlens.analyses.patching.duplicate_knockout import knockout_edit, logits_at, repeated_batch
from headlens.probes.interventions import score_edits


def test_logits_at_the_second_copy_are_the_full_forwards(tiny_model):
    T = 6
    tokens, p = repeated_batch(tiny_model, n=9, T=T, seed=1)
    second = slice(p + T, p + 2 * T)
    for edits in ({}, {1: knockout_edit(0, p=p, T=T, offset=0)}):
        with score_edits(tiny_model, edits), torch.inference_mode():
            full = tiny_model.bridge(tokens, return_type="logits")
            for rows in (slice(0, 8), slice(8, 9)):  # a full batch and a one-row remainder
                got = logits_at(tiny_model, tokens[rows], second)
                assert got.shape == (rows.stop - rows.start, T, full.shape[-1])
                want = tiny_model.bridge(tokens[rows], return_type="logits")[:, second]
                assert torch.equal(got, want)
            assert torch.equal(logits_at(tiny_model, tokens, second), full[:, second])
