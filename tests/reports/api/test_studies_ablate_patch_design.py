"""Studies ablate, prune, gqa, projections, kv and patch as Python calls: typed results, save ->
load round trips, the CLI's folders read back, figures as Figures, keyword errors naming the
parameter; and the one evaluation-set selection (analyses.measure.setup)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

from headlens.analyses.measure.evalset import TaskItem, text_eval_set
from headlens.analyses.measure.setup import BUILTIN_TEXT, EvalSpec, eval_setup
from headlens.analyses.stimuli import eval_text
from headlens.probes.errors import InputError, OutputExistsError
from headlens.reports.api.ablate import AblationResult, ablate
from headlens.reports.api.design import GQAResult, KVResult, ProjectionsResult, gqa, kv, projections
from headlens.reports.api.patch import PatchingResult, patch
from headlens.reports.api.prune import PruneResult, prune
from headlens.reports.api.registry import load
from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models, tables_saved

#: Windows of the evaluation text every study here measures on (small: a smoke-sized run).
TEXT: dict[str, Any] = {"n_windows": 2, "window": 16}
TASK = [TaskItem(prompt="When Mary and John went to the store, John gave a drink to", correct=" Mary", incorrect=" John")]


def _files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _same_tables(a, b) -> None:
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        pd.testing.assert_frame_equal(
            a.tables[name].reset_index(drop=True), b.tables[name].reset_index(drop=True), check_dtype=False, obj=name
        )


def _displays(result) -> None:
    assert isinstance(result.plot(), Figure)
    assert all(isinstance(f, Figure) for f in result.figures().values())
    text = repr(result)
    assert type(result).__name__ in text and "\n" not in text
    assert "<table" in result._repr_html_()


# --------------------------------------------------------------------------- the one selection


def test_eval_setup_is_the_text_windows_of_the_old_call(tiny_model):
    setup = eval_setup(tiny_model, EvalSpec(**TEXT))
    old = text_eval_set(
        tiny_model.tokenizer,
        eval_text(),
        n_windows=2,
        window=16,
        prepend_bos=True,
        n_ctx=tiny_model.n_ctx,
        source=BUILTIN_TEXT,
        frame=tiny_model.frame(True),
    )
    assert setup.metric == "loss" and setup.chosen == "default" and setup.why is None
    assert torch.equal(setup.data.tokens, old.tokens) and setup.data.describe() == old.describe()
    task = eval_setup(tiny_model, EvalSpec(task=TASK, task_file="t.jsonl"))
    assert task.metric == "logit-diff" and task.chosen == "asked for (metric='logit-diff')" and task.data.describe()["task"] == "t.jsonl"


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"metric": "logit-diff"}, "metric='logit-diff' needs task="),
        ({"metric": "loss", "task": TASK}, "task= prompts are scored with metric='logit-diff'"),
        ({"text": "some text", "task": TASK}, "give either text="),
        (
            {"text": "x", "text_file": "f.txt", "task": TASK, "task_file": "t.jsonl"},
            "give either text_file= (loss, embedding) or task_file=",
        ),
        ({"metric": "accuracy"}, "metric='accuracy' is not a metric"),
    ],
)
def test_eval_spec_refuses_naming_the_parameters(spec, words):
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        EvalSpec(**spec)


def test_cli_says_the_flags(runner, tiny_checkpoint, tmp_path):
    res = runner.invoke(cli, ["ablate", "-m", str(tiny_checkpoint), "--metric", "logit-diff", "--out", str(tmp_path / "a.csv")])
    assert res.exit_code == 2 and "--metric logit-diff needs --task" in res.stderr and "task=" not in res.stderr


# --------------------------------------------------------------------------- ablate / prune


def test_ablate_save_load_and_the_cli_files(tiny_model, tiny_checkpoint, runner, tmp_path):
    res = ablate(tiny_model, heads=((0, 0), (1, 2)), n_bootstrap=20, attribution=False, **TEXT)
    assert isinstance(res, AblationResult) and res.table.shape == (2, 11) and res.metric == "loss" and res.method == "zero"
    assert res.unablated_value == pytest.approx(float(res.table["value"].iloc[0] - res.table["delta"].iloc[0]), abs=1e-9)
    out = res.save(tmp_path / "py" / "ablation.csv")
    with pytest.raises(OutputExistsError):
        res.save(out)
    back = load(out)
    assert isinstance(back, AblationResult) and back.unablated_value == res.unablated_value
    _same_tables(back, res)
    assert isinstance(load(tmp_path / "py"), AblationResult) and isinstance(
        load(tmp_path / "py" / "ablation.manifest.json"), AblationResult
    )
    _displays(back)
    cli_out = tmp_path / "cli" / "ablation.csv"
    cli_out.parent.mkdir()
    args = [
        "ablate",
        "-m",
        str(tiny_checkpoint),
        "--heads",
        "0.0,1.2",
        "--bootstrap",
        "20",
        "--no-attribution",
        "--n-windows",
        "2",
        "--window",
        "16",
        "-q",
    ]
    with session_models({str(tiny_checkpoint): tiny_model}):  # the session's tiny model, not a second load
        r = runner.invoke(cli, [*args, "--out", str(cli_out)])
    assert r.exit_code == 0, r.output
    assert _files(cli_out.parent) == _files(out.parent)
    from_cli = load(cli_out)
    assert from_cli.manifest["result"] == "ablation" and from_cli.manifest["ablation"]["files"]["table"] == str(cli_out)
    _same_tables(from_cli, res)


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_prune_save_load(tiny_model, tmp_path):
    res = prune(tiny_model, step=0.5, random_seeds=1, max_fraction=0.5, **TEXT)
    assert isinstance(res, PruneResult) and len(res.curve) == 2 and 0 <= res.removable_fraction <= 0.5
    folder = res.save(tmp_path / "p")
    assert _files(folder) == sorted(
        ["curve.csv", "random_orders.csv", "importance.csv", "pruned_heads.json", "manifest.json", "pruning_curve.png", "pruning_curve.svg"]
    )
    assert json.loads((folder / "manifest.json").read_text())["pruning"]["files"]["curve.csv"] == str(folder / "curve.csv")
    back = load(folder)
    assert isinstance(back, PruneResult) and back.pruned.heads == res.pruned.heads and back.unablated_value == res.unablated_value
    _same_tables(back, res)
    _displays(back)


# --------------------------------------------------------------------------- gqa / projections / kv


def test_gqa_cli_folder_loads_and_equals_the_call(tiny_model, tiny_checkpoint, runner, tmp_path):
    res = gqa(tiny_model, group_sizes=(2,), groupings=("adjacent",), task=TASK, **TEXT)
    assert isinstance(res, GQAResult) and res.task is not None and set(res.summary["g"]) == {1, 2}
    assert res.basis.startswith("2 windows x 16 tokens")
    folder = res.save(tmp_path / "py")
    args = ["gqa", "-m", str(tiny_checkpoint), "--group-sizes", "2", "--grouping", "adjacent", "--n-windows", "2", "--window", "16", "-q"]
    task = tmp_path / "task.jsonl"
    task.write_text(json.dumps({"prompt": TASK[0].prompt, "correct": " Mary", "incorrect": " John"}) + "\n")
    with session_models({str(tiny_checkpoint): tiny_model}):  # the session's tiny model, not a second load
        r = runner.invoke(cli, [*args, "--task", str(task), "--out", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    assert _files(tmp_path / "cli") == _files(folder)
    from_cli, back = load(tmp_path / "cli"), load(folder)
    assert isinstance(from_cli, GQAResult) and isinstance(back, GQAResult)
    for other in (from_cli, back):
        for name in ("summary", "heads", "groups", "kv"):
            pd.testing.assert_frame_equal(other.tables[name], res.tables[name], check_dtype=False, obj=name)
    assert back.summary_md == res.summary_md and from_cli.basis == res.basis
    # the run rebuilt from the files: its config and tables, the data's description; the same findings
    assert back.run.config == res.run.config and back.run.summary is back.summary and back.kv is back.tables["kv"]
    assert back.data == res.data and back.findings() == res.findings() and back.findings().lines
    _displays(back)


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_projections_and_kv_round_trip(tiny_model, tmp_path):
    res = projections(tiny_model, roles=False, kinds=("q=k",), layers=(1,), **TEXT)
    assert isinstance(res, ProjectionsResult) and res.role_changes is None and set(res.losses["kind"]) == {"none", "q=k"}
    folder = res.save(tmp_path / "p")
    assert _files(folder) == ["knockout.png", "knockout.svg", "losses.csv", "manifest.json", "summary.md"]
    back = load(folder)
    assert isinstance(back, ProjectionsResult) and back.summary_md == res.summary_md
    _same_tables(back, res)
    # the run rebuilt from the files: its config (no census ran), its tables are the result's; the same findings
    assert back.run.config == res.run.config and back.run.census is None and back.run.losses is back.tables["losses"]
    assert back.findings() == res.findings() and back.findings().lines
    _displays(back)
    table = kv(tiny_model, context=64)
    assert isinstance(table, KVResult) and "formula" in table.table
    out = table.save(tmp_path / "kv.csv")
    assert sorted(p.name for p in tmp_path.glob("kv*")) == ["kv.csv", "kv.manifest.json"]
    kv_back = load(out)
    assert isinstance(kv_back, KVResult) and kv_back.run.config == table.run.config and kv_back.run.table is kv_back.table
    assert kv_back.findings() == table.findings() and kv_back.findings().lines
    _same_tables(kv_back, table)
    with pytest.raises(InputError, match="no figure"):
        table.plot()


def test_projections_with_the_census_round_trip(tiny_model, tmp_path):
    """With the census under each knockout, the loaded run has the census's config and its role changes and scores."""
    res = projections(tiny_model, kinds=("q=k",), layers=(1,), n_prompts=2, **TEXT)
    assert res.run.census is not None and res.role_changes is not None and res.census_scores is not None
    back = load(tables_saved(res, tmp_path / "p"))
    assert isinstance(back, ProjectionsResult)
    assert back.run.census == res.run.census and back.run.config == res.run.config
    assert back.run.role_changes is back.tables["role_changes"] and back.run.census_scores is back.tables["census_scores"]
    _same_tables(back, res)
    assert back.findings() == res.findings() and back.findings().lines


