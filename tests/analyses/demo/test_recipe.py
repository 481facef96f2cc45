"""The demo model's recipe: data split and order, batch masks, the sampled softmax, the schedule."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from headlens.analyses.demo.checkpoints import config_dict, config_from_summary
from headlens.analyses.demo.data import BOS_ID, BatchSampler, Document, eval_windows, is_heldout
from headlens.analyses.demo.losses import sampled_softmax_loss
from headlens.analyses.demo.recipe import RECIPE
from headlens.analyses.demo.train import lr_at
from tests.helpers import assert_close


def _stream(n: int = 5000) -> torch.Tensor:
    return torch.arange(n) % 1000


def test_heldout_split_depends_on_the_document_name_only():
    a = Document("stdlib-docstrings", "json.decoder", "text one")
    b = Document("stdlib-docstrings", "json.decoder", "completely different text")
    assert is_heldout(a) == is_heldout(b)
    names = [Document("stdlib-docstrings", f"mod{i}", "") for i in range(2000)]
    frac = sum(map(is_heldout, names)) / len(names)
    assert 0.07 < frac < 0.13, frac


def test_batches_are_a_function_of_the_seed():
    kinds = ("random", "natural", "span", "random")
    a = BatchSampler(_stream(), kinds, 256, seed=3).next()
    b = BatchSampler(_stream(), kinds, 256, seed=3).next()
    c = BatchSampler(_stream(), kinds, 256, seed=4).next()
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.loss_mask, b.loss_mask)
    assert not torch.equal(a.tokens, c.tokens)
    assert a.tokens.shape == (4, 256) and bool((a.tokens[:, 0] == BOS_ID).all())


def test_random_rows_score_only_the_predictable_part():
    sampler = BatchSampler(_stream(), ("random",) * 6, 128, seed=0, random_span=(10, 40))
    batch = sampler.next()
    for row, mask in zip(batch.tokens, batch.loss_mask, strict=True):
        body = row[1:]
        first = int((~mask).nonzero().max()) + 1 if bool((~mask).any()) else 0
        T = first  # targets p < T are masked: tokens 1..T are the first copy
        assert 10 <= T <= 40
        ids = body[:T]
        assert len(set(ids.tolist())) == T and BOS_ID not in ids.tolist()
        assert torch.equal(body, ids.repeat(-(-body.numel() // T))[: body.numel()])
        # every scored target from position T + 1 on equals the token T positions earlier
        for p in range(T + 1, row.numel() - 1):
            assert bool(mask[p]) and row[p + 1] == row[p + 1 - T]


def test_random_pool_grows_to_the_whole_vocabulary():
    sampler = BatchSampler(_stream(), ("random",), 64, seed=0, vocab_schedule=(1000, 3000))
    assert sampler.pool_size(0) == 1000
    assert 1000 < sampler.pool_size(1500) < 50256
    assert sampler.pool_size(3000) == sampler.pool_size(10_000) == 50256


def test_span_rows_need_room():
    with pytest.raises(ValueError, match="span"):
        BatchSampler(_stream(), ("span",), 64, seed=0)


def test_span_rows_repeat_an_earlier_span():
    sampler = BatchSampler(_stream(100_000), ("span",), 256, seed=1)
    row = sampler.next().tokens[0, 1:].tolist()
    # the stream is 0..999 repeating, so a copied span shows up as a backwards jump
    jumps = [i for i in range(1, len(row)) if row[i] != (row[i - 1] + 1) % 1000]
    assert 1 <= len(jumps) <= 2, jumps


def test_sampled_softmax_with_every_token_as_negative_is_the_full_softmax():
    gen = torch.Generator().manual_seed(0)
    V, d = 50, 8
    hidden, weight = torch.randn(12, d, generator=gen), torch.randn(V, d, generator=gen)
    targets = torch.randint(0, V, (12,), generator=gen)
    full = F.cross_entropy(hidden @ weight.T, targets)
    sampled = sampled_softmax_loss(hidden, weight, targets, V, torch.Generator().manual_seed(1))
    assert_close(sampled, full, tol="float32")
    # targets only: the softmax over the distinct targets
    only = sampled_softmax_loss(hidden, weight, targets, 0, None)
    pos = torch.unique(targets)
    assert_close(only, F.cross_entropy(hidden @ weight[pos].T, torch.searchsorted(pos, targets)), tol="float32")


def test_window_losses_are_the_full_softmax_cross_entropy():
    """The blocked log-sum-exp over the vocabulary is the plain full-softmax cross-entropy, window by
    window (189 targets: a full and a partial block of targets; 50,257 ids: a partial last vocabulary block)."""
    from headlens.analyses.demo.losses import full_loss, window_losses
    from headlens.analyses.demo.train import build_model

    model = build_model(replace(RECIPE, n_layer=1, n_head=2, d_model=16, n_ctx=64, wte_std=1.0)).eval()
    windows = torch.randint(0, BOS_ID, (3, 64), generator=torch.Generator().manual_seed(0))
    windows[:, 0] = BOS_ID
    with torch.no_grad():
        logits = model(input_ids=windows).logits[:, :-1]
    want = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none").mean(dim=1)
    got = window_losses(model, windows, batch_size=2)
    assert got.dtype == torch.float64 and got.shape == (3,)
    assert_close(got, want, tol="float32")
    assert_close(full_loss(model, windows), want.mean(), tol="float32")


def test_schedule_is_set_by_the_recipe_not_by_the_stopping_step():
    assert lr_at(1, RECIPE) == pytest.approx(RECIPE.lr / RECIPE.warmup_steps)
    assert lr_at(RECIPE.warmup_steps, RECIPE) == pytest.approx(RECIPE.lr)
    assert lr_at(RECIPE.schedule_steps, RECIPE) == pytest.approx(RECIPE.lr * RECIPE.min_lr_frac)
    mid = (RECIPE.warmup_steps + RECIPE.schedule_steps) / 2
    assert lr_at(int(mid), RECIPE) == pytest.approx(RECIPE.lr * (RECIPE.min_lr_frac + (1 - RECIPE.min_lr_frac) / 2), rel=1e-3)


def test_recipe_round_trips_through_the_summary():
    config = replace(RECIPE, seed=7, warm_steps=3)
    assert config_from_summary({"recipe": config_dict(config)}) == config


def test_eval_windows_start_with_bos():
    w = eval_windows(_stream(1000), 64)
    assert w.shape == (1000 // 63, 64) and bool((w[:, 0] == BOS_ID).all())
    assert torch.equal(w[0, 1:], _stream(1000)[:63])
    assert math.isclose(w[:, 1:].float().mean().item(), _stream(1000)[: 15 * 63].float().mean().item())


class _Interrupt(Exception):
    pass


@pytest.mark.usefixtures("demo_corpus")  # train() reads the corpus through build_corpus()
def test_an_interrupted_run_resumes_to_the_same_losses(tmp_path):
    """Save every 2 steps, die at step 5, rerun: the log equals an uninterrupted run's."""
    from headlens.analyses.demo.train import train

    config = replace(RECIPE, warm_steps=2, schedule_steps=20, kinds=("random", "natural", "span"), warm_kinds=("random",) * 2)
    threads = torch.get_num_threads()
    state = tmp_path / "run.state.pt"

    def die_at_5(row):
        if row["step"] == 5:
            raise _Interrupt

    try:
        straight = [r["train_loss"] for r in train(config, steps=6, eval_every=0).log]
        with pytest.raises(_Interrupt):
            train(config, steps=6, eval_every=0, on_log=die_at_5, state_file=state, state_every=2)
        assert state.is_file()
        resumed = train(config, steps=6, eval_every=0, state_file=state, state_every=2)
        with pytest.raises(ValueError, match="another recipe"):
            train(replace(config, seed=1), steps=6, eval_every=0, state_file=state)
    finally:
        torch.set_num_threads(threads)
    assert [r["step"] for r in resumed.log] == list(range(7))
    assert [r["train_loss"] for r in resumed.log] == straight


