"""The duplicate-token knockout reads the logits of the second copy only
(analyses/patching/duplicate_knockout.logits_at): the unembedding runs on those positions alone
and gives the full forward's logits there bit for bit on one BLAS thread, edits in place or not; on
more threads a matrix product of other shapes may round apart, within float32's rounding."""

from __future__ import annotations

import pytest
import torch

from headlens.analyses.patching.duplicate_knockout import knockout_edit, logits_at, repeated_batch
from headlens.probes.interventions import score_edits
from headlens.probes.scoped import torch_threads

#: logits_at against the full forward on several BLAS threads (float32, logits of order 1: measured 2.4e-7 apart on 2).
THREADS_ATOL = 1e-5


@pytest.mark.parametrize("threads", [1, None], ids=["one-thread", "ambient-threads"])
def test_logits_at_the_second_copy_are_the_full_forwards(tiny_model, threads):
    T = 6
    tokens, p = repeated_batch(tiny_model, n=9, T=T, seed=1)
    second = slice(p + T, p + 2 * T)
    if threads == 1:
        same = torch.equal
    else:
        same = lambda a, b: torch.allclose(a, b, rtol=0, atol=THREADS_ATOL)  # noqa: E731
    for edits in ({}, {1: knockout_edit(0, p=p, T=T, offset=0)}):
        with torch_threads(threads), score_edits(tiny_model, edits), torch.inference_mode():
            full = tiny_model.bridge(tokens, return_type="logits")
            for rows in (slice(0, 8), slice(8, 9)):  # a full batch and a one-row remainder
                got = logits_at(tiny_model, tokens[rows], second)
                assert got.shape == (rows.stop - rows.start, T, full.shape[-1])
                want = tiny_model.bridge(tokens[rows], return_type="logits")[:, second]
                assert same(got, want)
            assert same(logits_at(tiny_model, tokens, second), full[:, second])
