"""The sweep's parts without Ray: the task list, steps, settings, the figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headlens.probes.errors import InputError
from headlens.reports.runs.sweep.plan import SweepConfig, checkpoint_info, parse_steps, plan_tasks, step_of_revision


def test_steps_and_revisions():
    assert parse_steps("0:3000:1000") == ["step0", "step1000", "step2000", "step3000"]
    assert parse_steps("0,512") == ["step0", "step512"]
    assert len(parse_steps("0:143000:1000")) == 144
    for bad in ("0:10", "a,b", "10:0:5", "0:10:0"):
        with pytest.raises(InputError, match="--steps"):
            parse_steps(bad)
    assert step_of_revision("step143000") == 143000 and step_of_revision("main") is None and step_of_revision(None) is None


def test_hub_models_cross_revisions_and_keys_are_unique():
    tasks = plan_tasks(["EleutherAI/pythia-70m", "EleutherAI/pythia-160m"], ["step0", "step1000", "main"])
    assert [(t.run, t.revision, t.step) for t in tasks[:3]] == [
        ("EleutherAI/pythia-70m", "step0", 0),
        ("EleutherAI/pythia-70m", "step1000", 1000),
        ("EleutherAI/pythia-70m", "main", None),
    ]
    assert len({t.key for t in tasks}) == 6 and all("/" not in t.key for t in tasks)
    assert tasks[1].label == "pythia-70m@step1000"
    assert plan_tasks(["gpt2", "gpt2"]) == plan_tasks(["gpt2"])  # duplicates dropped


def test_folders_of_checkpoints_expand_in_step_order(tmp_path):
    run = tmp_path / "myrun-checkpoints"
    for step in (1000, 20, 300):
        folder = run / f"step-{step:06d}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "checkpoint.json").write_text(json.dumps({"step": step, "run": "myrun"}))
    odd = run / "extra"  # no checkpoint.json, name without a step
    odd.mkdir()
    (odd / "config.json").write_text("{}")
    tasks = plan_tasks([str(run)])
    assert [t.step for t in tasks] == [20, 300, 1000, None]
    assert {t.run for t in tasks[:3]} == {"myrun"}
    assert checkpoint_info(run / "step-000020") == {"step": 20, "run": "myrun"}
    with pytest.raises(InputError, match="apply to Hub models"):
        plan_tasks([str(run)], ["step0"])
    # a folder that is not a checkpoint stays a task (it fails alone, in one line, when loaded)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert len(plan_tasks([str(empty)])) == 1


def test_settings_round_trip_through_json():
    from headlens.analyses.heads.census import CensusConfig

    config = SweepConfig(census=CensusConfig(detectors=("induction",), n_prompts=5), thresholds=(("induction", 0.2),))
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    assert config.to_dict()["thresholds"] == {"induction": 0.2}


def _fake_sweep(models: dict[str, int], steps) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, cks = [], []
    for model, n_params in models.items():
        for step in steps:
            label = f"{model}@{step}"
            for layer in range(2):
                for head in range(2):
                    for det in ("induction", "previous_token"):
                        score = (step or 0) / 1000 * (layer + head) / 2
                        rows.append(
                            {
                                "model": model,
                                "revision": None,
                                "step": step,
                                "label": label,
                                "layer": layer,
                                "head": head,
                                "detector": det,
                                "score": score,
                                "baseline": 0.05,
                                "ci_low": score - 0.01,
                                "ci_high": score + 0.01,
                                "n": 10,
                                "accuracy": np.nan,
                                "role": score > 0.3,
                            }
                        )
            cks.append(
                {
                    "model": model,
                    "revision": None,
                    "step": step,
                    "label": label,
                    "key": label,
                    "n_params": n_params,
                    "heldout_loss": 5 - (step or 0) / 1000,
                }
            )
    data, ck = pd.DataFrame(rows), pd.DataFrame(cks)
    data["step"] = data["step"].astype("Int64")
    ck["step"] = ck["step"].astype("Int64")
    return data, ck


def test_figures_over_training_and_across_sizes(tmp_path):
    from headlens.reports.render.figures.sweep import role_counts, sweep_figures

    data, ck = _fake_sweep({"a": 10, "b": 100}, [0, 500, 1000])
    paths = sweep_figures(data, ck, tmp_path / "steps", formats=("png",))
    assert sorted(p.name for p in paths) == ["across_models.png", "over_training-a.png", "over_training-b.png"]
    counts = role_counts(data[data["model"] == "a"])
    assert (
        counts[(counts["step"] == 1000) & (counts["detector"] == "induction")]["n_heads"].item() == 3
    )  # 0.1 and 1.0 score 0.5, 1.1 scores 1.0: above 0.3
    data, ck = _fake_sweep({"small": 10_000, "large": 1_000_000}, [None])
    assert [p.name for p in sweep_figures(data, ck, tmp_path / "sizes", formats=("png",))] == ["across_models.png"]


def test_demo_means_the_shipped_model_unless_a_demo_folder_is_here(tmp_path, monkeypatch):
    from headlens.analyses.demo import MODEL_DIR

    monkeypatch.chdir(tmp_path)
    (task,) = plan_tasks(["demo"])
    assert task.model == str(MODEL_DIR) and task.run == "demo" and task.step == 4000  # by path: a worker elsewhere loads the same
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "config.json").write_text("{}")
    (tmp_path / "demo" / "training_summary.json").write_text(json.dumps({"steps": 1500}))
    (task,) = plan_tasks(["demo"])  # as in the loader, a folder called demo here wins
    assert task.model == str(tmp_path / "demo") and task.step == 1500


def test_a_held_out_text_every_task_would_fail_on_is_refused_before_ray_starts(runner, tmp_path):
    pytest.importorskip("ray", reason="the sweep command needs Ray (the test extra installs it)")
    from headlens.reports.cli.main import cli

    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    res = runner.invoke(cli, ["sweep", "-m", "demo", "--text-file", str(empty), "--out", str(tmp_path / "sw")])
    assert res.exit_code == 2 and "is empty" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "sw").exists()


def test_role_distinct_lines_that_coincide_stay_distinguishable(tmp_path):
    """Two roles with the same head count at every step: both lines visible (own dash, marker, size) and the legend says they coincide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headlens.reports.render.figures.sweep import distinct_lines, sweep_figures

    steps = pd.Index([0.0, 500.0, 1000.0])
    fig, ax = plt.subplots()
    distinct_lines(
        ax,
        {
            "previous_token": pd.Series([0, 1, 3], index=steps),
            "induction": pd.Series([0, 1, 3], index=steps),
            "duplicate_token": pd.Series([0, 0, 0], index=steps),
        },
        ["r", "g", "b"],
    )
    lines = ax.get_lines()
    assert len({(str(ln.get_linestyle()), ln.get_marker()) for ln in lines}) == len(lines) == 3
    sizes = [ln.get_markersize() for ln in lines]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 3  # coinciding markers nest
    assert [ln.get_label() for ln in lines] == ["previous_token", "induction (= previous_token)", "duplicate_token"]
    plt.close(fig)
    # the sweep figure draws its heads-per-role panel this way
    data, ck = _fake_sweep({"a": 10}, [0, 500, 1000])
    (svg,) = sweep_figures(data, ck, tmp_path, formats=("svg",))
    assert "previous_token (= induction)" in svg.read_text()  # the fake sweep gives both detectors the same scores