def test_random_rows_can_score_the_first_copy_too():
    kw: dict[str, Any] = {"random_span": (10, 40)}
    masked = BatchSampler(_stream(), ("random",) * 3, 128, seed=5, **kw).next()
    scored = BatchSampler(_stream(), ("random",) * 3, 128, seed=5, score_first_copy=True, **kw).next()
    assert torch.equal(masked.tokens, scored.tokens)
    assert bool(scored.loss_mask.all()) and not bool(masked.loss_mask.all())


@pytest.mark.usefixtures("demo_corpus")  # train() reads the corpus through build_corpus()
def test_train_command_writes_a_loadable_checkpoint(tmp_path, runner):
    import json

    from headlens.probes.loading import load_model
    from headlens.reports.cli.main import cli

    out = tmp_path / "demo-model"
    threads = torch.get_num_threads()
    try:
        res = runner.invoke(
            cli, ["demo", "train", "--out", str(out), "--steps", "2", "--eval-every", "0", "--no-card", "--save-every", "1"]
        )
    finally:
        torch.set_num_threads(threads)
    assert res.exit_code == 0, res.output
    assert {"config.json", "model.safetensors", "tokenizer.json", "training_log.jsonl", "training_summary.json"} <= {
        p.name for p in out.iterdir()
    }
    assert not (tmp_path / "demo-model.state.pt").exists()
    # --save-every 1: the weights of steps 0, 1 and 2 kept beside it, each a checkpoint folder that knows its step
    from safetensors.torch import load_file

    from headlens.reports.runs.sweep.plan import plan_tasks

    kept = tmp_path / "demo-model-checkpoints"
    assert sorted(p.name for p in kept.iterdir()) == ["step-000000", "step-000001", "step-000002"]
    tasks = plan_tasks([str(kept)])
    assert [(t.step, t.run) for t in tasks] == [(0, "demo-model"), (1, "demo-model"), (2, "demo-model")]
    assert json.loads((kept / "step-000001" / "checkpoint.json").read_text())["log"]["step"] == 1
    final, last, first = (load_file(p / "model.safetensors") for p in (out, kept / "step-000002", kept / "step-000000"))
    assert all(torch.equal(final[k], last[k]) for k in final)  # the last kept step is the finished model
    assert not all(torch.equal(final[k], first[k]) for k in final)
    rows = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[2]["train_loss"] > 0
    model = load_model(model=str(out), device="cpu")
    assert model.n_layers == RECIPE.n_layer and model.n_ctx == RECIPE.n_ctx
    again = runner.invoke(cli, ["demo", "train", "--out", str(out), "--steps", "2"])
    assert again.exit_code == 2 and "--overwrite" in again.output


@pytest.mark.parametrize(
    "summary, log, message",
    [
        (None, None, "training_summary.json is missing"),
        ("{not json", "", "unreadable training log"),
        ("{}", "", "lacks recipe"),
    ],
)
def test_demo_replay_and_card_reject_a_broken_log_in_one_line(tmp_path, summary, log, message, runner):

    from headlens.reports.cli.main import cli

    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    if summary is not None:
        (folder / "training_summary.json").write_text(summary)
        (folder / "training_log.jsonl").write_text(log)
    (folder / "MODEL_CARD.md").write_text("kept")
    for args in (["demo", "replay", "--model", str(folder), "--steps", "2"], ["demo", "card", "--model", str(folder)]):
        res = runner.invoke(cli, args)
        assert res.exit_code == 2, res.output
        assert message in res.output and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert (folder / "MODEL_CARD.md").read_text() == "kept"
