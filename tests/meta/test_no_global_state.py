"""Library calls leave process-wide state alone, and fallbacks say why they fall back.

A census, a quick report (figures included) and an ablation run in-process must leave the
caller's torch thread count, matplotlib backend and rcParams, environment and the global
torch / numpy / random generators exactly as they were.
"""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import pytest
import torch

PROMPTS = ("When Mary and John went to the store, John gave a drink to",)


def _snapshot() -> dict:
    import matplotlib

    return {
        "threads": torch.get_num_threads(),
        "backend": matplotlib.get_backend(),
        "rcParams": {k: repr(v) for k, v in matplotlib.rcParams.items() if k != "backend"},
        "environ": dict(os.environ),
        "torch_rng": torch.random.get_rng_state().clone(),
        "numpy_rng": np.random.get_state(),
        "random_rng": random.getstate(),
        "figures": list(__import__("matplotlib.pyplot").pyplot.get_fignums()),
    }


def _assert_same(before: dict, after: dict) -> None:
    assert after["threads"] == before["threads"]
    assert after["backend"] == before["backend"]
    changed = sorted(k for k in before["rcParams"] if after["rcParams"].get(k) != before["rcParams"][k])
    assert not changed, f"rcParams changed: {changed}"
    assert after["environ"] == before["environ"]
    assert torch.equal(after["torch_rng"], before["torch_rng"])
    nb, na = before["numpy_rng"], after["numpy_rng"]
    assert nb[0] == na[0] and np.array_equal(nb[1], na[1]) and nb[2:] == na[2:]
    assert after["random_rng"] == before["random_rng"]
    assert after["figures"] == before["figures"]


@pytest.fixture()
def odd_globals():
    """Caller state that no library default matches: 2 threads (or 1), a seeded stream, a style key."""
    import matplotlib
    import matplotlib.pyplot

    threads = torch.get_num_threads()
    torch.set_num_threads(2 if threads != 2 else 1)
    torch.manual_seed(12345)
    np.random.seed(6789)
    random.seed(42)
    with matplotlib.rc_context({"svg.hashsalt": "caller", "font.size": 11.5}):
        yield
    torch.set_num_threads(threads)


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_census_report_and_ablation_leave_global_state_alone(odd_globals, tiny_model, tmp_path):
    from headlens import reports
    from headlens.analyses.ablation.study import AblationConfig, run_ablation
    from headlens.analyses.heads.census import CensusConfig, run_census
    from headlens.analyses.measure.evalset import text_eval_set
    from headlens.analyses.stimuli import eval_text

    before = _snapshot()
    run_census(tiny_model, CensusConfig(n_prompts=4, seq_len=8, window=16, batch_size=4, n_bootstrap=20))
    _assert_same(before, _snapshot())

    r = reports.build_report(tiny_model, out_dir=tmp_path / "report", quick=True, example_prompts=PROMPTS)
    assert r.ok
    assert list((tmp_path / "report").rglob("*.svg")) and list((tmp_path / "report").rglob("*.png"))
    _assert_same(before, _snapshot())

    windows = text_eval_set(tiny_model.tokenizer, eval_text(), n_windows=2, window=16, prepend_bos=True, n_ctx=tiny_model.n_ctx)
    run_ablation(tiny_model, windows, AblationConfig(method="mean", attribution=False, n_bootstrap=0))
    _assert_same(before, _snapshot())


def test_tiny_checkpoint_build_keeps_the_callers_random_stream(tmp_path):
    from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint

    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    build_tiny_checkpoint(tmp_path / "t", TinySpec(n_layer=1, n_head=2, d_model=16, n_ctx=16, seed=3))
    assert torch.equal(torch.rand(3), expected)


def test_scoped_threads_and_seed_restore():
    from headlens.probes.scoped import keeps_torch_rng, keeps_torch_threads, torch_seed, torch_threads

    threads = torch.get_num_threads()
    with torch_threads(1) as n:
        assert n == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == threads

    @keeps_torch_threads
    def sets_threads():
        torch.set_num_threads(1)

    sets_threads()
    assert torch.get_num_threads() == threads

    state = torch.random.get_rng_state()
    with torch_seed(0):
        a = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(a, torch.rand(2))  # same draws as torch.manual_seed
    torch.random.set_rng_state(state)

    @keeps_torch_rng
    def seeds():
        torch.default_generator.manual_seed(1)
        return torch.rand(1)

    seeds()
    assert torch.equal(torch.random.get_rng_state(), state)


def test_logits_to_keep_fallback_is_logged_and_other_type_errors_raise(tiny_model, caplog):
    from headlens.analyses.measure.evalset import TaskItem, task_eval_set
    from headlens.analyses.measure.metrics import model_values

    items = [TaskItem(prompt="When Mary and John went to the store, John gave a drink to", correct=" Mary", incorrect=" John")]
    data = task_eval_set(tiny_model.tokenizer, items, prepend_bos=True, n_ctx=tiny_model.n_ctx)
    tokens, lengths, _ = data.batch([0])
    saved = dict(tiny_model.extra)

    def no_keep(t, **kw):
        if "logits_to_keep" in kw:
            raise TypeError("forward() got an unexpected keyword argument 'logits_to_keep'")
        return tiny_model.bridge(t, return_type="logits", **kw)

    def broken(t, **kw):
        raise TypeError("unsupported operand type(s) for +: 'Tensor' and 'NoneType'")

    try:
        tiny_model.extra["logits_to_keep"] = True
        with caplog.at_level(logging.DEBUG, logger="headlens.analyses.measure.metrics"):
            model_values(tiny_model, tokens, lengths, data, [0], run=no_keep)
        assert tiny_model.extra["logits_to_keep"] is False
        assert any("logits_to_keep" in rec.getMessage() for rec in caplog.records)
        tiny_model.extra["logits_to_keep"] = True
        with pytest.raises(TypeError, match="unsupported operand"):  # a bug inside the forward is not a missing keyword
            model_values(tiny_model, tokens, lengths, data, [0], run=broken)
    finally:
        tiny_model.extra.clear()
        tiny_model.extra.update(saved)


def test_discarded_report_journal_is_logged(tmp_path, caplog):
    from headlens.reports.runs.report.markers import open_journal as _journal

    path = tmp_path / "journal.jsonl"
    path.write_text('{"journal": "headlens", "kind": "ablate", "key": {"model": "other"}}\n')
    with caplog.at_level(logging.WARNING, logger="headlens.reports.runs.report.markers"):
        j = _journal(path, "ablate", {"model": "this"})
    assert not j.resumed
    assert any("discarding journal" in rec.getMessage() for rec in caplog.records)
