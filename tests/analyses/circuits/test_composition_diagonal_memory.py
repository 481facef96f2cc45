"""The diagonal copying score in blocks (issue 46 item 10): ``composition --n-tokens 100000``, its
documented maximum, built the whole ``[layer, head, k, k]`` logit tensor (161 GB on the demo, k
capped at its 50,257-token vocabulary) and ended in a traceback.  Now one head at a time, in row
blocks of DIAGONAL_BLOCK bytes: the same shares, memory independent of k squared."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import torch

from headlens.analyses.circuits import composition


def _weights(n_l: int, n_h: int, d_model: int, d_head: int, seed: int = 0) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    W_V = torch.randn(n_l, n_h, d_model, d_head, generator=g, dtype=torch.float64)
    W_O = torch.randn(n_l, n_h, d_head, d_model, generator=g, dtype=torch.float64)
    return SimpleNamespace(W_V=W_V, W_O=W_O)


def test_blocks_give_the_whole_tensor_s_shares(monkeypatch):
    g = torch.Generator().manual_seed(1)
    W_E = torch.randn(300, 16, generator=g, dtype=torch.float64)
    W_U = W_E.T.clone() + 0.1 * torch.randn(16, 300, generator=g, dtype=torch.float64)
    w = _weights(2, 3, 16, 4)
    monkeypatch.setattr(composition, "DIAGONAL_BLOCK", 8 * 200 * 7)  # 7 rows a block: uneven blocks
    seen = []
    got = composition._diagonal(W_E, W_U, w, k=200, n_vocab=300, seed=5, progress=lambda *a: seen.append(a))  # type: ignore[arg-type]
    toks = torch.randperm(300, generator=torch.Generator().manual_seed(5))[:200]
    logits = torch.einsum("kd,lhdr,lhre,ej->lhkj", W_E[toks], w.W_V, w.W_O, W_U[:, toks])
    want = (logits.argmax(-1) == torch.arange(200)).double().mean(-1).numpy()
    np.testing.assert_array_equal(got, want)
    assert seen[-1] == ("copying", 6, 6) and len(seen) == 6  # progress per head


def test_the_diagonal_of_many_tokens_stays_within_its_block():
    """k = 12,000 sampled tokens on one head: the whole logit matrix is 1.15 GB; the run's peak
    memory grows by less than half of that (a fresh process, so the peak is this run's)."""
    code = textwrap.dedent(
        """
        import resource, torch
        from types import SimpleNamespace
        from headlens.analyses.circuits.composition import _diagonal
        k, d = 12_000, 4
        g = torch.Generator().manual_seed(0)
        W_E, W_U = torch.randn(k, d, generator=g, dtype=torch.float64), torch.randn(d, k, generator=g, dtype=torch.float64)
        w = SimpleNamespace(W_V=torch.randn(1, 1, d, 2, dtype=torch.float64), W_O=torch.randn(1, 1, 2, d, dtype=torch.float64))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        _diagonal(W_E, W_U, w, k=k, n_vocab=k, seed=0, progress=None)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
        """
    )
    grown_kib = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip())
    assert grown_kib * 1024 < 12_000**2 * 8 / 2, grown_kib
