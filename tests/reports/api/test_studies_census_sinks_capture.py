# pyright: reportArgumentType=false, reportCallIssue=false
# (these tests pass strings, lists and single values where the signatures declare tuples: the studies coerce them)
"""The study calls from Python: ``census``, ``sinks`` (and ``lengths=``), ``capture``, ``verify``.

Each returns a typed Result whose ``save`` writes exactly the files of the matching CLI command
(the command calls it), which ``load`` reads back; ``plot`` gives matplotlib Figures; a wrong
keyword is one line naming it."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
from matplotlib.figure import Figure

from headlens.probes.errors import InputError
from headlens.reports.api.capture import CaptureResult, capture
from headlens.reports.api.census import CensusResult, census
from headlens.reports.api.registry import load
from headlens.reports.api.sinks import SinkLengthsResult, SinksResult, sinks
from headlens.reports.api.verify import VerifyResult, verify
from headlens.reports.cli.main import cli
from tests.reports.api.conftest import tables_saved

#: A census small enough for a test: 4 prompts, short sequences, 50 resamples.
SMALL: dict[str, Any] = {"n_prompts": 4, "seq_len": 10, "window": 24, "n_bootstrap": 50}


def _files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _same_tables(a, b) -> None:
    assert list(a.tables) == list(b.tables) or set(a.tables) == set(b.tables)
    for name in a.tables:
        pd.testing.assert_frame_equal(a[name].reset_index(drop=True), b[name].reset_index(drop=True), check_dtype=False)


@pytest.fixture(scope="module")
def small_census(tiny_model) -> CensusResult:
    return census(tiny_model, detectors=("sink", "induction"), **SMALL)


def test_census_is_typed_and_saves_the_files_classify_writes(small_census, tiny_checkpoint, tmp_path, runner):
    r = small_census
    assert list(r.scores.columns)[:4] == ["layer", "head", "detector", "score"] and set(r.scores["detector"]) == {"sink", "induction"}
    assert list(r.roles.columns) == ["layer", "head", "name", "role"]
    assert list(r.heads["name"]) == [f"{layer}.{head}" for layer in range(2) for head in range(4)]
    assert r.evidence is None and r.manifest["config"]["census"]["n_prompts"] == SMALL["n_prompts"]
    assert r.manifest["command"][0] == "python" and r.manifest["command"][1].startswith("headlens.census(")
    saved = r.save(tmp_path / "py")
    cli_out = tmp_path / "cli"
    args = [
        "classify",
        "-m",
        str(tiny_checkpoint),
        "--detectors",
        "sink,induction",
        "--n-prompts",
        "4",
        "--seq-len",
        "10",
        "--window",
        "24",
    ]
    res = runner.invoke(cli, [*args, "-q", "--out", str(cli_out)])
    assert res.exit_code == 0, res.output
    assert _files(saved) == _files(cli_out)
    assert json.loads((cli_out / "manifest.json").read_text())["result"] == "census"
    back = load(cli_out)
    assert isinstance(back, CensusResult) and back.summary.startswith("#")
    # text cells stay text ("" for a head with no role, or no detector above its baseline); an empty score is NaN
    plain = pd.read_csv(cli_out / "heads.csv", dtype={"name": str}, keep_default_na=False, na_values={"strongest_score": [""]})
    pd.testing.assert_frame_equal(back.heads, plain)
    _same_tables(load(saved), r)


def test_census_plots_and_refuses_unknown_keywords(small_census, tiny_model):
    assert small_census.figure_names() == ["heatmap_sink", "heatmap_induction"]
    assert isinstance(small_census.plot("heatmap_induction"), Figure)
    assert set(small_census.figures()) == {"heatmap_sink", "heatmap_induction"}
    with pytest.raises(InputError, match=r"census: unknown keyword n_promts="):
        census(tiny_model, n_promts=4)
    with pytest.raises(InputError, match=r"device=: loading settings apply to a model given by name"):
        census(tiny_model, device="cpu", **SMALL)


def test_sinks_and_lengths(tiny_model, tmp_path):
    r = sinks(tiny_model, n_prompts=3, window=16, bos=(True,), skip=("content", "secondary", "value_norm", "removal", "windowed"))
    assert isinstance(r, SinksResult) and r.figure_names() == ["sink_alpha_heatmap", "sink_rate_by_layer"]
    assert set(r.census["bos"]) == {True} and isinstance(r.sink_heads(True), list)
    out = r.save(tmp_path / "sinks")
    assert {"census.csv", "sink_rates.csv", "summary.md", "manifest.json", "sink_alpha_heatmap.png"} <= set(_files(out))
    assert json.loads((out / "manifest.json").read_text())["sinks"]["files"] == [
        *sorted(f for f in _files(out) if f not in ("summary.md", "manifest.json")),
        "summary.md",
    ]
    back = load(out)
    assert isinstance(back, SinksResult) and back.run.config == r.run.config  # the run rebuilt from the files
    assert back.findings() == r.findings() and back.figure_names() == r.figure_names()
    # the saved table, with the dtypes it had (the CSV holds 6 significant digits)
    pd.testing.assert_frame_equal(back.sink_rates, r.sink_rates.reset_index(drop=True), rtol=1e-5)
    lengths = sinks(tiny_model, lengths=(16, 32), n_long=1, bos=(True,))
    assert isinstance(lengths, SinkLengthsResult) and sorted(set(lengths.table["length"])) == [16, 32]
    assert isinstance(lengths.plot(), Figure)
    again = load(tables_saved(lengths, tmp_path / "lengths"))  # the run rebuilt: each setting's config and info, the table
    assert isinstance(again, SinkLengthsResult) and again.run.configs == lengths.run.configs and again.run.info == lengths.run.info
    assert again.run.table is again.table and again.findings() == lengths.findings() and again.findings().lines
    with pytest.raises(InputError, match=r"lengths=: unknown keyword window="):
        sinks(tiny_model, lengths=(16,), window=8)


def _same_capture(a, b) -> None:
    assert list(a.tensors) == list(b.tensors) and all(a.tensors[k].equal(b.tensors[k]) for k in b.tensors)
    assert (a.heads, a.kv_heads, a.what, a.info) == (b.heads, b.kv_heads, b.what, b.info)
    x, y = a.batch, b.batch
    assert x.tokens.equal(y.tokens) and x.lengths.equal(y.lengths) and x.strings == y.strings
    assert (x.prepend_bos, x.pad_id, x.n_prefix, x.n_suffix) == (y.prepend_bos, y.pad_id, y.n_prefix, y.n_suffix)


def test_capture_with_verify_and_verify(tiny_model, tmp_path):
    r = capture(tiny_model, prompts=["one two three four", "five"], what=("q", "pattern"), layers=(1,), verify=True)
    assert isinstance(r, CaptureResult) and r.pattern(1).shape[:2] == (2, 4)
    assert r.verify is not None and bool(r.verify["ok"].all())
    out = r.save(tmp_path / "cap")
    assert _files(out) == ["activations.safetensors", "manifest.json", "tokens.json", "verify.csv"]
    back = load(out)
    assert isinstance(back, CaptureResult)
    _same_capture(back.capture, r.capture)  # the Capture rebuilt: tensors in order, the padded batch, heads, info
    assert back["blocks.1.attn.hook_pattern"].equal(r.pattern(1)) and back.tokens == r.tokens
    assert back.findings() == r.findings() and back.findings().lines
    pd.testing.assert_frame_equal(back.verify, r.verify)
    again = back.save(tmp_path / "again")  # a result read back saves the same files again
    assert _files(again) == _files(out)
    tokens = json.loads((again / "tokens.json").read_text())
    assert tokens == r.tokens and (tokens["pad_id"], tokens["n_prefix"], tokens["n_suffix"]) == (r.capture.batch.pad_id, 1, 0)
    del tokens["pad_id"]  # as headlens wrote tokens.json before it recorded the padding id
    (again / "tokens.json").write_text(json.dumps(tokens))
    with pytest.raises(InputError, match=r"tokens.json: no pad_id \(written by an older headlens\): capture again"):
        load(again)
    with pytest.raises(InputError, match="layer=0: no pattern captured"):
        r.pattern(0)
    v = verify(tiny_model, prompts="a short prompt")
    assert isinstance(v, VerifyResult) and v.ok and v.failed_layers == [] and v.worst_error < 1e-3
    v_back = load(v.save(tmp_path / "verify"))  # the run rebuilt: the config from the manifest, the table from verify.csv
    assert isinstance(v_back, VerifyResult) and v_back.run.config == v.run.config and v_back.run.table is v_back.table
    pd.testing.assert_frame_equal(v_back.table, v.table)
    assert v_back.findings() == v.findings() and v_back.findings().lines
    with pytest.raises(InputError, match="prompts is empty"):
        verify(tiny_model, prompts=[" "])