def test_an_out_folder_holding_other_files_and_no_sweep_is_refused(runner, tmp_path):
    """As every command refuses a non-empty output folder: one line, exit 4, nothing written (before Ray starts)."""
    pytest.importorskip("ray", reason="the sweep command needs Ray (the test extra installs it)")
    from headlens.reports.cli.main import cli

    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    res = runner.invoke(cli, ["sweep", "-m", "demo", "--out", str(out)])
    assert res.exit_code == 4, res.output
    assert "holds no sweep" in res.stderr and "--overwrite" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_counts_are_worded_in_the_singular_for_one():
    from headlens.reports.cli.sweep import _count

    assert [_count(n, "task") for n in (0, 1, 2)] == ["0 tasks", "1 task", "2 tasks"]


def test_named_models_are_planned_as_their_folders(minilm_dir, tmp_path, monkeypatch):
    """``-m minilm`` is the named model, as everywhere else, not a Hub id; a folder of that name here wins."""
    from headlens.analyses.demo import MODEL_DIR

    monkeypatch.chdir(tmp_path)
    demo, minilm = plan_tasks(["demo", "minilm"])
    assert Path(demo.model) == MODEL_DIR and demo.label == "demo"
    assert Path(minilm.model) == Path(minilm_dir) and minilm.label == "minilm" and minilm.revision is None
    (tmp_path / "minilm").mkdir()
    (local,) = plan_tasks(["minilm"])
    assert Path(local.model) == (tmp_path / "minilm").resolve()


def test_a_second_ctrl_c_stops_at_once():
    """The first stop signal is recorded for a safe stop; a second Ctrl-C raises at once (an escape from a hung ray.init)."""
    import signal

    from headlens.probes.cluster.interrupts import Interrupts

    interrupts = Interrupts()
    interrupts.record(signal.SIGINT)
    assert interrupts.received == signal.SIGINT
    interrupts.record(signal.SIGTERM)  # a later SIGTERM is only recorded
    with pytest.raises(KeyboardInterrupt):
        interrupts.record(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()


def test_without_an_address_the_sweep_starts_its_own_ray_even_beside_a_running_cluster(monkeypatch):
    """With no address Ray joins a cluster it finds in /tmp/ray/ray_current_cluster (a `ray start`
    on the machine) and then refuses num_cpus with a traceback (seen in a CI run); the sweep asks
    for a local instance of its own, so that file is never read.  RAY_ADDRESS still joins."""
    from headlens.probes.cluster import session as engine

    calls: list[dict] = []

    class FakeRay:
        def is_initialized(self):
            return False

        def init(self, **kw):
            calls.append(kw)

        def cluster_resources(self):
            return {"CPU": 1.0}

        def shutdown(self):
            calls.append({"shutdown": True})

    monkeypatch.setattr(engine, "import_ray", FakeRay)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with engine.ray_session(None, 2):
        pass
    assert calls[0]["address"] == "local" and calls[0]["num_cpus"] == 2 and calls[-1] == {"shutdown": True}
    calls.clear()
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    with engine.ray_session(None, 2):
        pass
    assert calls[0]["address"] == "auto" and "num_cpus" not in calls[0]