# --------------------------------------------------------------------------- patch


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_patch_cli_folder_loads_and_equals_the_call(planted_model, planted_checkpoint, runner, tmp_path):
    res = patch(planted_model, builtin="induction", n_pairs=6, n_resamples=20, receivers=((1, 0),), dla=True)
    n_heads = planted_model.n_layers * planted_model.n_heads
    assert isinstance(res, PatchingResult) and res.table.shape[0] == n_heads and res.dla is not None and res.path_patching is not None
    assert res.gap_defined  # the planted model does the induction task: effects are normalised, heatmaps drawn
    folder = res.save(tmp_path / "py")
    args = ["patch", "-m", str(planted_checkpoint), "--builtin", "induction", "--n-pairs", "6", "--n-resamples", "20", "--dla"]
    with session_models({str(planted_checkpoint): planted_model}):  # the session's planted model, not a second load
        r = runner.invoke(cli, [*args, "--path", "--receivers", "1.0", "-q", "--out", str(tmp_path / "cli")])
    assert r.exit_code == 0, r.output
    assert _files(tmp_path / "cli") == _files(folder)
    assert {"heatmap_denoising.png", "heatmap_noising.svg", "heatmap_path.png", "dla.csv", "path_patching.csv"} <= set(_files(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["result"] == "patching" and manifest["files"] == sorted(n for n in _files(folder) if n != "manifest.json")
    for name in ("patching.csv", "path_patching.csv", "dla.csv"):
        assert (tmp_path / "cli" / name).read_text() == (folder / name).read_text(), name
    for other in (load(folder), load(tmp_path / "cli")):
        assert isinstance(other, PatchingResult) and list(other.tables) == list(res.tables) and other.gap == res.gap
    back = load(folder)
    _displays(back)
    assert set(back.figures()) == {"heatmap_denoising", "heatmap_noising", "heatmap_path"}


# --------------------------------------------------------------------------- keyword errors


@pytest.mark.parametrize(
    ("call", "kwargs", "name"),
    [
        (ablate, {"methd": "mean"}, "methd="),
        (prune, {"stepp": 0.5}, "stepp="),
        (gqa, {"group_size": (2,)}, "group_size="),
        (projections, {"kind": ("q=k",)}, "kind="),
        (kv, {"contxt": 64}, "contxt="),
        (patch, {"n_pair": 4}, "n_pair="),
    ],
)
def test_unknown_keyword_is_named(tiny_model, call, kwargs, name):
    with pytest.raises(InputError, match=name):
        call(tiny_model, **kwargs)


def test_study_argument_errors_name_the_parameter(tiny_model):
    with pytest.raises(InputError, match="builtin='nope'"):
        patch(tiny_model, builtin="nope")
    with pytest.raises(InputError, match=r"give either task= .* or builtin="):
        patch(tiny_model, task="t.jsonl", builtin="names")
    with pytest.raises(InputError, match="attribution= estimates denoising"):
        patch(tiny_model, attribution=True, directions=("noising",))
    with pytest.raises(InputError, match="give either text= or text_file="):
        ablate(tiny_model, text="a b c", text_file="x.txt")
    with pytest.raises(InputError, match="device="):
        ablate(tiny_model, device="cpu")
