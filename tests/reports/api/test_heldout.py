"""``heldout``: the sweep's held-out loss and zero ablation on the same windows, against a
forward pass written here."""

from __future__ import annotations

import torch

from headlens.analyses.ablation.study import AblationConfig
from headlens.reports.api.heldout import BUILTIN_SOURCE, heldout


def test_no_windows_measure_nothing(tiny_model):
    got = heldout(tiny_model, n_windows=0, ablation=AblationConfig(method="zero"))
    assert (got.data, got.loss, got.tokens, got.note, got.ablation) == (None, None, 0, None, None)


def test_loss_is_the_mean_next_token_loss_of_the_windows(tiny_model):
    got = heldout(tiny_model, n_windows=3, window=24, batch_size=2)
    assert got.data is not None and got.loss is not None and got.ablation is None
    assert got.data.source["text"] == BUILTIN_SOURCE and tuple(got.data.tokens.shape) == (3, 24)
    tokens = got.data.tokens.to(tiny_model.device)
    with torch.no_grad():
        logits = tiny_model.bridge(tokens).float()
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="sum")
    assert got.tokens == 3 * 23
    torch.testing.assert_close(torch.tensor(got.loss), nll / got.tokens, rtol=1e-5, atol=1e-6)


def test_ablation_runs_on_the_same_windows(tiny_model, tmp_path):
    text = tmp_path / "held.txt"
    text.write_text("The cat sat on the mat and looked at the door. " * 200, encoding="utf-8")
    got = heldout(tiny_model, text_file=str(text), n_windows=2, window=16, ablation=AblationConfig(method="zero", n_bootstrap=50))
    assert got.data is not None and got.data.source["text"] == str(text)
    table = got.ablation
    assert table is not None and len(table) == tiny_model.n_layers * tiny_model.n_heads
    assert set(table["unablated_value"]) == {table["unablated_value"].iloc[0]} and table["value"].notna().all()
