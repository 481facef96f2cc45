# pyright: reportArgumentType=false, reportCallIssue=false
# (these tests pass strings, lists and single values where the signatures declare tuples: the studies coerce them)
"""The review of the studies' Python API (issue 21): a census without intervals says so, one check
of thresholds and baseline_factor, settings given as a str or a single value,
``load`` of every folder or file a command writes, column dtypes kept by save -> load, the table
file results saved with the checks of ``Result.save``, ``kv(context=0)``, ``load_model(model=)``,
``census(ablate=, mask=)`` and ``capture(verify=True)`` with a TokenBatch refused before any work,
library labels in parameter words and a short LoadedModel repr."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest
from click.testing import CliRunner

from headlens.analyses.ablation.study import AblationConfig
from headlens.analyses.design.gqa import GQAConfig
from headlens.analyses.heads.census import CensusConfig
from headlens.analyses.heads.classify import classify_heads
from headlens.analyses.measure.masks import HeadMask
from headlens.analyses.measure.setup import EvalSpec, eval_setup, eval_source
from headlens.analyses.sinks.config import SinkConfig
from headlens.analyses.sinks.seed import SeedTextRun
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import InputError, OutputError, OutputExistsError
from headlens.probes.prompts import tokenize_prompts
from headlens.reports.api import capture as capture_module
from headlens.reports.api.ablate import ablate
from headlens.reports.api.census import DetectResult, census
from headlens.reports.api.common import study_config
from headlens.reports.api.design import KVResult, kv
from headlens.reports.api.folder import TableFileResult
from headlens.reports.api.models import load_model
from headlens.reports.api.registry import load
from headlens.reports.api.sinks import SeedTextResult, sinks
from headlens.reports.cli.main import cli
from headlens.reports.render.census_summary import NO_INTERVAL
from tests.helpers import figure_formats
from tests.reports.api.conftest import session_models, tables_saved

#: A model name that cannot load: a refusal with it comes before the model loads.
NO_MODEL = "no-such-model-here"


@pytest.fixture(scope="module")
def demo(demo_model):
    return demo_model  # loaded once per session (tests/conftest.py)


# --------------------------------------------------------------------------- 1: intervals


@pytest.mark.parametrize("n_bootstrap", [0, -3])
def test_n_bootstrap_below_one_is_refused_before_loading(n_bootstrap):
    with pytest.raises(InputError, match=f"n_bootstrap must be at least 1.*got {n_bootstrap}"):
        census(NO_MODEL, n_prompts=8, n_bootstrap=n_bootstrap)


def test_a_census_without_intervals_says_so_instead_of_no_head_cleared(demo):
    """One prompt: no interval; the demo's induction heads score far above the threshold."""
    result = census(demo, n_prompts=1, detectors="induction")
    induction = result.scores[result.scores["detector"] == "induction"]
    assert induction["score"].max() > result.manifest["thresholds"]["induction"] and induction["ci_low"].isna().all()
    assert result.roles.empty
    assert NO_INTERVAL in result.summary and "No head cleared a threshold" not in result.summary


def test_classify_with_one_prompt_prints_that_roles_need_intervals(demo, tmp_path):
    with session_models({"demo": demo}), figure_formats(()):  # the session's demo model; figures made, not rendered or written
        r = CliRunner().invoke(
            cli, ["classify", "-m", "demo", "--detectors", "induction", "--n-prompts", "1", "-q", "--out", str(tmp_path / "c")]
        )
    assert r.exit_code == 0, r.output
    assert NO_INTERVAL.lower() in r.output and NO_INTERVAL in (tmp_path / "c" / "summary.md").read_text()


