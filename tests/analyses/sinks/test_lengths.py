"""``headlens sinks --lengths``: the long-context sink table, streaming == eager, bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from headlens.analyses.sinks.lengths import LENGTH_COLUMNS, LengthsConfig, run_sink_lengths
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.errors import InputError
from headlens.reports.cli.main import cli
from tests.helpers import assert_close

STATS = ["alpha", "sink_rate", "first_share", "value_norm_share", "uniform_alpha", "n_queries"]
STATS += [f"{s}_all" for s in STATS]


def _both(model, lengths, block):
    eager = run_sink_lengths(model, LengthsConfig(lengths=lengths, n_sequences=2, attention="eager"))
    stream = run_sink_lengths(model, LengthsConfig(lengths=lengths, n_sequences=2, attention="streaming", query_block=block))
    assert list(eager.table.columns) == LENGTH_COLUMNS
    assert set(eager.table["attention"]) == {"eager"} and set(stream.table["attention"]) == {"streaming"}
    assert_close(stream.table[STATS].to_numpy(float, copy=True), eager.table[STATS].to_numpy(float, copy=True), "float32")
    return eager


@pytest.mark.parametrize("family", FAMILIES)
def test_sink_lengths_streaming_equals_eager_on_every_family(family_model, family):
    table = _both(family_model(family), (20, 45), block=7).table  # 45 > the windows of 16
    assert len(table) == 2 * family_model(family).n_layers * family_model(family).n_heads


def test_planted_sink_head_holds_at_every_length(planted_model):
    table = _both(planted_model, (16, 40, 64), block=5).table
    sink = table[(table.layer == 0) & (table.head == 1)]
    assert (sink["alpha"] > 0.3).all() and (sink["sink_rate"] == 1.0).all()
    # a uniform head's alpha falls with length: the baseline column says so
    uniform = table[(table.layer == 0) & (table.head == 0)].sort_values("length")["uniform_alpha"].to_numpy()
    assert np.all(np.diff(uniform) < 0)


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_sinks_lengths_cli(runner, planted_checkpoint, tmp_path):
    out = tmp_path / "long"
    res = runner.invoke(
        cli,
        [
            "sinks",
            "-m",
            str(planted_checkpoint),
            "--out",
            str(out),
            "--lengths",
            "16,48",
            "--n-long",
            "2",
            "--bos",
            "on",
            "--attention",
            "streaming",
            "--query-block",
            "7",
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    assert {p.name for p in out.iterdir()} == {"sink_lengths.csv", "sink_lengths.png", "sink_lengths.svg", "manifest.json"}
    table = pd.read_csv(out / "sink_lengths.csv")
    assert sorted(set(table["length"])) == [16, 48] and set(table["attention"]) == {"streaming"}
    assert "BOS, 48 tokens: mean alpha" in res.output
    manifest = json.loads((out / "manifest.json").read_text())
    info = manifest["sink_lengths"]["bos"]
    assert info["attention"] == {"16": "streaming", "48": "streaming"} and "evaluation text" in info["text"]
    assert manifest["config"]["sink_lengths"]["bos"]["query_block"] == 7


def test_sinks_lengths_beyond_context_names_both_numbers(runner, planted_checkpoint, planted_model, tmp_path):
    too_long = planted_model.n_ctx + 1
    res = runner.invoke(cli, ["sinks", "-m", str(planted_checkpoint), "--out", str(tmp_path / "x"), "--lengths", f"16,{too_long}", "-q"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    line = res.output.strip().splitlines()[-1]
    assert str(too_long) in line and str(planted_model.n_ctx) in line and "context" in line


def test_sinks_lengths_text_too_short_names_both_numbers(runner, planted_checkpoint, planted_model, tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("A short first document.\nAnd a second one, also short.\n")
    n_text = len(planted_model.tokenizer("A short first document.\n\nAnd a second one, also short.", add_special_tokens=False)["input_ids"])
    res = runner.invoke(
        cli,
        [
            "sinks",
            "-m",
            str(planted_checkpoint),
            "--out",
            str(tmp_path / "y"),
            "--lengths",
            "40",
            "--n-long",
            "1",
            "--bos",
            "on",
            "--prompts",
            str(docs),
            "-q",
        ],
    )
    assert res.exit_code != 0 and "Traceback" not in res.output
    line = res.output.strip().splitlines()[-1]
    assert "needs 39 text tokens" in line and f"only {n_text}" in line


def test_sinks_streaming_without_lengths_is_refused(runner, planted_checkpoint, tmp_path):
    res = runner.invoke(cli, ["sinks", "-m", str(planted_checkpoint), "--out", str(tmp_path / "z"), "--attention", "streaming", "-q"])
    assert res.exit_code == 2 and "--attention streaming needs --lengths" in res.output


def test_lengths_config_errors(planted_model):
    with pytest.raises(InputError, match="lengths is empty"):
        run_sink_lengths(planted_model, LengthsConfig(lengths=()))
    with pytest.raises(InputError, match="query_block must"):
        run_sink_lengths(planted_model, LengthsConfig(lengths=(16,), attention="streaming", query_block=0))


@pytest.mark.parametrize("window, causal", [(None, True), (6, True), (None, False)])
def test_block_sums_equal_the_sink_study_functions(window, causal):
    """alpha and the value-norm share summed over query blocks equal the eager study's
    ``sink_alpha`` and ``value_norm_share`` (the functions behind ``headlens sinks``)."""
    import torch

    from headlens.analyses.measure.attention_stats import alpha_sums, sink_alpha
    from headlens.analyses.sinks.lengths import _vn_sums
    from headlens.analyses.sinks.reductions import value_norm_share

    g = torch.Generator().manual_seed(1)
    b, h, n = 2, 3, 19
    pat = torch.rand(b, h, n, n, generator=g)
    pat = pat.tril() if causal else pat
    pat = pat / pat.sum(-1, keepdim=True)
    vnorm = torch.rand(b, h, n, generator=g)
    lengths = torch.tensor([n, n])
    want_alpha = sink_alpha(pat, lengths, key=0, window=window, causal=causal)
    want_vn, _, count = value_norm_share(pat, vnorm, lengths, window=window, causal=causal)
    for block in (1, 5, 19):
        a = v = None
        for q0 in range(0, n, block):
            rows = pat[:, :, q0 : q0 + block]
            pa, pv = alpha_sums(rows, lengths, q0, window=window, causal=causal), _vn_sums(rows, vnorm, n, q0, window, causal)
            a = pa if a is None else {k: a[k] + pa[k] for k in a}
            v = pv if v is None else {k: v[k] + pv[k] for k in v}
        assert a is not None and v is not None
        assert_close(a["score"] / a["count"][:, None], want_alpha, "float32")
        assert_close(v["score"] / v["count"][:, None], want_vn / count[:, None], "float32")