# --------------------------------------------------------------------------- 2: thresholds and baseline_factor


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"thresholds": {"inducton": 0.99}}, "thresholds=: unknown detector 'inducton'"),
        ({"thresholds": {"induction": math.nan}}, "thresholds=: the threshold of induction must be in (0, 1]"),
        ({"thresholds": {"induction": 1.5}}, "must be in (0, 1]"),
        ({"thresholds": {"induction": "0.4"}}, "thresholds=: the threshold of induction is not a number"),
        ({"thresholds": [("induction", 0.4)]}, "thresholds= must map detector names"),
        ({"baseline_factor": -5}, "baseline_factor=-5 must be a number of at least 1"),
        ({"baseline_factor": math.nan}, "baseline_factor=nan must be"),
        ({"baseline_factor": "2"}, "baseline_factor='2' must be"),
    ],
)
def test_thresholds_and_baseline_factor_are_checked_by_the_library(settings, words):
    with pytest.raises(InputError) as info:  # before the model loads
        census(NO_MODEL, n_prompts=2, **settings)
    assert words in str(info.value) and "\n" not in str(info.value)
    scores = pd.DataFrame({"layer": [0], "head": [0], "detector": ["induction"], "score": [0.5], "baseline": [0.1], "ci_low": [0.4]})
    with pytest.raises(InputError, match=r"thresholds|baseline_factor"):
        classify_heads(scores, settings.get("thresholds"), baseline_factor=settings.get("baseline_factor", 2.0))


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--threshold", "inducton=0.4"], "--threshold: unknown detector 'inducton'"),
        (["--threshold", "induction=nan"], "--threshold: the threshold of induction must be in (0, 1]"),
        (["--baseline-factor", "0.5"], "--baseline-factor 0.5 must be a number of at least 1"),
    ],
)
def test_the_cli_says_the_same_check_in_flags(tmp_path, flags, words):
    r = CliRunner().invoke(cli, ["classify", "-m", NO_MODEL, *flags, "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and words in r.output, r.output


# --------------------------------------------------------------------------- 3: one coercion


@pytest.mark.parametrize(
    ("cls", "given", "expected"),
    [
        (CensusConfig, {"detectors": "induction"}, ("induction",)),
        (CensusConfig, {"detectors": "induction, sink"}, ("induction", "sink")),
        (CaptureConfig, {"what": "pattern"}, ("pattern",)),
        (CaptureConfig, {"layers": 1}, (1,)),
        (CaptureConfig, {"layers": "0,1"}, (0, 1)),
        (SinkConfig, {"skip": "content"}, ("content",)),
        (SinkConfig, {"bos": True}, (True,)),
        (AblationConfig, {"heads": "0.1"}, ((0, 1),)),
        (AblationConfig, {"heads": "0.1,1.2"}, ((0, 1), (1, 2))),
        (AblationConfig, {"heads": [(0, 1)]}, ((0, 1),)),
        (AblationConfig, {"layers": 1}, (1,)),
        (GQAConfig, {"group_sizes": 2}, (2,)),
    ],
)
def test_a_str_or_a_single_value_is_a_tuple_setting(cls, given, expected):
    config = study_config("study", cls, None, dict(given))
    assert getattr(config, next(iter(given))) == expected


@pytest.mark.parametrize(
    ("cls", "given", "words"),
    [
        (CensusConfig, {"n_prompts": "8"}, "n_prompts= must be an int"),
        (CensusConfig, {"n_prompts": True}, "n_prompts= must be an int"),
        (SinkConfig, {"eps": "0.3"}, "eps= must be a number"),
        (AblationConfig, {"heads": "0.x"}, "heads"),
        (CaptureConfig, {"layers": "a"}, "layers= item 'a'"),
        (CaptureConfig, {"layers": object()}, "layers= must be a tuple"),
        (CaptureConfig, {"prepend_bos": "no"}, "prepend_bos= must be true or false"),
        (CensusConfig, {"detectors": "induction,,sink"}, "empty item"),
    ],
)
def test_a_setting_of_the_wrong_type_is_one_line_naming_it(cls, given, words):
    with pytest.raises(InputError) as info:
        study_config("study", cls, None, dict(given))
    assert words in str(info.value) and "\n" not in str(info.value)


def test_settings_outside_the_config_are_coerced_too(tiny_model):
    """``sinks(lengths=)`` and the evaluation-set keywords of ablate / prune / gqa / projections."""
    assert sorted(set(sinks(tiny_model, lengths=16, n_long=1, bos=True).table["length"])) == [16]
    with pytest.raises(InputError, match="n_windows= must be an int, got str '2'"):
        ablate(tiny_model, n_windows="2", window=16, layers=0)


def test_a_study_call_takes_a_str_setting(tiny_model):
    result = capture_module.capture(tiny_model, prompts="The cat sat on the mat.", what="pattern", layers=1)
    assert [k for k in result.tensors if k != "lengths"] == ["blocks.1.attn.hook_pattern"]
    with pytest.raises(InputError, match="n_prompts= must be an int"):
        census(tiny_model, n_prompts="8")


# --------------------------------------------------------------------------- 4: load reads what the CLI writes


def test_load_reads_detects_table_and_the_seed_text_folder(demo, tmp_path):
    runner = CliRunner()
    scores = tmp_path / "scores.csv"
    with session_models({"demo": demo}), figure_formats(()):  # the session's demo model; figures made, not rendered or written
        r = runner.invoke(cli, ["detect", "-m", "demo", "--detectors", "induction", "--n-prompts", "2", "-q", "--out", str(scores)])
    assert r.exit_code == 0, r.output
    detected = load(scores)
    assert isinstance(detected, DetectResult) and set(detected.table["detector"]) == {"induction"}
    assert len(detected.table) == len(pd.read_csv(scores)) > 0
    st = tmp_path / "st"
    with session_models({"demo": demo}), figure_formats(()):
        r = runner.invoke(cli, ["sinks", "-m", "demo", "--text", "The cat sat on the mat and looked at the dog.", "--out", str(st)])
    assert r.exit_code == 0, r.output
    seed = load(st)
    assert isinstance(seed, SeedTextResult) and len(seed.table) > 0


def test_a_scores_table_without_its_kind_is_read_and_an_unknown_one_named(tmp_path):
    """Scores written before results had a kind (the census config in the manifest) load; a table
    whose manifest says nothing is refused naming the manifest read."""
    table = pd.DataFrame({"layer": [0], "head": [1], "detector": ["induction"], "score": [0.5]})
    table.to_csv(tmp_path / "old.csv", index=False)
    (tmp_path / "old.manifest.json").write_text(json.dumps({"config": {"census": {"n_prompts": 2}}}))
    assert isinstance(load(tmp_path / "old.csv"), DetectResult)
    table.to_csv(tmp_path / "other.csv", index=False)
    (tmp_path / "other.manifest.json").write_text(json.dumps({"seed": 0}))
    with pytest.raises(InputError, match=r"other\.manifest\.json names no result kind"):
        load(tmp_path / "other.csv")


# --------------------------------------------------------------------------- 5: dtypes kept


def test_save_then_load_keeps_every_columns_dtype(tmp_path):
    table = pd.DataFrame(
        {
            "heads": pd.Series(["", "1.10"], dtype=object),
            "sinks_in": pd.Series(["", ""], dtype="str"),
            "variant": pd.Categorical(["clean", "shuffled"], categories=["shuffled", "clean"]),
            "tokens_per_sequence": [12.0, 16.0],
            "count": [1, 2],
            "is_sink": [True, False],
            "score": [0.25, float("nan")],
        }
    )
    run = SeedTextRun(text="", bos=(True,), seed=0, table=table)
    SeedTextResult(run=run, manifest={"seed": 0, "sinks": {"text": "", "bos": [True]}}).save(tmp_path / "out")
    back = load(tmp_path / "out").tables["seed_text"]
    pd.testing.assert_frame_equal(back, table)


def test_a_sinks_result_reads_back_as_it_was_saved(tiny_model, tmp_path):
    """Every table of a real sinks run (text, categorical, int-valued float columns) after save -> load.
    Every part runs; windowed attention on one long sequence of 32 tokens with one window, and one
    head removed alone (every table as with the defaults, fewer rows); figures made, not rendered or written."""
    result = sinks(tiny_model, n_prompts=3, window=16, n_long=1, long_tokens=32, attn_windows=(8,), max_single=1)
    back = load(tables_saved(result, tmp_path / "sinks"))
    assert sorted(back.tables) == sorted(result.tables)
    for name, table in result.tables.items():  # the CSV holds 6 significant digits
        pd.testing.assert_frame_equal(back.tables[name], table.reset_index(drop=True), rtol=1e-5, obj=name)


def test_a_table_file_result_keeps_its_dtypes(tiny_model, tmp_path):
    result = kv(tiny_model)
    table = result.table.assign(note=pd.Series([""] * len(result.table), dtype=object))
    KVResult(run=replace(result.run, table=table), manifest=result.manifest).save(tmp_path / "kv.csv")
    back = load(tmp_path / "kv.csv")
    assert isinstance(back, KVResult)
    pd.testing.assert_frame_equal(back.table, table)


# --------------------------------------------------------------------------- 6: table file saves


def test_a_table_file_save_is_checked_before_writing(tiny_model, tmp_path):
    result = kv(tiny_model)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    with pytest.raises(OutputExistsError, match="not a folder"):
        result.save(afile)
    assert afile.read_text() == "mine"
    with pytest.raises(OutputError):
        result.save("/proc/nope/x.csv")


class _FailingFigure(TableFileResult):
    kind = ""  # not registered
    table_name = "t"
    figure_stems = ("broken",)

    def _figure_makers(self):
        def broken():
            raise RuntimeError("figure failed")

        return {"broken": broken}


def test_a_table_file_is_written_first_and_its_manifest_last(tmp_path):
    result = _FailingFigure(tables={"t": pd.DataFrame({"a": [1]})}, manifest={})
    with pytest.raises(RuntimeError, match="figure failed"):
        result.save(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").is_file() and not (tmp_path / "t.manifest.json").exists()


# --------------------------------------------------------------------------- 7, 8, 9


def test_kv_context_zero_is_refused(tiny_model):
    with pytest.raises(InputError, match="context=0"):
        kv(tiny_model, context=0)
    assert kv(tiny_model, context=None).table["tokens"].iloc[0] == tiny_model.n_ctx


def test_load_model_takes_model_as_a_keyword(demo):
    assert load_model(model="demo").name == demo.name == "demo"


def test_a_loaded_models_repr_is_one_short_line(demo):
    text = repr(demo)
    assert (
        text
        == f"<LoadedModel 'demo' (gpt2): {demo.n_layers} layers x {demo.n_heads} heads, d_model {demo.bridge.cfg.d_model}, cpu, float32>"
    )


def test_the_evaluation_sets_labels_name_parameters_not_flags(tiny_model):
    chosen = eval_setup(tiny_model, EvalSpec(metric="loss", n_windows=2, window=16)).chosen
    assert chosen == "asked for (metric='loss')"
    label = eval_source(EvalSpec(text="Some text. " * 50, text_file="held.txt"))[1]
    assert label == "text file held.txt"


def test_census_refuses_ablate_with_another_masks_heads(tiny_model, tmp_path):
    mask = tmp_path / "mask.json"
    mask.write_text(json.dumps(HeadMask(n_layers=2, n_heads=4, removed=((1, 2),)).to_json()))
    with pytest.raises(InputError, match="ablate= with mask="):
        census(tiny_model, ablate="0.1", mask=str(mask), n_prompts=2)


def test_capture_refuses_verify_with_a_token_batch_before_capturing(tiny_model, monkeypatch):
    batch = tokenize_prompts(
        tiny_model.tokenizer, ["The cat sat on the mat."], prepend_bos=True, n_ctx=tiny_model.n_ctx, frame=tiny_model.frame(True)
    )

    def no_capture(*args, **kwargs):
        raise AssertionError("captured before refusing")

    monkeypatch.setattr(capture_module, "run_capture", no_capture)
    with pytest.raises(InputError, match="verify=True needs the prompts as texts"):
        capture_module.capture(tiny_model, prompts=batch, verify=True)
